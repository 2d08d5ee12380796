"""Per-ticket directories on any host: local and remote workspaces, worktrees, git facts, gates
and the agent's environment.
"""

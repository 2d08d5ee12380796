"""Checks of the machine a workflow runs on, which a valid WORKFLOW.md cannot prove by itself.

`symphony check` prints what these find and the daemon logs it at start: a problem here does not
stop the daemon (the machine may be fixed while it runs), but every dispatch would fail on it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from symphony.cli.agent_homes import temp_home_warnings
from symphony.config.sections import Settings

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_WRAPPERS = frozenset({"exec", "nohup", "command", "env"})
_SHELL_WORDS = frozenset({"cd", ".", "source", "set", "export", "if", "for", "while", "{", "("})


def agent_command_problem(
    command: str, environ: Mapping[str, str], *, setting: str = "codex.command"
) -> str | None:
    """Why the agent command cannot start on this machine, or None when it looks runnable.

    The command runs under `bash -lc` in the workspace: only its program is checked, after
    leading `NAME=value` assignments and wrappers such as `exec` or `env`, with `$VAR` expanded
    from `environ`. Anything the shell alone can resolve (a relative path, a glob, a function,
    a compound command) is given the benefit of the doubt.
    """
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return f"{setting} is not a valid shell command: {exc}"
    program = None
    for word in words:
        if word.startswith("-"):
            return None  # a wrapper's option: what it takes as its argument is the shell's business
        if not _ASSIGNMENT.match(word) and word not in _WRAPPERS:
            program = word
            break
    if program is None or program in _SHELL_WORDS:
        return None
    unset: list[str] = []

    def expand(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in environ:
            unset.append(name)
        return environ.get(name, "")

    program = _VARIABLE.sub(expand, program)
    if unset or any(char in program for char in "`*?[~"):
        return None
    if "/" in program:
        path = Path(program)
        if not path.is_absolute():
            return None  # relative to the workspace, which does not exist yet
        if not path.exists():
            return f"the agent program {program} ({setting}) does not exist"
        if not os.access(path, os.X_OK) or path.is_dir():
            return f"the agent program {program} ({setting}) is not an executable file"
        return None
    if shutil.which(program, path=environ.get("PATH", os.defpath)) is not None:
        return None
    packages = {"codex": "@openai/codex", "claude": "@anthropic-ai/claude-code"}
    how = (
        f"install it (`npm install -g {packages[program]}`)"
        if program in packages
        else "install it"
    )
    return (
        f"the agent program `{program}` ({setting}) was not found on PATH; {how} or give its "
        "full path, or every dispatch fails with codex_not_found"
    )


def preflight_warnings(settings: Settings) -> list[str]:
    """What `check` warns about and the daemon logs at start: unknown keys, a missing agent."""
    warnings = list(settings.warnings)
    environ = {**os.environ, "SYMPHONY_WORKFLOW_DIR": str(settings.workflow_dir)}
    worktrees = settings.workspace.worktrees
    # With worker hosts the repository is a path on each host, which this machine cannot see.
    local = (
        worktrees is not None and worktrees.repository.startswith("/") and not settings.worker.hosts
    )
    if worktrees is not None and local and not os.path.isdir(worktrees.repository):
        warnings.append(
            f"workspace.repository {worktrees.repository} does not exist, so no ticket can "
            "get a worktree"
        )
    if settings.worker.kubernetes is not None and shutil.which("kubectl") is None:
        warnings.append("worker.kubernetes is set but `kubectl` is not on PATH: no run can start")
    if settings.worker.hosts and shutil.which("ssh") is None:
        warnings.append("worker.ssh_hosts are set but `ssh` is not on PATH: no run can start")
    for kind in used_agent_kinds(settings):
        command = settings.session_settings(kind).command
        if not command:
            warnings.append(f"{kind}.command is not set, so runs on {kind} cannot start")
            continue
        if settings.worker.hosts or settings.worker.kubernetes is not None:
            continue  # it runs on the hosts or in pods, whose PATH this machine cannot see
        problem = agent_command_problem(command, environ, setting=f"{kind}.command")
        if problem is not None:
            warnings.append(problem)
    warnings += temp_home_warnings(settings, os.environ)
    return warnings


def used_agent_kinds(settings: Settings) -> list[str]:
    """The agent kinds the workflow runs: `agent.kind` and every stage's own."""
    kinds = [settings.agent.kind]
    if settings.machine is not None:
        kinds += [s.agent for s in settings.machine.stages if s.agent is not None]
    return list(dict.fromkeys(kinds))

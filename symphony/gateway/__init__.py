"""The model gateway: a loopback HTTP server in the daemon between an agent and its provider.

An agent that would call its model with an API key (codex with `OPENAI_API_KEY`, Claude Code
with `ANTHROPIC_API_KEY`, an ACP agent given either) gets a per-run token and the gateway's
address instead (`tokens`). The gateway (`server`) checks the token, asks the daemon whether
the run may call its model now (a decision of the core: the run still runs, its ticket is
within budget, its agent kind is not paused), swaps in the real key, streams the provider's
answer back unchanged, and reports the usage the provider put in it (`usage`) and any limit
it answered with. The real key stays in the daemon.
"""

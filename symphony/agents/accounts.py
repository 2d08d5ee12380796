"""Which account an agent kind of a workflow runs on, as an opaque name.

A provider's limit belongs to the account that met it (`symphony.core.limits`): two workflows of
one daemon whose codex runs on the same API key or the same login share one pause, while a
workflow on another key goes on. The account is named by a digest of what the agent
authenticates with: the variables of its backend (`Backend.env_names`: its API key, endpoint,
the folder its login lives in) and `HOME`, as the workflow's `agent.env` or else the daemon's
environment gives them. The digest reveals nothing of a key; it only tells two apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from symphony.agents.registry import BACKENDS, Backend

DIGEST_CHARS = 12


def account_of(backend: Backend, agent_env: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """The account `backend`'s agent of a workflow with `agent_env` runs on."""
    names = sorted({*backend.env_names, backend.sandbox_home.variable or "HOME", "HOME"})
    given = {name: agent_env.get(name, environ.get(name, "")) for name in names}
    text = "\0".join([backend.kind, *(f"{name}={value}" for name, value in given.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def accounts(agent_env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The account of every agent kind symphony drives, for a workflow with `agent_env`."""
    return {kind: account_of(b, agent_env, environ) for kind, b in BACKENDS.items()}

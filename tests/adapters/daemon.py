"""The real daemon against a tracker's local HTTP stand-in, for every adapter's end-to-end test:
one workflow shape (the scripted agent, four slots) and one way to start the orchestrator."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from tests.harness import FAKE_AGENT, Running

DEMO_AGENT = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "demo_agent.py"
"""The quickstart's demonstration agent: in stage mode it plans, implements and reports."""


def write_workflow(
    root: Path,
    tracker: Mapping[str, Any],
    *,
    polling_ms: int = 500,
    agent: Mapping[str, Any] | None = None,
    stages: Mapping[str, Any] | None = None,
    agent_program: Path = FAKE_AGENT,
) -> Path:
    """WORKFLOW.md for the daemon on a tracker's stand-in; `stages` (the `stages:` section, with
    `escalation_state` alongside) puts it in stage mode, usually with `agent_program=DEMO_AGENT`."""
    config: dict[str, Any] = {
        "tracker": dict(tracker),
        "polling": {"interval_ms": polling_ms},
        "workspace": {"root": "workspaces"},
        "agent": {
            "max_concurrent_agents": 4,
            "env_passthrough": ["FAKE_AGENT_*", "DEMO_AGENT_*"],
            **(agent or {}),
        },
        "codex": {
            "command": f"{sys.executable} {agent_program}",
            "read_timeout_ms": 10_000,
            "turn_timeout_ms": 60_000,
        },
    }
    if stages is not None:
        config["stages"] = dict(stages)
        config["escalation_state"] = "Needs Attention"
    path = root / "WORKFLOW.md"
    # Unsorted: the stages' order is the machine's (the first stage is where work starts).
    text = yaml.safe_dump(config, sort_keys=False)
    path.write_text(f"---\n{text}---\nWork on {{{{ issue.identifier }}}}\n")
    return path


def start_daemon(
    workflow: Path, env: Mapping[str, str], *, timeout: float = 60, poll_s: float | None = None
) -> Running:
    """The orchestrator on `workflow`, with the process environment plus `env`."""
    environ = {**os.environ, **env}
    settings = load_settings(workflow, environ)
    return Running(
        Orchestrator(settings, environ=environ, watch=False), timeout=timeout, poll_s=poll_s
    )

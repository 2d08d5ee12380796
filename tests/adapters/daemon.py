"""The real daemon against a tracker's local HTTP stand-in, for every adapter's end-to-end test:
one workflow shape (the scripted agent, four slots) and one way to start the orchestrator."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from symphony.config import load_settings
from symphony.orchestrator import Orchestrator
from tests.test_orchestrator import FAKE_AGENT, Running


def write_workflow(
    root: Path,
    tracker: Mapping[str, Any],
    *,
    polling_ms: int = 500,
    agent: Mapping[str, Any] | None = None,
) -> Path:
    config: dict[str, Any] = {
        "tracker": dict(tracker),
        "polling": {"interval_ms": polling_ms},
        "workspace": {"root": "workspaces"},
        "agent": {"max_concurrent_agents": 4, **(agent or {})},
        "codex": {
            "command": f"{sys.executable} {FAKE_AGENT}",
            "read_timeout_ms": 10_000,
            "turn_timeout_ms": 60_000,
        },
    }
    path = root / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(config)}---\nWork on {{{{ issue.identifier }}}}\n")
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

"""The daemon end to end against a local GitHub REST fake: the real Orchestrator, the github
adapter over HTTP with ETags, and the scripted agent in a real subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.config import load_settings
from symphony.orchestrator import Orchestrator
from tests.adapters.github.fake_github import FakeGitHub, serve
from tests.test_orchestrator import Running

pytestmark = pytest.mark.slow

FAKE_AGENT = Path(__file__).resolve().parents[2] / "fakes" / "fake_app_server.py"
TOKEN = "ghp_e2e_token_value_0001"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(token=TOKEN)
    with serve(fake):
        yield fake


def write_workflow(root: Path, api_url: str) -> Path:
    config: dict[str, Any] = {
        "tracker": {
            "kind": "github",
            "provider": {"repository": "acme/widgets", "api_url": api_url},
            "active_states": ["Todo", "In Progress"],
            "terminal_states": ["Done", "Cancelled"],
        },
        "polling": {"interval_ms": 500},
        "workspace": {"root": "workspaces"},
        "agent": {"max_concurrent_agents": 4},
        "codex": {
            "command": f"{sys.executable} {FAKE_AGENT}",
            "read_timeout_ms": 10_000,
            "turn_timeout_ms": 60_000,
        },
    }
    path = root / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(config)}---\nWork on {{{{ issue.identifier }}}}\n")
    return path


def start(tmp_path: Path, github: FakeGitHub, scenario: str, **extra: str) -> Running:
    env = dict(os.environ)
    env.update(FAKE_AGENT_SCENARIO=scenario, GITHUB_TOKEN=TOKEN, **extra)
    settings = load_settings(write_workflow(tmp_path, github.base), env)
    return Running(Orchestrator(settings, environ=env, watch=False), timeout=60, poll_s=0.2)


def seed(github: FakeGitHub) -> None:
    github.add(1, labels=["status:todo", "bug"])
    github.add(2, labels=["status:in-progress"])
    github.add(3, labels=["status:todo"], pull_request=True)
    github.add(4, labels=["status:todo"], blocked_by=[5])
    github.add(5, labels=["bug"])


async def test_only_eligible_issues_run_and_the_agent_moves_them_on_github(
    tmp_path: Path, github: FakeGitHub
) -> None:
    seed(github)
    run = start(
        tmp_path,
        github,
        "tool,complete",
        FAKE_AGENT_TOOL="github_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )
    try:
        await run.until(
            lambda: (
                "status:human-review" in github.labels_of(1)
                and "status:human-review" in github.labels_of(2)
                and not run.orchestrator.state.running
            )
        )
        # Let a few more polls pass: nothing else may be dispatched.
        await asyncio.sleep(1.5)
    finally:
        await run.stop()
    assert run.dispatched == {"1", "2"}
    assert github.labels_of(1) == ["bug", "status:human-review"]
    assert github.labels_of(2) == ["status:human-review"]
    assert github.labels_of(3) == ["status:todo"]  # the pull request was never touched
    conditional = [r for r in github.requests if r.method == "GET" and r.if_none_match]
    assert conditional and all(r.status in (200, 304) for r in conditional)
    assert any(r.status == 304 for r in github.requests)


async def test_closing_or_relabelling_terminal_on_github_stops_the_run(
    tmp_path: Path, github: FakeGitHub
) -> None:
    github.add(1, labels=["status:todo"])
    github.add(2, labels=["status:in-progress"])
    run = start(tmp_path, github, "hang")
    try:
        await run.until(lambda: set(run.orchestrator.state.running) == {"1", "2"})
        github.edit(1, state="closed")
        github.edit(2, labels=["status:cancelled"])
        run.orchestrator.request_refresh()
        await run.until(lambda: not run.orchestrator.state.running)
        assert not run.orchestrator.state.retry_attempts
    finally:
        await run.stop()
    assert run.dispatched == {"1", "2"}

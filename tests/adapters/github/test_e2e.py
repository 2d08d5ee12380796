"""The daemon end to end against a local GitHub REST fake: the real Orchestrator, the github
adapter over HTTP with ETags, and the scripted agent in a real subprocess."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.github.fake_github import FakeGitHub, serve
from tests.harness import Running

pytestmark = pytest.mark.slow

TOKEN = "ghp_e2e_token_value_0001"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(token=TOKEN)
    with serve(fake):
        yield fake


def start(tmp_path: Path, github: FakeGitHub, scenario: str, **extra: str) -> Running:
    tracker = {
        "kind": "github",
        "provider": {"repository": "acme/widgets", "api_url": github.base},
        "active_states": ["Todo", "In Progress"],
        "terminal_states": ["Done", "Cancelled"],
    }
    env = {"FAKE_AGENT_SCENARIO": scenario, "GITHUB_TOKEN": TOKEN, **extra}
    return start_daemon(write_workflow(tmp_path, tracker), env, poll_s=0.2)


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
    assert_within_secondary_limits(github)


def rest_points(method: str, path: str) -> int:
    # GitHub's secondary limits: a REST read costs 1 point, a write 5; GraphQL has its own.
    if path.endswith("/graphql"):
        return 0
    return 1 if method in ("GET", "HEAD", "OPTIONS") else 5


def assert_within_secondary_limits(github: FakeGitHub) -> None:
    """GitHub documents at most 100 concurrent requests and 900 REST points per minute."""
    traffic = github.traffic  # type: ignore[attr-defined]
    assert traffic.arrivals, "no request reached the fake"
    assert traffic.peak_in_flight <= 100
    assert traffic.most_in_window(60.0, rest_points) <= 900


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

"""The daemon end to end against a local GitLab REST fake: the real Orchestrator, the gitlab
adapter over HTTP, and the scripted agent in a real subprocess."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.gitlab.fake_gitlab import FakeGitLab, serve
from tests.harness import Running

pytestmark = pytest.mark.slow

TOKEN = "glpat-e2e_token_value_0001"


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    fake = FakeGitLab(token=TOKEN)
    with serve(fake):
        yield fake


def start(tmp_path: Path, gitlab: FakeGitLab, scenario: str, **extra: str) -> Running:
    tracker = {
        "kind": "gitlab",
        "provider": {"project": "acme/platform/widgets", "base_url": gitlab.base},
        "active_states": ["Todo", "In Progress"],
        "terminal_states": ["Done", "Cancelled"],
    }
    env = {"FAKE_AGENT_SCENARIO": scenario, "GITLAB_TOKEN": TOKEN, **extra}
    return start_daemon(write_workflow(tmp_path, tracker), env, poll_s=0.2)


async def test_only_eligible_issues_run_and_the_agent_moves_them_on_gitlab(
    tmp_path: Path, gitlab: FakeGitLab
) -> None:
    gitlab.add(1, labels=["workflow::todo", "bug"])
    gitlab.add(2, labels=["workflow::in progress"])
    gitlab.add(3, labels=["bug"])  # no state label: outside the scope
    gitlab.add(4, labels=["workflow::todo"], blocked_by=[5])  # its blocker is open
    gitlab.add(5, labels=["bug"])
    gitlab.add(6, labels=["workflow::todo"], state="closed")  # closed: Done, whatever its label
    run = start(
        tmp_path,
        gitlab,
        "tool,complete",
        FAKE_AGENT_TOOL="gitlab_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )
    try:
        await run.until(
            lambda: (
                "workflow::human review" in gitlab.labels_of(1)
                and "workflow::human review" in gitlab.labels_of(2)
                and not run.orchestrator.state.running
            )
        )
        # Let a few more polls pass: nothing else may be dispatched.
        await asyncio.sleep(1.5)
    finally:
        await run.stop()
    assert run.dispatched == {"1", "2"}
    assert gitlab.labels_of(1) == ["bug", "workflow::human review"]
    assert gitlab.labels_of(2) == ["workflow::human review"]
    assert gitlab.labels_of(4) == ["workflow::todo"]
    moves = [r for r in gitlab.requests if r.method == "PUT"]
    assert len(moves) == 2  # one PUT per move
    lists = [r for r in gitlab.requests if r.method == "GET" and r.path.endswith("/issues")]
    assert all(r.query["state"] == ["opened"] for r in lists if "labels" in r.query)


async def test_closing_or_relabelling_terminal_on_gitlab_stops_the_run(
    tmp_path: Path, gitlab: FakeGitLab
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    gitlab.add(2, labels=["workflow::in progress"])
    run = start(tmp_path, gitlab, "hang")
    try:
        await run.until(lambda: set(run.orchestrator.state.running) == {"1", "2"})
        gitlab.edit(1, state="closed")
        gitlab.edit(2, labels=["workflow::cancelled"])
        run.orchestrator.request_refresh()
        await run.until(lambda: not run.orchestrator.state.running)
        assert not run.orchestrator.state.retry_attempts
    finally:
        await run.stop()
    assert run.dispatched == {"1", "2"}


async def test_a_429_reset_is_respected_before_anything_else_is_sent(
    tmp_path: Path, gitlab: FakeGitLab
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    gitlab.rate_limit_next(2.0)
    run = start(tmp_path, gitlab, "hang")
    try:
        await run.until(lambda: "1" in run.orchestrator.state.running)
    finally:
        await run.stop()
    assert gitlab.limited_at is not None and gitlab.limited_until is not None
    first, *later = gitlab.requests
    assert first.status == 429
    # Polls kept ticking every 500 ms during the block, yet nothing reached the server until
    # the RateLimit-Reset instant; then the adapter resumed and the issue was dispatched.
    assert later, "the adapter never resumed"
    assert all(r.at >= gitlab.limited_until for r in later)
    assert gitlab.limited_until - gitlab.limited_at >= 2.0

"""Publishing and following on in-memory fakes: the tracker, the agent sessions and the code host
live in the test's process, the clock is the test's, and the branch is really pushed to a bare
repository. The daemon pushes and opens the pull request before the hand-off, runs one fix for
a red check while the ticket waits in review, merges by policy and moves the ticket to Done."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.base.pulls import Check, CheckState, PullState, PullStatus, ReviewDecision
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.store import Store
from tests.factories import make_issue
from tests.fakes.agent import Call, ScriptedAgent
from tests.fakes.clock import FakeClock
from tests.fakes.code_host import MemoryCodeHost
from tests.fakes.tracker import MemoryTracker
from tests.harness import Running

DONE = Call("report_outcome", {"outcome": "done", "summary": "Implemented it."})
# Each run commits something of its own, so every push moves the branch.
COMMIT = (
    "git init -q -b symphony-work && git config user.email t@example.test && "
    "git config user.name tester && git commit -q --allow-empty -m start"
)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def start(
    tmp_path: Path, tracker: MemoryTracker, agent: ScriptedAgent, host: MemoryCodeHost,
    clock: FakeClock, store: Store | None = None,
    prompt: str = "Work on {{ issue.identifier }}", **sections: Any,
) -> Running:  # fmt: skip
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote))
    host.remote = remote
    config = {
        "tracker": {"kind": "local", "provider": {"path": "board"}, "terminal_states": ["Done"]},
        "workspace": {"root": "workspaces"},
        "hooks": {"after_create": COMMIT, "before_run": "git commit -q --allow-empty -m run"},
        "stages": {
            "implement": {
                "states": ["Ready", "Rework"],
                "on_success": "Human Review",
                "publish": {"base": "main", "labels": ["agent"]},
            }
        },
        "repository": {
            "kind": "github",
            "slug": "acme/widgets",
            "token": "t0ken-42",
            "remote": str(remote),
        },
        "follow": {"interval_ms": 1000, "on_merged": "Done", "on_changes_requested": "Rework"},
        **sections,
    }
    workflow = tmp_path / "WORKFLOW.md"
    workflow.write_text(f"---\n{yaml.safe_dump(config)}---\n{prompt}\n")
    orchestrator = Orchestrator(
        load_settings(workflow, {}), environ={}, clock=clock, session_factory=agent,
        tracker=tracker, watch=False, code_host_factory=host, store=store,
    )  # fmt: skip
    return Running(orchestrator, timeout=10)


async def next_pass(run: Running, clock: FakeClock, seconds: float = 2.0) -> None:
    clock.advance(seconds)
    run.orchestrator.request_refresh()
    await run.until(lambda: run.orchestrator.health.last_tick_at == clock.wall())


async def passes_until(run: Running, clock: FakeClock, reached: Callable[[], bool]) -> None:
    """Let the follow interval pass until `reached()` (a reading is answered beside the loop,
    so what it asks for shows a pass or two later)."""
    for _ in range(20):
        if reached():
            return
        await next_pass(run, clock)
        await run.until(
            lambda: not any(r.reading for r in run.orchestrator.state.pull_requests.values())
        )
    raise AssertionError("not reached in 20 follow intervals")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_a_hand_off_is_pushed_opened_fixed_once_when_red_and_merged_when_green(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1", state="Ready"))
    agent, host = ScriptedAgent(DONE), MemoryCodeHost()
    run = start(tmp_path, tracker, agent, host, clock,
                merge={"policy": "when_green_and_approved"})  # fmt: skip
    state = run.orchestrator.state
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Human Review")
        (pull,) = host.pulls.values()
        assert (pull.branch, pull.base, pull.title) == (
            "symphony-work",
            "main",
            "A-1: Title of A-1",
        )
        assert pull.head_sha == git("-C", str(host.remote), "rev-parse", "symphony-work").strip()
        assert "Implemented it." in host.bodies[pull.number]
        assert list(tracker.links["A-1"]) == [pull.url]
        evidence = [c.body for c in tracker.comments["id-A-1"]]
        assert not any("t0ken-42" in b for b in evidence)
        assert state.pull_requests["id-A-1"].number == pull.number

        # A red required check: one fix run, while the ticket waits in Human Review.
        red = Check("ci", CheckState.FAILED, required=True, output="FAILED test_add")
        host.statuses[pull.number] = PullStatus(pull, True, ReviewDecision.NONE, (red,))
        await passes_until(run, clock, lambda: "id-A-1" in state.running)
        await run.until(lambda: len(agent.sessions) == 2 and agent.sessions[1].stopped)
        assert "FAILED test_add" in agent.sessions[1].prompts[0]
        assert tracker.by_identifier("A-1").state == "Human Review"
        await run.until(lambda: "id-A-1" not in state.claimed)
        fixed = host.pulls[pull.number].head_sha
        assert fixed != pull.head_sha  # the fix run's commit was pushed
        await next_pass(run, clock)
        assert len(agent.sessions) == 2  # the same failure is never fixed twice

        # Green on the new head and approved: merged at that head, the ticket Done.
        green = Check("ci", CheckState.PASSED, required=True)
        host.statuses[pull.number] = PullStatus(
            host.pulls[pull.number], True, ReviewDecision.APPROVED, (green,)
        )
        await passes_until(run, clock, lambda: tracker.by_identifier("A-1").state == "Done")
        assert host.merges == [(pull.number, fixed, host.merges[0][2])]
        assert any("merged by the daemon" in c.body for c in tracker.comments["id-A-1"])
        assert state.pull_requests["id-A-1"].state is PullState.MERGED
        await passes_until(run, clock, lambda: "id-A-1" not in state.kept_workspaces)
        await run.until(lambda: not (tmp_path / "workspaces" / "A-1").exists())
    finally:
        await run.stop()


async def test_a_push_the_remote_refuses_escalates_with_its_words(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1", state="Ready"))
    agent, host = ScriptedAgent(DONE), MemoryCodeHost()
    run = start(tmp_path, tracker, agent, host, clock)
    assert host.remote is not None
    hook = host.remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'branch is protected by policy' >&2\nexit 1\n")
    hook.chmod(0o755)
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Needs Attention")
        (comment,) = [c.body for c in tracker.comments["id-A-1"] if "could not publish" in c.body]
        assert "branch is protected by policy" in comment
        assert host.pulls == {}
    finally:
        await run.stop()


async def test_followed_pull_requests_survive_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    tracker = MemoryTracker(make_issue("A-1", state="Ready"))
    agent, host = ScriptedAgent(DONE), MemoryCodeHost()
    store, _ = Store.open(tmp_path / "state.db")
    run = start(tmp_path, tracker, agent, host, clock, store=store)
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Human Review")
        await run.until(lambda: "id-A-1" in run.orchestrator.state.pull_requests)
    finally:
        await run.stop()
        store.close()
    record = run.orchestrator.state.pull_requests["id-A-1"]
    store, _ = Store.open(tmp_path / "state.db")
    saved = store.load(clock.wall()).pull_requests["id-A-1"]
    store.close()
    # What is timed by the monotonic clock (the next reading, how long checks pend) starts
    # again after a restart; everything else is kept.
    assert dataclasses.replace(saved, next_read_at=0.0, pending_since=None) == dataclasses.replace(
        record, next_read_at=0.0, pending_since=None
    )


async def test_a_code_host_webhook_about_pull_requests_makes_the_daemon_read_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker()
    run = start(tmp_path, tracker, ScriptedAgent(DONE), MemoryCodeHost(), clock)
    daemon = run.orchestrator
    try:
        assert daemon.view.follow_webhook("github", {"x-github-event": "check_run"})
        assert daemon.view.follow_webhook("github", {"x-github-event": "pull_request_review"})
        assert not daemon.view.follow_webhook("github", {"x-github-event": "issues"})
        assert not daemon.view.follow_webhook("gitlab", {"x-gitlab-event": "Pipeline Hook"})
    finally:
        await run.stop()

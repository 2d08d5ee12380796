"""The orchestrator's scheduling behaviour on in-memory fakes: a tracker in a dict, agent
sessions in the test's own process and a clock the test moves. No subprocess is started, so
these run in the fast tier; the same behaviours against the real subprocesses are in
`tests/e2e/test_orchestrator.py`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from symphony import core
from symphony.agents import AgentLaunch
from symphony.base.events import EventKind
from symphony.base.issue import Issue
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.tracker.contract import TRACKER_STATUS, TrackerError
from tests.factories import make_issue
from tests.fakes.agent import COMPLETE, FAIL, HANG, Call, Limited, ScriptedAgent, ScriptedSession
from tests.fakes.clock import FakeClock
from tests.fakes.tracker import MemoryTracker
from tests.harness import Running


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def start(
    tmp_path: Path,
    tracker: MemoryTracker,
    agent: ScriptedAgent,
    clock: FakeClock,
    *,
    agent_settings: dict[str, Any] | None = None,
    codex: dict[str, Any] | None = None,
    **sections: Any,
) -> Running:
    """The daemon on a WORKFLOW.md of its own (it reads the file back on every poll), with the
    tracker, the agent and the clock replaced by the fakes."""
    workflow = tmp_path / "WORKFLOW.md"
    tracker_section: dict[str, Any] = {
        "kind": "local",
        "provider": {"path": "board"},
        "terminal_states": ["Done", "Cancelled"],
    }
    if "stages" not in sections:  # in stage mode the stages name the active states
        tracker_section["active_states"] = ["Todo", "In Progress"]
    config = {
        "tracker": tracker_section,
        "workspace": {"root": "workspaces"},
        "agent": agent_settings or {},
        "codex": codex or {},
        **sections,
    }
    workflow.write_text(f"---\n{yaml.safe_dump(config)}---\nWork on {{{{ issue.identifier }}}}\n")
    orchestrator = Orchestrator(
        load_settings(workflow, {}),
        environ={},
        clock=clock,
        session_factory=agent,
        tracker=tracker,
        watch=False,
    )
    return Running(orchestrator, timeout=5)


async def wake_after(run: Running, clock: FakeClock, seconds: float) -> None:
    """Let `seconds` pass on the daemon's clock, and return once the daemon has made a whole
    pass at that time (its listeners hear of a pass when it is over)."""
    clock.advance(seconds)
    run.orchestrator.request_refresh()
    await run.until(lambda: run.orchestrator.health.last_tick_at == clock.wall())


async def test_tickets_run_in_parallel_up_to_the_limit_and_the_rest_wait(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(*(make_issue(f"A-{n}") for n in (1, 2, 3)))
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock, agent_settings={"max_concurrent_agents": 2})
    try:
        await run.until(lambda: len(run.orchestrator.state.running) == 2)
        assert sorted(run.orchestrator.state.running) == ["id-A-1", "id-A-2"]  # oldest first
        tracker.set_state("A-1", "Done")  # a person closes one: its slot goes to the next
        run.orchestrator.request_refresh()
        await run.until(lambda: "id-A-1" not in run.orchestrator.state.running)
        await wake_after(run, clock, 30)  # the next poll
        await run.until(lambda: "id-A-3" in run.orchestrator.state.running)
        assert run.max_running == 2
        assert agent.of("A-1")[0].stopped
    finally:
        await run.stop()


async def test_an_active_ticket_gets_continuation_turns_on_one_session_up_to_max_turns(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    agent = ScriptedAgent(COMPLETE)
    run = start(tmp_path, tracker, agent, clock, agent_settings={"max_turns": 3})
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.retry_attempts)
        (session,) = agent.sessions
        assert len(session.prompts) == 3 and session.stopped
        assert "Work on A-1" in session.prompts[0]
        assert all("turn" in p.lower() for p in session.prompts[1:])  # continuation guidance
        retry = run.orchestrator.state.retry_attempts["id-A-1"]
        assert retry.kind is core.RetryKind.CONTINUATION and retry.error is None
        assert retry.due_at == pytest.approx(clock.now + core.CONTINUATION_DELAY_S)
    finally:
        await run.stop()


async def test_a_ticket_moved_to_a_terminal_state_stops_its_run_and_loses_its_workspace(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock)
    workspace = tmp_path / "workspaces" / "A-1"
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
        assert workspace.is_dir()
        tracker.set_state("A-1", "Done")
        run.orchestrator.request_refresh()
        await run.until(lambda: not run.orchestrator.state.running and not workspace.exists())
        assert agent.of("A-1")[0].stopped
        assert "id-A-1" not in run.orchestrator.state.retry_attempts
        assert "id-A-1" not in run.orchestrator.state.claimed
    finally:
        await run.stop()


async def test_a_failed_turn_is_retried_after_its_backoff_and_counted_by_kind(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    agent = ScriptedAgent(per_ticket={"A-1": (FAIL,)})
    run = start(tmp_path, tracker, agent, clock)
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.retry_attempts)
        retry = run.orchestrator.state.retry_attempts["id-A-1"]
        assert retry.attempt == 1 and "turn_failed" in (retry.error or "")
        assert run.orchestrator.health.failures == {"agent_turn": 1}
        await wake_after(run, clock, core.FAILURE_BASE_DELAY_S - 1)
        assert len(agent.sessions) == 1  # not yet due
        await wake_after(run, clock, 1.5)
        await run.until(lambda: len(agent.sessions) == 2)
        await run.until(lambda: run.orchestrator.state.retry_attempts["id-A-1"].attempt == 2)
        # The second failure waits twice as long.
        again = run.orchestrator.state.retry_attempts["id-A-1"]
        assert again.due_at == pytest.approx(clock.now + 2 * core.FAILURE_BASE_DELAY_S)
    finally:
        await run.stop()


async def test_a_silent_agent_is_stopped_as_stalled_and_retried(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock, codex={"stall_timeout_ms": 60_000})
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
        await wake_after(run, clock, 30)
        assert "id-A-1" in run.orchestrator.state.running  # quiet, not yet stalled
        await wake_after(run, clock, 31)
        await run.until(lambda: "id-A-1" in run.orchestrator.state.retry_attempts)
        assert agent.sessions[0].stopped
        retry = run.orchestrator.state.retry_attempts["id-A-1"]
        assert "stalled" in (retry.error or "")
        assert run.orchestrator.health.failures == {"agent_stalled": 1}
    finally:
        await run.stop()


async def test_a_stop_ends_every_run_and_leaves_nothing_claimed(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"), make_issue("A-2"))
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock)
    await run.until(lambda: len(run.orchestrator.state.running) == 2)
    await run.stop()
    assert all(session.stopped for session in agent.sessions)
    assert not run.orchestrator.state.running


async def test_in_stage_mode_the_daemon_moves_a_reported_plan_to_review_and_posts_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    plan = Call("report_outcome", {"outcome": "done", "summary": "Planned.", "plan": "1. Do it"})
    agent = ScriptedAgent(plan)
    run = start(
        tmp_path,
        tracker,
        agent,
        clock,
        stages={
            "plan": {"states": ["Todo"], "on_success": "Plan Review"},
            "implement": {"states": ["Ready"], "on_success": "Human Review"},
        },
    )
    try:
        await run.until(lambda: tracker.moves == [("A-1", "Plan Review")])
        await run.until(lambda: "id-A-1" not in run.orchestrator.state.claimed)
        (session,) = agent.sessions
        assert session.answers[0].success
        assert len(session.prompts) == 1  # a report ends the run: no continuation turn
        bodies = [c.body for c in tracker.comments["id-A-1"]]
        assert any(b.startswith("1. Do it") and b.endswith("symphony · plan") for b in bodies)
        assert any("Stage `plan` is done; moving the ticket to Plan Review." in b for b in bodies)
        assert tracker.by_identifier("A-1").state == "Plan Review"
        assert "id-A-1" not in run.orchestrator.state.retry_attempts
    finally:
        await run.stop()


class GatedTracker(MemoryTracker):
    """A tracker whose next read of tickets by id waits for the test to let it through."""

    def __init__(self, *issues: Issue) -> None:
        super().__init__(*issues)
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()
        """Set while a held read is in flight."""

    def hold(self) -> None:
        self.gate, self.waiting = asyncio.Event(), asyncio.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()
        self.gate = None

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return await super().fetch_issues_by_ids(ids)


async def test_a_refresh_asked_during_a_read_gets_a_pass_of_its_own(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = GatedTracker(make_issue("A-1"))
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock)
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
        await wake_after(run, clock, 1)
        (session,) = agent.sessions
        armed = False

        def agent_speaks_as_the_pass_ends() -> None:
            nonlocal armed
            if armed:
                armed = False
                session._emit(EventKind.NOTIFICATION, message="still working")

        run.orchestrator.view.add_listener(agent_speaks_as_the_pass_ends)
        before = tracker.reads
        tracker.hold()
        run.orchestrator.request_refresh()
        await tracker.waiting.wait()  # the pass's reconcile read is in flight
        run.orchestrator.request_refresh()  # a webhook, a person's refresh
        armed = True
        tracker.release()
        # The refresh is answered by a pass of its own (two reads) after the one in flight (two
        # more), at once: the clock stands still, so no poll is due.
        await run.until(lambda: tracker.reads >= before + 4)
    finally:
        await run.stop()


async def test_an_invalid_workflow_pauses_dispatch_and_a_valid_one_resumes_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock)
    workflow = tmp_path / "WORKFLOW.md"
    good = workflow.read_text()
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
        workflow.write_text(good.replace("---\n", "---\n: not yaml", 1))  # a broken edit
        tracker.issues["id-A-2"] = make_issue("A-2")
        await wake_after(run, clock, 30)
        health = run.orchestrator.health
        assert health.workflow_error is not None
        assert "id-A-1" in run.orchestrator.state.running  # the run goes on
        assert "id-A-2" not in run.orchestrator.state.running  # nothing new starts
        # The supervisor stays ready, and is told which file, since when, and why.
        ready = await readyz(run)
        (note,) = ready.json()["notes"]
        assert ready.status_code == 200
        since = health.workflow_error_since
        assert since is not None
        assert note.startswith(f"{workflow} was rejected at {since.isoformat()}; the daemon")
        assert health.workflow_error in note
        workflow.write_text(good.replace("Work on", "Now work on"))
        await wake_after(run, clock, 30)
        await run.until(lambda: "id-A-2" in run.orchestrator.state.running)
        assert health.workflow_error is None and health.workflow_error_since is None
        assert "Now work on A-2" in agent.of("A-2")[0].prompts[0]
        events = [row["event"] for row in run.orchestrator.activity.newest()]
        assert events.count("workflow_rejected") == 1 and "workflow_reloaded" in events
    finally:
        await run.stop()


async def readyz(run: Running) -> httpx.Response:
    """The supervisor's question, asked of the daemon's HTTP app."""
    from symphony.observability.server import create_app

    app = create_app(run.orchestrator.view)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://d") as c:
        return await c.get("/readyz")


class FailingTracker(MemoryTracker):
    """A tracker whose reads fail while `down` is set."""

    down = False

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if self.down:
            raise TrackerError(TRACKER_STATUS, "the tracker answered 502")
        return await super().fetch_issues_by_states(states)


async def test_a_failing_tracker_shows_in_the_health_and_dispatch_resumes_when_it_answers(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = FailingTracker()
    agent = ScriptedAgent(HANG)
    run = start(tmp_path, tracker, agent, clock)
    try:
        await wake_after(run, clock, 1)
        tracker.down = True
        tracker.issues["id-A-1"] = make_issue("A-1")
        await wake_after(run, clock, 30)
        await wake_after(run, clock, 30)
        assert run.orchestrator.health.tracker_error == "tracker_status: the tracker answered 502"
        assert not run.orchestrator.state.running
        unready = await readyz(run)
        assert unready.status_code == 503
        assert unready.json()["reasons"] == [
            "its tracker did not answer at the last read: tracker_status: the tracker answered 502"
        ]
        tracker.down = False
        await wake_after(run, clock, 30)
        await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
        assert run.orchestrator.health.tracker_error is None
        assert (await readyz(run)).status_code == 200
        events = [row["event"] for row in run.orchestrator.activity.newest()]
        assert events.count("tracker_failed") == 1 and events.count("tracker_recovered") == 1
    finally:
        await run.stop()


async def test_a_ticket_closed_while_no_daemon_ran_loses_its_workspace_at_start_up(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"))
    run = start(tmp_path, tracker, ScriptedAgent(HANG), clock)
    await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
    await run.stop()
    workspace = tmp_path / "workspaces" / "A-1"
    assert workspace.is_dir()  # kept for the next run
    tracker.set_state("A-1", "Done")
    run = start(tmp_path, tracker, ScriptedAgent(HANG), clock)
    try:
        await run.until(lambda: not workspace.exists())
        assert not run.orchestrator.state.running
    finally:
        await run.stop()


async def test_start_up_reads_no_terminal_ticket_when_no_workspace_is_there_to_remove(
    tmp_path: Path, clock: FakeClock
) -> None:
    done = [make_issue(f"OLD-{n}", state="Done") for n in range(3)]
    # A folder named like a Done ticket that symphony did not make is no reason to read them.
    (tmp_path / "workspaces" / "OLD-1").mkdir(parents=True)
    tracker = MemoryTracker(*done, make_issue("A-1"))
    run = start(tmp_path, tracker, ScriptedAgent(HANG), clock)
    try:
        await run.until(lambda: "id-A-1" in run.orchestrator.state.running)
        assert ("Done", "Cancelled") not in tracker.states_read
        assert (tmp_path / "workspaces" / "OLD-1").is_dir()
    finally:
        await run.stop()
    # Once symphony has made a workspace, start-up reads the terminal tickets again.
    tracker.set_state("A-1", "Done")
    run = start(tmp_path, tracker, ScriptedAgent(HANG), clock)
    try:
        await run.until(lambda: not (tmp_path / "workspaces" / "A-1").exists())
        assert tracker.states_read.count(("Done", "Cancelled")) == 1
    finally:
        await run.stop()


async def test_a_usage_limit_pauses_the_agent_and_every_ticket_goes_on_after_the_reset(
    tmp_path: Path, clock: FakeClock
) -> None:
    tracker = MemoryTracker(make_issue("A-1"), make_issue("B-1"), make_issue("C-1"))
    reset = clock.wall() + timedelta(minutes=10)
    limit = ProviderLimit(LimitKind.USAGE, reset, "resets in 10 minutes")

    class LimitedOnce(ScriptedAgent):
        """A-1's first run meets the limit; every other run works until stopped."""

        def __call__(self, launch: AgentLaunch) -> ScriptedSession:
            first = launch.workspace.name == "A-1" and not self.of("A-1")
            session = ScriptedSession(launch, [Limited(limit)] if first else [HANG])
            self.sessions.append(session)
            return session

    agent = LimitedOnce()
    run = start(tmp_path, tracker, agent, clock, agent_settings={"max_concurrent_agents": 1})
    daemon = run.orchestrator
    try:
        await run.until(lambda: "codex" in daemon.state.agent_pauses)
        first_thread = agent.of("A-1")[0].pid
        # Until the reset nothing starts on codex: not the ticket that met it, nor the others.
        await wake_after(run, clock, 300)
        assert not daemon.state.running
        assert [s.launch.workspace.name for s in agent.sessions] == ["A-1"]
        snapshot = daemon.snapshot()
        assert snapshot["limits"][0]["agent"] == "codex"
        assert snapshot["limits"][0]["until"] == reset.isoformat()
        retry = daemon.state.retry_attempts["id-A-1"]
        assert retry.kind is core.RetryKind.LIMITED and retry.attempt == 0
        await wake_after(run, clock, 301)
        await run.until(lambda: "id-A-1" in daemon.state.running)
        assert "codex" not in daemon.state.agent_pauses
        assert daemon.state.running["id-A-1"].label == "resumed after its agent's limit"
        resumed = agent.of("A-1")[1]
        assert resumed.launch.resume_thread_id == f"thread-{first_thread}"  # its own thread
        await run.until(lambda: bool(resumed.prompts))
        assert "limit" in resumed.prompts[0] and "restarted" not in resumed.prompts[0]
        # No failure was counted, said on the ticket or spent from its retries.
        assert not daemon.health.failures
        assert not tracker.comments
        events = [row["event"] for row in daemon.activity.newest(50)]
        assert events.count("limited") == 1 and events.count("resumed") == 1
    finally:
        await run.stop()


async def test_a_limits_words_are_masked_before_the_pause_keeps_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A provider may echo the key it refused; the pause is saved, shown and sent in notices,
    so its words are masked like any agent message, and bounded."""
    key = "sk-live-0123456789abcdefghij"
    tracker = MemoryTracker(make_issue("A-1"))
    limit = ProviderLimit(
        LimitKind.RATE, clock.wall() + timedelta(minutes=1), f"key {key} is limited " + "x" * 900
    )
    agent = ScriptedAgent(Limited(limit))
    run = start(tmp_path, tracker, agent, clock, agent_settings={"env": {"OPENAI_API_KEY": key}})
    try:
        await run.until(lambda: "codex" in run.orchestrator.state.agent_pauses)
        pause = run.orchestrator.state.agent_pauses["codex"]
        assert key not in pause.detail and pause.detail.startswith("key ")
        assert len(pause.detail) <= 300
        assert key not in json.dumps(run.orchestrator.snapshot(), default=str)
    finally:
        await run.stop()

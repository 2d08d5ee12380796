"""Pausing and resuming dispatch for the whole daemon (`core.operator`)."""

from __future__ import annotations

from datetime import timedelta

from symphony import core
from tests.factories import WALL, make_issue, make_settings


def test_while_paused_nothing_starts_and_every_candidate_says_why() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    assert core.operator.pause(state, "ada", WALL) is True
    assert core.operator.pause(state, "bob", WALL + timedelta(minutes=1)) is False  # once
    assert core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL) == []
    ((issue, why),) = core.explain_dispatch(state, [make_issue("A-1")], settings, WALL)
    assert issue.identifier == "A-1"
    assert why == f"waits: dispatch is paused by ada since {WALL.isoformat(timespec='seconds')} " \
        "(resume it to go on)"  # fmt: skip
    ended = core.operator.resume(state)
    assert ended is not None and ended.by == "ada"
    assert core.operator.resume(state) is None
    (start,) = core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    assert isinstance(start, core.StartWorker)


def test_a_running_agent_goes_on_and_due_retries_wait_for_the_resume() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    core.on_worker_exit(
        state, "id-A-1", core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 0.0
    )
    entry = state.retry_attempts["id-A-1"]
    core.select_dispatches(state, [make_issue("B-1")], settings, 0.0, WALL)
    core.operator.pause(state, "ada", WALL)
    assert "id-B-1" in state.running  # not stopped by the pause
    assert core.due_retries(state, entry.due_at + 60) == []
    core.operator.resume(state)
    assert core.due_retries(state, entry.due_at + 60) == [entry]

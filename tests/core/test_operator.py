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


def test_a_stopped_ticket_stays_put_until_it_changes_or_is_retried() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    issue = make_issue("A-1", updated_at=WALL)
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    stop = core.operator.stop(state, issue.id, "ada")
    assert isinstance(stop, core.StopWorker) and stop.reason is core.StopReason.PERSON
    assert core.operator.stop(state, issue.id, "ada") is None  # acknowledged again, no second stop
    effects = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 1.0)
    assert [type(e) for e in effects] == [core.Released]  # no retry, no continuation
    assert issue.id not in state.claimed and issue.id in state.kept_workspaces
    # The same ticket, unchanged: held, and check says why.
    assert core.select_dispatches(state, [issue], settings, 2.0, WALL) == []
    ((_, why),) = core.explain_dispatch(state, [issue], settings, WALL)
    assert why == "stopped by a person: waits until it changes or is retried"
    # Edited since (a person added a comment): dispatched again.
    edited = make_issue("A-1", updated_at=WALL + timedelta(minutes=1))
    (start,) = core.select_dispatches(state, [edited], settings, 3.0, WALL)
    assert isinstance(start, core.StartWorker)


def test_retry_now_ends_a_hold_or_a_backoff() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    issue = make_issue("A-1")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.operator.stop(state, issue.id, "ada")
    core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 1.0)
    assert core.operator.retry_now(state, issue.id, 2.0) is None
    (start,) = core.select_dispatches(state, [issue], settings, 2.0, WALL)
    assert isinstance(start, core.StartWorker)
    core.on_worker_exit(
        state, issue.id, core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 3.0
    )
    entry = state.retry_attempts[issue.id]
    assert entry.due_at > 3.0
    assert core.operator.retry_now(state, issue.id, 3.5) is None
    assert core.due_retries(state, 3.5) == [entry]
    assert core.operator.retry_now(state, "id-B-1", 4.0) == (
        "it is neither waiting for a retry nor stopped by a person"
    )
    assert core.operator.stop(state, "id-B-1", "ada") == "no agent is running for it"

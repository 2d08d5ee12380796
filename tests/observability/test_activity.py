"""The fleet activity list: scheduling decisions described for people, newest first."""

from __future__ import annotations

from datetime import timedelta

from symphony import core
from symphony.observability.activity import Activity
from tests.factories import WALL, make_issue, make_settings


def test_a_failed_run_reads_as_dispatch_then_retry_with_its_error() -> None:
    state, settings, activity = core.SchedulerState(), make_settings(), Activity()
    for effect in core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL):
        activity.add_effect(WALL, effect)
    exit_effects = core.on_worker_exit(
        state,
        "id-A-1",
        core.WorkerExit(False, core.Failure("turn 1", "the turn failed", "turn_failed")),
        settings,
        5.0,
    )
    for effect in exit_effects:
        activity.add_effect(WALL + timedelta(seconds=5), effect)

    retried, dispatched = activity.newest()
    assert dispatched["event"] == "dispatched" and dispatched["issue_identifier"] == "A-1"
    assert dispatched["message"] == "first run (Todo)" and dispatched["level"] == "info"
    assert retried["event"] == "retrying" and retried["level"] == "warning"
    assert retried["message"] == "attempt 1 in 10 s: turn 1: turn_failed: the turn failed"
    assert retried["at"] == (WALL + timedelta(seconds=5)).isoformat()


def test_a_clean_exit_reads_as_continuing_and_a_terminal_move_as_stopping() -> None:
    state, settings, activity = core.SchedulerState(), make_settings(), Activity()
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    for effect in core.on_worker_exit(state, "id-A-1", core.WorkerExit(True), settings, 5.0):
        activity.add_effect(WALL, effect)
    core.select_dispatches(state, [make_issue("A-2")], settings, 6.0, WALL)
    done = make_issue("A-2", state="Done")
    for effect in core.apply_refresh(state, [done], ["id-A-2"], settings):
        activity.add_effect(WALL, effect)

    events = [(row["issue_identifier"], row["event"]) for row in activity.newest()]
    assert ("A-1", "continuing") in events
    assert ("A-2", "stopping") in events
    stopping = next(row for row in activity.newest() if row["event"] == "stopping")
    assert stopping["message"].startswith("terminal: ")
    # A workspace removal is bookkeeping, not something a person needs to read about.
    assert all(row["event"] != "remove_workspace" for row in activity.newest())


def test_activity_is_bounded_and_filters_by_ticket() -> None:
    activity = Activity(size=3)
    for n in range(5):
        activity.add(WALL, "dispatched", f"run {n}", issue_identifier=f"A-{n % 2}")
    assert [row["message"] for row in activity.newest()] == ["run 4", "run 3", "run 2"]
    assert [row["message"] for row in activity.newest(2)] == ["run 4", "run 3"]
    assert [row["message"] for row in activity.for_issue("A-1")] == ["run 3"]

"""The pure scheduling core, driven with a fake clock (`now` is plain seconds)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.base.hosts import CLUSTER
from symphony.base.issue import Issue
from symphony.config.kubernetes import KubernetesSettings
from symphony.config.sections import HostSpec, Settings, SshSettings, WorkerSettings
from symphony.config.stages import Report, StageOutcome
from symphony.core.footprint import Footprint
from tests.factories import WALL, make_issue, make_settings, make_stage


def dispatch(
    state: core.SchedulerState, *issues: Issue, now: float = 0.0, **kw: object
) -> list[str]:
    settings = make_settings(**kw)  # type: ignore[arg-type]
    effects = core.select_dispatches(state, issues, settings, now, WALL)
    return [e.issue.identifier for e in effects if isinstance(e, core.StartWorker)]


def running(*issues: Issue, now: float = 0.0) -> core.SchedulerState:
    state = core.SchedulerState()
    core.select_dispatches(state, issues, make_settings(), now, WALL)
    assert set(state.running) == {i.id for i in issues}
    return state


# Explaining the next dispatch (what `symphony check` prints)


def test_explanation_names_each_reason_a_ticket_waits() -> None:
    from symphony.base.issue import BlockerRef

    state = running(make_issue("R-1", state="In Progress"))
    issues = [
        make_issue("R-1", state="In Progress"),
        make_issue("A-1", priority=1),
        make_issue(
            "A-2",
            dispatchable=False,
            blocked_by=(
                BlockerRef("b1", "B-1", "In Progress"),
                BlockerRef("b2", "B-2", "Done"),
                BlockerRef(None, "B-3", None),
            ),
        ),
        make_issue("A-3", dispatchable=False),
        make_issue("A-4", labels=("frontend",)),
        make_issue("A-5", state="In Progress"),
        make_issue("A-6"),
        make_issue("A-7"),
    ]
    settings = make_settings(max_concurrent=4, per_state={"in progress": 1})
    verdicts = dict(
        (i.identifier, why) for i, why in core.explain_dispatch(state, issues, settings)
    )
    assert verdicts["R-1"] == "already running"
    assert verdicts["A-1"] is None
    assert verdicts["A-2"] == "blocked by B-1 (In Progress), B-3 (state unknown)"
    assert verdicts["A-3"] == "the tracker marks it not dispatchable (blocked there)"
    assert verdicts["A-4"] is None
    assert verdicts["A-5"] == (
        "waits for a slot: at most 1 at once in 'In Progress' "
        "(agent.max_concurrent_agents_by_state)"
    )
    assert verdicts["A-6"] is None  # the last free slot
    assert verdicts["A-7"] == "waits for a slot: all 4 agents busy (agent.max_concurrent_agents)"
    assert state.running.keys() == {"id-R-1"}  # explaining changed nothing


def test_explanation_names_the_missing_required_labels() -> None:
    settings = make_settings(required_labels=("backend", "ready"))
    issues = [
        make_issue("A-1", labels=("backend",)),
        make_issue("A-2", labels=("backend", "ready")),
    ]
    verdicts = core.explain_dispatch(core.SchedulerState(), issues, settings)
    assert {i.identifier: why for i, why in verdicts} == {
        "A-1": "lacks required label 'ready'",
        "A-2": None,
    }


def test_explanation_and_dispatch_agree() -> None:
    issues = [make_issue(f"A-{n}", priority=n % 4 + 1) for n in range(12)]
    settings = make_settings(max_concurrent=5)
    explained = [
        i.identifier
        for i, why in core.explain_dispatch(core.SchedulerState(), issues, settings)
        if why is None
    ]
    assert explained == dispatch(core.SchedulerState(), *issues, max_concurrent=5)


# Dispatch eligibility and order


def test_dispatch_order_is_priority_then_oldest_then_identifier() -> None:
    old = datetime(2025, 1, 1, tzinfo=UTC)
    new = datetime(2025, 6, 1, tzinfo=UTC)
    issues = [
        make_issue("Z-9", priority=None, created_at=old),
        make_issue("B-2", priority=2, created_at=new),
        make_issue("B-1", priority=2, created_at=new),
        make_issue("A-3", priority=2, created_at=old),
        make_issue("C-1", priority=1, created_at=None),
        make_issue("D-1", priority=3, created_at=None),
    ]
    assert dispatch(core.SchedulerState(), *issues) == ["C-1", "A-3", "B-1", "B-2", "D-1", "Z-9"]


def test_priorities_outside_one_to_four_sort_with_null() -> None:
    issues = [
        make_issue("A-1", priority=0),
        make_issue("A-2", priority=7),
        make_issue("A-3", priority=4),
    ]
    assert dispatch(core.SchedulerState(), *issues) == ["A-3", "A-1", "A-2"]


def test_missing_created_at_sorts_after_dated_issues() -> None:
    issues = [make_issue("A-1"), make_issue("A-2", created_at=datetime(2025, 1, 1, tzinfo=UTC))]
    assert dispatch(core.SchedulerState(), *issues) == ["A-2", "A-1"]


def test_non_dispatchable_issue_is_not_eligible() -> None:
    issues = [make_issue("A-1", dispatchable=False), make_issue("A-2")]
    assert dispatch(core.SchedulerState(), *issues) == ["A-2"]


def test_required_labels_match_case_insensitively_after_normalization() -> None:
    issues = [
        make_issue("A-1", labels=("agent", "backend")),
        make_issue("A-2", labels=("backend",)),
    ]
    assert dispatch(core.SchedulerState(), *issues, required_labels=("agent",)) == ["A-1"]


def test_blank_required_label_matches_no_issue() -> None:
    assert (
        dispatch(core.SchedulerState(), make_issue("A-1", labels=("x",)), required_labels=("",))
        == []
    )


def test_only_active_non_terminal_states_are_dispatched() -> None:
    issues = [
        make_issue("A-1", state=" todo "),
        make_issue("A-2", state="Done"),
        make_issue("A-3", state="Human Review"),
        make_issue("A-4", state="IN PROGRESS"),
    ]
    assert dispatch(core.SchedulerState(), *issues) == ["A-1", "A-4"]


def test_state_in_both_active_and_terminal_lists_is_not_dispatched() -> None:
    issues = [make_issue("A-1", state="Done")]
    assert (
        dispatch(core.SchedulerState(), *issues, active=("Todo", "Done"), terminal=("Done",)) == []
    )


def test_issue_missing_required_fields_is_not_eligible() -> None:
    issues = [make_issue("A-1", title=""), make_issue("A-2")]
    assert dispatch(core.SchedulerState(), *issues) == ["A-2"]


def test_claimed_or_running_issue_is_not_dispatched_twice() -> None:
    state = core.SchedulerState()
    issue = make_issue("A-1")
    assert dispatch(state, issue) == ["A-1"]
    assert dispatch(state, issue) == []
    state.running.clear()  # claimed (e.g. retry queued) but not running
    assert dispatch(state, issue) == []


def test_global_limit_caps_dispatches() -> None:
    issues = [make_issue(f"A-{n}") for n in range(5)]
    state = core.SchedulerState()
    assert len(dispatch(state, *issues, max_concurrent=2)) == 2
    assert dispatch(state, *issues, max_concurrent=2) == []


def test_per_state_limit_caps_that_state_only() -> None:
    issues = [make_issue(f"T-{n}", state="Todo") for n in range(3)] + [
        make_issue("P-1", state="In Progress")
    ]
    state = core.SchedulerState()
    assert dispatch(state, *issues, per_state={"todo": 1}) == ["P-1", "T-0"]
    assert sum(1 for e in state.running.values() if e.issue.state == "Todo") == 1


def test_dispatch_records_running_entry_and_claim() -> None:
    state = core.SchedulerState()
    dispatch(state, make_issue("A-1"), now=42.0)
    entry = state.running["id-A-1"]
    assert entry.started_at == 42.0 and entry.attempt is None
    assert "id-A-1" in state.claimed


# Reconciliation


def test_reconciliation_with_no_running_issues_is_a_noop() -> None:
    state = core.SchedulerState()
    assert core.apply_refresh(state, [], [], make_settings()) == []
    assert core.detect_stalls(state, make_settings(), 1e9) == []


def test_active_state_refresh_updates_running_issue_snapshot() -> None:
    state = running(make_issue("A-1"))
    fresh = make_issue("A-1", state="In Progress", title="Renamed")
    assert core.apply_refresh(state, [fresh], ["id-A-1"], make_settings()) == []
    assert state.running["id-A-1"].issue.title == "Renamed"


def _stop_then_exit(
    state: core.SchedulerState, fresh: list[Issue]
) -> tuple[list[core.Effect], list[core.Effect]]:
    settings = make_settings()
    stops = core.apply_refresh(state, fresh, ["id-A-1"], settings)
    exits = core.on_worker_exit(
        state, "id-A-1", core.WorkerExit(False, core.Failure("worker", "stopped")), settings, 5.0
    )
    return stops, exits


def test_non_active_state_stops_run_without_workspace_cleanup() -> None:
    state = running(make_issue("A-1"))
    stops, exits = _stop_then_exit(state, [make_issue("A-1", state="Human Review")])
    assert [type(e) for e in stops] == [core.StopWorker]
    assert stops[0].reason is core.StopReason.INACTIVE  # type: ignore[union-attr]
    assert not any(isinstance(e, core.RemoveWorkspace) for e in exits)
    assert not any(isinstance(e, core.RetryScheduled) for e in exits)
    assert "id-A-1" not in state.claimed


def test_terminal_state_stops_run_and_removes_workspace_after_exit() -> None:
    state = running(make_issue("A-1"))
    stops, exits = _stop_then_exit(state, [make_issue("A-1", state="Done")])
    assert stops[0].reason is core.StopReason.TERMINAL  # type: ignore[union-attr]
    assert core.RemoveWorkspace("A-1") in exits
    assert "id-A-1" not in state.claimed and not state.retry_attempts


def test_issue_missing_from_refresh_stops_run_and_keeps_workspace() -> None:
    state = running(make_issue("A-1"))
    stops, exits = _stop_then_exit(state, [])
    assert stops[0].reason is core.StopReason.MISSING  # type: ignore[union-attr]
    assert not any(isinstance(e, core.RemoveWorkspace) for e in exits)


def test_active_but_unroutable_issue_stops_run_and_keeps_workspace() -> None:
    state = running(make_issue("A-1"))
    stops, exits = _stop_then_exit(state, [make_issue("A-1", dispatchable=False)])
    assert stops[0].reason is core.StopReason.UNROUTABLE  # type: ignore[union-attr]
    assert not any(isinstance(e, core.RemoveWorkspace) for e in exits)


def test_stopping_run_keeps_its_slot_until_the_worker_exits() -> None:
    state = running(make_issue("A-1"))
    core.apply_refresh(
        state, [make_issue("A-1", state="Human Review")], ["id-A-1"], make_settings()
    )
    assert dispatch(state, make_issue("A-2"), max_concurrent=1) == []
    core.on_worker_exit(state, "id-A-1", core.WorkerExit(False), make_settings(), 1.0)
    assert dispatch(state, make_issue("A-2"), max_concurrent=1) == ["A-2"]


def test_a_stopping_run_is_not_stopped_twice() -> None:
    state = running(make_issue("A-1"))
    settings = make_settings()
    assert core.apply_refresh(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings)
    assert core.apply_refresh(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings) == []


def test_a_move_the_runs_own_tool_call_made_lets_its_turn_finish() -> None:
    state = running(make_issue("A-1"))
    settings = make_settings()
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.STARTED)
    moved = make_issue("A-1", state="human review ")
    assert core.apply_refresh(state, [moved], ["id-A-1"], settings) == []
    assert state.running["id-A-1"].issue.state == "human review "
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.SUCCEEDED)
    assert core.apply_refresh(state, [moved], ["id-A-1"], settings) == []
    # Anyone else's move afterwards stops it at once.
    (stop,) = core.apply_refresh(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings)
    assert stop.reason is core.StopReason.TERMINAL  # type: ignore[union-attr]


def test_a_move_to_another_state_than_the_runs_own_call_named_stops_it() -> None:
    state = running(make_issue("A-1"))
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.STARTED)
    (stop,) = core.apply_refresh(
        state, [make_issue("A-1", state="Cancelled")], ["id-A-1"], make_settings()
    )
    assert stop.reason is core.StopReason.TERMINAL  # type: ignore[union-attr]


def test_a_failed_own_move_explains_nothing() -> None:
    state = running(make_issue("A-1"))
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.STARTED)
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.FAILED)
    (stop,) = core.apply_refresh(
        state, [make_issue("A-1", state="Human Review")], ["id-A-1"], make_settings()
    )
    assert stop.reason is core.StopReason.INACTIVE  # type: ignore[union-attr]


def test_a_call_that_names_no_state_explains_only_the_first_change_after_it() -> None:
    state = running(make_issue("A-1"))
    settings = make_settings()
    core.on_own_move(state, "id-A-1", None, core.MovePhase.STARTED)
    review = make_issue("A-1", state="Human Review")
    assert core.apply_refresh(state, [review], ["id-A-1"], settings) == []
    assert core.apply_refresh(state, [review], ["id-A-1"], settings) == []
    (stop,) = core.apply_refresh(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings)
    assert stop.reason is core.StopReason.TERMINAL  # type: ignore[union-attr]


def test_an_own_move_is_recognized_in_the_spelling_the_tracker_reads_it_back() -> None:
    state = running(make_issue("A-1"))
    settings = make_settings()
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.STARTED)
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.SUCCEEDED)
    labelled = make_issue("A-1", state="status:human-review")
    assert core.apply_refresh(state, [labelled], ["id-A-1"], settings) == []
    assert core.apply_refresh(state, [labelled], ["id-A-1"], settings) == []
    (stop,) = core.apply_refresh(
        state, [make_issue("A-1", state="status:blocked")], ["id-A-1"], settings
    )
    assert stop.reason is core.StopReason.INACTIVE  # type: ignore[union-attr]


def test_an_own_move_that_left_the_ticket_unroutable_still_stops_the_run() -> None:
    state = running(make_issue("A-1"))
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.STARTED)
    fresh = make_issue("A-1", state="Human Review", dispatchable=False)
    (stop,) = core.apply_refresh(state, [fresh], ["id-A-1"], make_settings())
    assert isinstance(stop, core.StopWorker)


def test_a_run_that_moved_itself_ends_without_a_new_turn_when_its_worker_exits() -> None:
    state = running(make_issue("A-1"))
    settings = make_settings()
    core.on_own_move(state, "id-A-1", "Human Review", core.MovePhase.STARTED)
    core.apply_refresh(state, [make_issue("A-1", state="Human Review")], ["id-A-1"], settings)
    exits = core.on_worker_exit(state, "id-A-1", core.WorkerExit(True), settings, 5.0)
    # The continuation check finds it no longer active and releases it, as after any turn.
    (retry,) = [e for e in exits if isinstance(e, core.RetryScheduled)]
    assert retry.entry.kind is core.RetryKind.CONTINUATION


# Worker exits and retries


def test_normal_exit_schedules_a_one_second_continuation_retry_attempt_one() -> None:
    state = running(make_issue("A-1"), now=100.0)
    effects = core.on_worker_exit(state, "id-A-1", core.WorkerExit(True), make_settings(), 160.0)
    (scheduled,) = effects
    assert isinstance(scheduled, core.RetryScheduled)
    assert scheduled.entry.attempt == 1 and scheduled.delay_s == 1.0
    assert scheduled.entry.due_at == 161.0 and scheduled.entry.kind is core.RetryKind.CONTINUATION
    assert "id-A-1" in state.completed and "id-A-1" in state.claimed
    assert state.totals.ended_seconds == 60.0


@pytest.mark.parametrize(
    ("previous", "attempt", "delay"), [(None, 1, 10.0), (1, 2, 20.0), (2, 3, 40.0), (4, 5, 160.0)]
)
def test_abnormal_exit_backs_off_exponentially_from_ten_seconds(
    previous: int | None, attempt: int, delay: float
) -> None:
    state = core.SchedulerState()
    core.select_dispatches(state, [make_issue("A-1")], make_settings(), 0.0, WALL)
    state.running["id-A-1"].attempt = previous
    (scheduled,) = core.on_worker_exit(
        state,
        "id-A-1",
        core.WorkerExit(False, core.Failure("turn 1", "boom")),
        make_settings(),
        0.0,
    )
    assert isinstance(scheduled, core.RetryScheduled)
    assert (scheduled.entry.attempt, scheduled.delay_s) == (attempt, delay)


def test_retry_backoff_is_capped_by_max_retry_backoff_ms() -> None:
    agent = make_settings(max_backoff_ms=25_000).agent
    assert core.retry_delay_s(2, core.RetryKind.FAILURE, agent) == 20.0
    assert core.retry_delay_s(3, core.RetryKind.FAILURE, agent) == 25.0
    assert core.retry_delay_s(10_000, core.RetryKind.FAILURE, agent) == 25.0


def test_retry_entry_records_attempt_due_time_identifier_and_error() -> None:
    state = running(make_issue("A-1", url="https://t/A-1"))
    core.on_worker_exit(
        state,
        "id-A-1",
        core.WorkerExit(False, core.Failure("turn 1", "boom", "turn_failed")),
        make_settings(),
        7.0,
    )
    entry = state.retry_attempts["id-A-1"]
    assert (entry.identifier, entry.attempt, entry.due_at, entry.error, entry.url) == (
        "A-1",
        1,
        17.0,
        "turn 1: turn_failed: boom",
        "https://t/A-1",
    )


def test_exit_of_unknown_worker_is_ignored() -> None:
    assert (
        core.on_worker_exit(
            core.SchedulerState(), "nope", core.WorkerExit(True), make_settings(), 0
        )
        == []
    )


def test_stall_detection_stops_stalled_run_and_schedules_a_retry() -> None:
    state = running(make_issue("A-1"), now=0.0)
    settings = make_settings(stall_timeout_ms=60_000)
    assert core.detect_stalls(state, settings, 60.0) == []
    (stop,) = core.detect_stalls(state, settings, 60.5)
    assert isinstance(stop, core.StopWorker) and stop.reason is core.StopReason.STALLED
    (retry,) = core.on_worker_exit(state, "id-A-1", core.WorkerExit(False), settings, 61.0)
    assert isinstance(retry, core.RetryScheduled)
    assert (
        retry.entry.attempt == 1
        and retry.delay_s == 10.0
        and "stalled" in (retry.entry.error or "")
    )


def test_a_failure_counts_by_its_kind_never_by_its_turn_number() -> None:
    state = running(make_issue("A-1"), now=0.0)
    entry = state.running["id-A-1"]
    turn_7 = core.Failure("turn 7", "boom", "turn_failed", core.FailureReason.AGENT_TURN)
    assert core.failure_reason(entry, core.WorkerExit(False, turn_7)) is (
        core.FailureReason.AGENT_TURN
    )
    assert core.failure_reason(entry, core.WorkerExit(True)) is None
    # A worker that says nothing about why is a bug of ours, not the agent's.
    assert core.failure_reason(entry, core.WorkerExit(False)) is core.FailureReason.INTERNAL


def test_a_stalled_run_counts_as_agent_stalled_and_a_stopped_one_not_at_all() -> None:
    state = running(make_issue("A-1"), make_issue("A-2"), now=0.0)
    settings = make_settings(stall_timeout_ms=60_000)
    core.on_agent_event(state, "id-A-2", AgentEvent("notification"), 60.0, WALL, None)
    core.detect_stalls(state, settings, 61.0)  # A-1 stalled; A-2 spoke a second ago
    stalled, alive = state.running["id-A-1"], state.running["id-A-2"]
    # Stopped for a stall, its worker reports a cancelled turn: still a stall.
    cancelled = core.Failure("turn 1", "cancelled", "turn_cancelled", core.FailureReason.AGENT_TURN)
    assert core.failure_reason(stalled, core.WorkerExit(False, cancelled)) is (
        core.FailureReason.AGENT_STALLED
    )
    alive.stop_reason = core.StopReason.INACTIVE  # a person moved the ticket away
    assert core.failure_reason(alive, core.WorkerExit(False, cancelled)) is None


def test_stall_clock_restarts_at_each_agent_event() -> None:
    state = running(make_issue("A-1"), now=0.0)
    settings = make_settings(stall_timeout_ms=60_000)
    core.on_agent_event(state, "id-A-1", AgentEvent("notification"), 50.0, WALL)
    assert core.detect_stalls(state, settings, 100.0) == []
    assert core.detect_stalls(state, settings, 110.5)


def test_stall_detection_is_off_when_timeout_is_not_positive() -> None:
    state = running(make_issue("A-1"), now=0.0)
    assert core.detect_stalls(state, make_settings(stall_timeout_ms=0), 1e9) == []


def _queue_retry(state: core.SchedulerState, issue: Issue, now: float = 0.0) -> core.RetryEntry:
    core.select_dispatches(state, [issue], make_settings(), now, WALL)
    core.on_worker_exit(
        state,
        issue.id,
        core.WorkerExit(False, core.Failure("turn 1", "boom")),
        make_settings(),
        now,
    )
    return state.retry_attempts[issue.id]


def test_due_retries_wait_for_their_time() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    assert core.due_retries(state, entry.due_at - 0.001) == []
    assert core.due_retries(state, entry.due_at) == [entry]


def test_due_retry_of_still_active_issue_dispatches_with_its_attempt() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    effects = core.on_retries_refreshed(
        state, [entry], [make_issue("A-1")], make_settings(), 10.0, WALL
    )
    assert effects == [
        core.StartWorker(
            make_issue("A-1"), 1, label="retry 1/5 after error", run_kind=core.RunKind.RETRY
        )
    ]
    assert state.running["id-A-1"].attempt == 1 and not state.retry_attempts


def test_slot_exhaustion_requeues_retry_with_explicit_error() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    core.select_dispatches(state, [make_issue("B-1")], make_settings(), 0.0, WALL)
    (requeued,) = core.on_retries_refreshed(
        state, [entry], [make_issue("A-1")], make_settings(max_concurrent=1), 10.0, WALL
    )
    assert isinstance(requeued, core.RetryScheduled)
    assert requeued.entry.error == "no available orchestrator slots"
    assert requeued.entry.attempt == 2 and requeued.delay_s == 20.0


def test_a_retry_whose_read_failed_backs_off_but_a_rate_limited_one_waits_for_the_reset() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    (failed,) = core.on_retries_refreshed(state, [entry], None, make_settings(), 10.0, WALL)
    assert isinstance(failed, core.RetryScheduled)
    assert (failed.entry.attempt, failed.delay_s) == (2, 20.0)
    assert failed.entry.error == "retry refresh failed"
    limited = state.retry_attempts["id-A-1"]
    (waits,) = core.on_retries_refreshed(
        state, [limited], None, make_settings(), 30.0, WALL, limited_for_s=1.5
    )
    assert isinstance(waits, core.RetryScheduled)
    # The same attempt, due at the tracker's reset: a rate limit is no failure of the run.
    assert (waits.entry.attempt, waits.delay_s, waits.entry.due_at) == (2, 1.5, 31.5)
    assert waits.entry.error == "waiting for the tracker's rate limit"


def test_due_retry_of_terminal_issue_releases_claim_and_removes_workspace() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    effects = core.on_retries_refreshed(
        state, [entry], [make_issue("A-1", state="Done")], make_settings(), 10.0, WALL
    )
    assert core.RemoveWorkspace("A-1") in effects
    assert "id-A-1" not in state.claimed and not state.retry_attempts


def test_due_retry_of_vanished_issue_releases_claim() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    effects = core.on_retries_refreshed(state, [entry], [], make_settings(), 10.0, WALL)
    assert [type(e) for e in effects] == [core.Released]
    assert "id-A-1" not in state.claimed


def test_due_retry_of_non_active_issue_releases_without_cleanup() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    effects = core.on_retries_refreshed(
        state, [entry], [make_issue("A-1", state="Human Review")], make_settings(), 10.0, WALL
    )
    assert [type(e) for e in effects] == [core.Released]


def test_failed_retry_refresh_requeues_with_next_attempt() -> None:
    state = core.SchedulerState()
    entry = _queue_retry(state, make_issue("A-1"))
    (requeued,) = core.on_retries_refreshed(state, [entry], None, make_settings(), 10.0, WALL)
    assert isinstance(requeued, core.RetryScheduled)
    assert requeued.entry.error == "retry refresh failed" and requeued.entry.attempt == 2


def test_next_wakeup_is_the_earliest_of_tick_and_due_retry() -> None:
    state = core.SchedulerState()
    settings = make_settings(stall_timeout_ms=0)
    assert core.next_wakeup(state, 30.0, settings) == 30.0
    _queue_retry(state, make_issue("A-1"), now=5.0)
    assert core.next_wakeup(state, 30.0, settings) == 15.0


def test_next_wakeup_includes_the_earliest_possible_stall() -> None:
    state = running(make_issue("A-1"), now=0.0)
    settings = make_settings(stall_timeout_ms=20_000)
    assert core.next_wakeup(state, 30.0, settings) == 20.0
    core.on_agent_event(state, "id-A-1", AgentEvent("notification"), 15.0, WALL)
    assert core.next_wakeup(state, 30.0, settings) == 30.0


def test_shutdown_stops_every_run_and_schedules_nothing() -> None:
    state = running(make_issue("A-1"), make_issue("A-2"))
    stops = core.stop_all(state)
    assert {e.issue_id for e in stops if isinstance(e, core.StopWorker)} == {"id-A-1", "id-A-2"}
    for issue_id in ("id-A-1", "id-A-2"):
        assert (
            core.on_worker_exit(state, issue_id, core.WorkerExit(False), make_settings(), 1.0) == []
        )
    assert not state.claimed and not state.retry_attempts


# Agent telemetry


def test_absolute_token_totals_are_counted_once_across_repeated_updates() -> None:
    state = running(make_issue("A-1"), make_issue("A-2"))
    for total in (100, 100, 250):
        usage = TokenUsage(input_tokens=total - 10, output_tokens=10, total_tokens=total)
        core.on_agent_event(state, "id-A-1", AgentEvent("token_usage", usage=usage), 1.0, WALL)
    core.on_agent_event(
        state, "id-A-2", AgentEvent("token_usage", usage=TokenUsage(5, 5, 10)), 1.0, WALL
    )
    assert state.totals.total_tokens == 260
    assert state.totals.input_tokens == 245 and state.totals.output_tokens == 15
    assert state.running["id-A-1"].total_tokens == 250


def test_latest_rate_limits_are_kept() -> None:
    state = running(make_issue("A-1"))
    core.on_agent_event(state, "id-A-1", AgentEvent("rate_limits", rate_limits={"a": 1}), 1.0, WALL)
    core.on_agent_event(state, "id-A-1", AgentEvent("rate_limits", rate_limits={"a": 2}), 2.0, WALL)
    assert state.rate_limits == {"a": 2}


def test_agent_events_update_session_fields_and_turn_count() -> None:
    state = running(make_issue("A-1"))
    event = AgentEvent(
        "turn_started", pid=99, thread_id="t", turn_id="u", session_id="t-u", message="go"
    )
    core.on_agent_event(state, "id-A-1", event, 3.0, WALL)
    entry = state.running["id-A-1"]
    assert (
        entry.session_id,
        entry.pid,
        entry.turn_count,
        entry.last_event,
        entry.last_message,
    ) == (
        "t-u",
        99,
        1,
        "turn_started",
        "go",
    )
    assert entry.last_event_at == 3.0 and len(entry.recent_events) == 1


def test_naive_and_aware_timestamps_sort_together_as_utc() -> None:
    issues = [
        make_issue("A-1", created_at=datetime(2025, 1, 2, tzinfo=UTC)),
        make_issue("A-2", created_at=datetime(2025, 1, 1)),
    ]
    assert dispatch(core.SchedulerState(), *issues) == ["A-2", "A-1"]


def test_released_issue_keeps_its_workspace_until_it_turns_terminal() -> None:
    state = running(make_issue("A-1"))
    settings = make_settings()
    core.apply_refresh(state, [make_issue("A-1", state="Human Review")], ["id-A-1"], settings)
    core.on_worker_exit(state, "id-A-1", core.WorkerExit(False), settings, 1.0)
    assert state.kept_workspaces == {"id-A-1": "A-1"}
    review = [make_issue("A-1", state="Human Review")]
    assert core.sweep_kept_workspaces(state, review, ["id-A-1"], settings, WALL) == []
    done = [make_issue("A-1", state="Done")]
    assert core.sweep_kept_workspaces(state, done, ["id-A-1"], settings, WALL) == [
        core.RemoveWorkspace("A-1")
    ]
    assert state.kept_workspaces == {}


def test_continuation_release_also_keeps_the_workspace_watched() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    core.on_worker_exit(state, "id-A-1", core.WorkerExit(True), settings, 1.0)
    retry = state.retry_attempts["id-A-1"]
    core.on_retries_refreshed(
        state, [retry], [make_issue("A-1", state="Human Review")], settings, 2.0, WALL
    )
    assert state.kept_workspaces == {"id-A-1": "A-1"}


def test_kept_workspace_is_forgotten_when_the_issue_vanishes_or_is_dispatched_again() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    state.kept_workspaces = {"id-A-1": "A-1", "id-A-2": "A-2"}
    assert core.sweep_kept_workspaces(state, [], ["id-A-1"], settings, WALL) == []
    assert "id-A-1" not in state.kept_workspaces
    core.select_dispatches(state, [make_issue("A-2")], settings, 0.0, WALL)
    assert state.kept_workspaces == {}


# Stage mode


def stage_settings(**kw: object) -> Settings:
    from symphony.config.stages import StageMachine

    machine = StageMachine(
        (
            make_stage("plan", ("Todo",), on_success="Plan Review"),
            make_stage("implement", ("Ready",), on_success="Human Review"),
        ),
        "Needs Attention",
    )
    return dataclasses.replace(make_settings(active=("Todo", "Ready"), **kw), machine=machine)  # type: ignore[arg-type]


def test_a_poll_reads_the_checkpoints_too_in_stage_mode() -> None:
    assert core.polled_states(make_settings()) == ("Todo", "In Progress")
    polled = core.polled_states(stage_settings())
    assert polled == ("Todo", "Ready", "Plan Review", "Needs Attention", "Human Review")


def test_a_pending_move_gives_way_once_the_ticket_left_its_stage() -> None:
    settings = stage_settings()
    state = core.SchedulerState()
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    report = Report(StageOutcome.DONE, "planned", plan="1. do it")
    (perform,) = core.on_worker_exit(
        state, "id-A-1", core.WorkerExit(True, report=report), settings, 1.0
    )
    assert isinstance(perform, core.PerformTransition)
    pending = state.transitions["id-A-1"]
    # Still in the plan stage's states: the daemon moves it on to Plan Review.
    assert core.moves_from(pending, settings) == {"todo"}
    budget = dataclasses.replace(
        pending, plan=dataclasses.replace(pending.plan, outcome=StageOutcome.BUDGET_EXCEEDED)
    )
    assert core.moves_from(budget, settings) == {"todo", "ready"}  # wherever it was worked on


def test_stage_mode_dispatch_names_the_stage_and_the_turns_it_already_used() -> None:
    settings = stage_settings()
    state = core.SchedulerState()
    issue = make_issue("A-1")
    (start,) = core.select_dispatches(state, [issue], settings, 0.0, WALL)
    assert isinstance(start, core.StartWorker) and (start.stage, start.turns_used) == ("plan", 0)
    core.on_agent_event(state, issue.id, AgentEvent("turn_started"), 1.0, WALL)
    core.on_agent_event(state, issue.id, AgentEvent("turn_started"), 2.0, WALL)
    (retry,) = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 3.0)
    assert isinstance(retry, core.RetryScheduled)  # no report, turns left: the stage continues
    (again,) = core.on_retries_refreshed(state, [retry.entry], [issue], settings, 5.0, WALL)
    assert isinstance(again, core.StartWorker) and again.turns_used == 2


def test_a_new_entry_into_a_stage_starts_the_turn_count_again() -> None:
    settings = stage_settings()
    state = core.SchedulerState()
    state.stage_progress["id-A-1"] = core.StageProgress("plan", 3)
    (start,) = core.select_dispatches(
        state, [make_issue("A-1", state="Ready")], settings, 0.0, WALL
    )
    assert isinstance(start, core.StartWorker) and (start.stage, start.turns_used) == (
        "implement",
        0,
    )


def test_a_report_becomes_a_pending_transition_that_keeps_the_claim_until_confirmed() -> None:
    settings = stage_settings()
    state = core.SchedulerState()
    issue = make_issue("A-1")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    report = Report(StageOutcome.DONE, "Planned.", "1. do")
    (perform,) = core.on_worker_exit(
        state, issue.id, core.WorkerExit(True, report=report), settings, 1.0
    )
    assert perform == core.PerformTransition(issue.id, "A-1", "Plan Review", 1)
    assert issue.id in state.claimed and issue.id in state.transitions
    assert core.select_dispatches(state, [issue], settings, 2.0, WALL) == []  # no double dispatch
    done, released = core.on_transition_confirmed(state, issue.id, moved=True, wall=WALL)
    assert isinstance(done, core.TransitionDone) and done.confirmed and done.target == "Plan Review"
    assert isinstance(released, core.Released)
    assert issue.id not in state.claimed and issue.id not in state.stage_progress
    assert state.kept_workspaces[issue.id] == "A-1"


def test_a_failed_write_is_retried_after_a_growing_backoff() -> None:
    settings = stage_settings(max_backoff_ms=60_000)
    state = core.SchedulerState()
    issue = make_issue("A-1")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, stuck=True), settings, 1.0)
    assert state.transitions[issue.id].plan.target == "Needs Attention"
    (retry,) = core.on_transition_failed(state, issue.id, "reset", settings, 1.0)
    assert isinstance(retry, core.TransitionRetry) and retry.delay_s == 5.0 and retry.attempt == 2
    assert core.due_transitions(state, 5.9) == []
    assert core.next_wakeup(state, 100.0, settings) == 6.0
    (perform,) = core.due_transitions(state, 6.0)
    assert isinstance(perform, core.PerformTransition) and perform.attempt == 2
    assert core.due_transitions(state, 7.0) == []  # in flight: not started twice
    (retry,) = core.on_transition_failed(state, issue.id, "reset", settings, 8.0)
    assert isinstance(retry, core.TransitionRetry) and retry.delay_s == 10.0


@pytest.mark.parametrize(
    ("result", "moved"), [(core.WriteResult.MOVED, True), (core.WriteResult.ABANDONED, False)]
)
def test_a_written_move_ends_the_transition_and_a_failed_one_waits_for_another_try(
    result: core.WriteResult, moved: bool
) -> None:
    settings = stage_settings()
    state = core.SchedulerState()
    issue = make_issue("A-1")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    report = Report(StageOutcome.DONE, "Planned.", "1. do")
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, report=report), settings, 1.0)
    failed = core.WriteResult.FAILED
    (retry,) = core.on_transition_written(state, issue.id, failed, None, settings, 1.0, WALL)
    assert isinstance(retry, core.TransitionRetry) and retry.error == "failed"
    assert issue.id in state.transitions and issue.id in state.claimed
    done, _ = core.on_transition_written(
        state, issue.id, result, "moved by hand", settings, 2.0, WALL
    )
    assert isinstance(done, core.TransitionDone) and done.confirmed is moved
    assert issue.id not in state.transitions and issue.id not in state.claimed


def test_a_person_moving_a_running_ticket_to_another_stage_stops_the_run() -> None:
    settings = stage_settings()
    state = core.SchedulerState()
    issue = make_issue("A-1")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    (stop,) = core.apply_refresh(state, [make_issue("A-1", state="Ready")], [issue.id], settings)
    assert isinstance(stop, core.StopWorker) and stop.reason is core.StopReason.STAGE_CHANGED
    (released,) = core.on_worker_exit(state, issue.id, core.WorkerExit(False), settings, 1.0)
    assert isinstance(released, core.Released) and issue.id not in state.claimed
    assert issue.id not in state.kept_workspaces  # it is active: the next poll dispatches it


# Conflict forecasting: tickets whose files overlap (`agent.overlap`)


def footprint(
    identifier: str, planned: tuple[str, ...] = (), changed: tuple[str, ...] = ()
) -> Footprint:
    return Footprint(identifier, frozenset(planned), frozenset(changed))


def test_serialize_holds_a_ticket_whose_plan_names_a_running_ticket_s_files() -> None:
    state = running(make_issue("A-1"))
    state.footprints["id-A-1"] = footprint("A-1", planned=("src/app.py",))
    state.footprints["id-B-1"] = footprint("B-1", planned=("src/app.py", "README.md"))
    state.footprints["id-C-1"] = footprint("C-1", planned=("docs/guide.md",))
    candidates = [make_issue("A-1"), make_issue("B-1"), make_issue("C-1"), make_issue("D-1")]
    settings = make_settings(overlap="serialize")
    verdicts = dict(
        (i.identifier, why) for i, why in core.explain_dispatch(state, candidates, settings)
    )
    assert verdicts["B-1"] == "waits for A-1 (running) on `src/app.py` (agent.overlap)"
    assert verdicts["C-1"] is None and verdicts["D-1"] is None  # other files, or none known
    effects = core.select_dispatches(state, candidates, settings, 0.0, WALL)
    started = [e.issue.identifier for e in effects if isinstance(e, core.StartWorker)]
    assert started == ["C-1", "D-1"]
    assert not [e for e in effects if isinstance(e, core.PostComment)]


def test_two_new_tickets_with_the_same_file_do_not_start_together_under_serialize() -> None:
    state = core.SchedulerState()
    state.footprints["id-A-1"] = footprint("A-1", planned=("src/app.py",))
    state.footprints["id-B-1"] = footprint("B-1", planned=("src",))  # a directory covers it
    candidates = [make_issue("A-1", priority=1), make_issue("B-1", priority=2)]
    settings = make_settings(overlap="serialize")
    verdicts = dict(
        (i.identifier, why) for i, why in core.explain_dispatch(state, candidates, settings)
    )
    assert verdicts == {
        "A-1": None,
        "B-1": "waits for A-1 (starting now) on `src/app.py` (agent.overlap)",
    }
    assert dispatch(state, *candidates, overlap="serialize") == ["A-1"]
    # A-1 ends with its branch changed and waits for review: B-1 still waits for it.
    core.on_worker_exit(
        state,
        "id-A-1",
        core.WorkerExit(ok=True, footprint=footprint("A-1", changed=("src/app.py",))),
        settings,
        1.0,
    )
    state.claimed.discard("id-A-1")
    state.retry_attempts.pop("id-A-1", None)
    state.kept_workspaces["id-A-1"] = "A-1"
    assert dispatch(state, candidates[1], overlap="serialize") == []
    [(_, why)] = core.explain_dispatch(state, [candidates[1]], settings)
    assert why == "waits for A-1 (waiting for a person) on `src/app.py` (agent.overlap)"
    # The reviewer accepts A-1: the sweep forgets its files and B-1 starts.
    core.sweep_kept_workspaces(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings, WALL)
    assert "id-A-1" not in state.footprints
    assert dispatch(state, candidates[1], overlap="serialize") == ["B-1"]


def test_a_released_ticket_with_only_a_plan_holds_nothing() -> None:
    state = core.SchedulerState()
    state.footprints["id-A-1"] = footprint("A-1", planned=("src/app.py",))  # in plan review
    state.kept_workspaces["id-A-1"] = "A-1"
    state.footprints["id-B-1"] = footprint("B-1", planned=("src/app.py",))
    assert dispatch(state, make_issue("B-1"), overlap="serialize") == ["B-1"]


def test_warn_starts_the_ticket_with_one_comment_naming_the_others() -> None:
    state = running(make_issue("A-1"), make_issue("A-2"))
    state.claimed.add("id-A-3")  # retrying
    state.footprints["id-A-1"] = footprint("A-1", changed=("src/app.py",))
    state.footprints["id-A-2"] = footprint("A-2", planned=("lib/x.py",))
    state.footprints["id-A-3"] = footprint("A-3", changed=("lib/y.py",))
    state.footprints["id-B-1"] = footprint("B-1", planned=("src/app.py", "lib/x.py", "lib/y.py"))
    settings = make_settings(overlap="warn")
    effects = core.select_dispatches(state, [make_issue("B-1")], settings, 0.0, WALL)
    assert [type(e) for e in effects] == [core.StartWorker, core.PostComment]
    comment = effects[1]
    assert isinstance(comment, core.PostComment)
    assert (comment.kind, comment.key) == ("overlap", "A-1+A-2+A-3")
    assert "- A-1 (running) on `src/app.py`" in comment.body
    assert "- A-3 (in progress) on `lib/y.py`" in comment.body


def test_overlap_off_looks_at_nothing() -> None:
    state = running(make_issue("A-1"))
    state.footprints["id-A-1"] = footprint("A-1", planned=("src/app.py",))
    state.footprints["id-B-1"] = footprint("B-1", planned=("src/app.py",))
    effects = core.select_dispatches(
        state, [make_issue("B-1")], make_settings(overlap="off"), 0.0, WALL
    )
    assert [type(e) for e in effects] == [core.StartWorker]


def test_a_run_s_footprint_keeps_the_last_plan_and_takes_the_newest_changes() -> None:
    settings = make_settings()
    state = running(make_issue("A-1"))
    exit_ = core.WorkerExit(ok=True, footprint=footprint("A-1", planned=("a.py",)))
    core.on_worker_exit(state, "id-A-1", exit_, settings, 1.0)
    assert state.footprints["id-A-1"].files == {"a.py"}
    state.retry_attempts.clear()
    state.claimed.clear()
    dispatch(state, make_issue("A-1"))
    exit_ = core.WorkerExit(ok=True, footprint=footprint("A-1", changed=("b.py",)))
    core.on_worker_exit(state, "id-A-1", exit_, settings, 2.0)
    assert state.footprints["id-A-1"] == footprint("A-1", planned=("a.py",), changed=("b.py",))
    # Stopped because it turned terminal: its files are nobody's any more.
    state.retry_attempts.clear()
    state.claimed.clear()
    dispatch(state, make_issue("A-1"))
    core.apply_refresh(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings)
    core.on_worker_exit(state, "id-A-1", core.WorkerExit(ok=False), settings, 3.0)
    assert "id-A-1" not in state.footprints


def test_files_of_tickets_the_daemon_no_longer_follows_are_forgotten() -> None:
    state = core.SchedulerState()
    for name in ("A-1", "B-1", "C-1", "D-1"):
        state.footprints[f"id-{name}"] = footprint(name, planned=("a.py",))
    state.claimed.add("id-A-1")
    state.kept_workspaces["id-B-1"] = "B-1"
    core.prune_footprints(state, [make_issue("C-1")])
    assert set(state.footprints) == {"id-A-1", "id-B-1", "id-C-1"}


# SSH worker hosts (`worker.ssh_hosts`)


def host_settings(**worker: object) -> Settings:
    hosts = worker.pop("hosts", (HostSpec("w1", 1), HostSpec("w2", 2)))
    return dataclasses.replace(
        make_settings(max_concurrent=10),
        worker=WorkerSettings(
            hosts=hosts,  # type: ignore[arg-type]
            ssh=SshSettings(max_failures=2, cooloff_s=30),
            **worker,  # type: ignore[arg-type]
        ),
    )


def started_on(effects: list[core.Effect]) -> dict[str, str]:
    return {e.issue.identifier: e.host for e in effects if isinstance(e, core.StartWorker)}


def test_tickets_spread_over_hosts_by_free_capacity_and_then_wait_for_one() -> None:
    state = core.SchedulerState()
    settings = host_settings()
    issues = [make_issue(f"A-{n}", priority=n) for n in range(1, 6)]
    effects = core.select_dispatches(state, issues, settings, 0.0, WALL)
    # w1 takes 1, w2 takes 2: the least loaded (by share of capacity) host first.
    assert started_on(effects) == {"A-1": "w1", "A-2": "w2", "A-3": "w2"}
    verdicts = dict(
        (i.identifier, why) for i, why in core.explain_dispatch(state, issues, settings)
    )
    assert verdicts["A-4"] == (
        "waits for a host: all 2 SSH hosts are busy or down (worker.ssh_hosts)"
    )
    assert state.workspace_hosts == {"id-A-1": "w1", "id-A-2": "w2", "id-A-3": "w2"}


def test_in_a_fleet_what_other_workflows_run_on_a_host_counts_against_its_capacity() -> None:
    state = core.SchedulerState()
    settings = host_settings()
    state.hosts_busy_elsewhere = {"w2": 2, "elsewhere-only": 3}  # w2 is full already
    issues = [make_issue(f"A-{n}", priority=n) for n in range(1, 4)]
    effects = core.select_dispatches(state, issues, settings, 0.0, WALL)
    assert started_on(effects) == {"A-1": "w1"}
    # Once the other workflow's agents end there, this one may use the host.
    state.hosts_busy_elsewhere = {"w2": 1}
    effects = core.select_dispatches(state, issues, settings, 0.0, WALL)
    assert started_on(effects) == {"A-2": "w2"}


def test_a_retry_waits_for_the_host_with_its_workspace_or_moves_when_allowed() -> None:
    from symphony.base.hosts import HOST_UNREACHABLE

    settings = host_settings()
    state = core.SchedulerState()
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    assert state.running["id-A-1"].host == "w1"
    lost = core.Failure("turn 1", "lost the connection to w1 (ssh exit 255)", HOST_UNREACHABLE)
    effects = core.on_worker_exit(state, "id-A-1", core.WorkerExit(False, lost), settings, 1.0)
    assert not [e for e in effects if isinstance(e, core.HostMarkedDown)]  # one failure
    assert state.host_health["w1"].failures == 1
    # w1 is full with another ticket: the retry waits for it rather than start anew on w2.
    core.select_dispatches(state, [make_issue("B-1")], settings, 2.0, WALL)
    assert state.running["id-B-1"].host == "w1"
    retry = state.retry_attempts["id-A-1"]
    effects = core.on_retries_refreshed(state, [retry], [make_issue("A-1")], settings, 20.0, WALL)
    [requeued] = [e for e in effects if isinstance(e, core.RetryScheduled)]
    assert requeued.entry.error == (
        "waits for w1, where its workspace is (busy; worker.retry_on_same_host)"
    )
    # Without retry_on_same_host it goes where there is room.
    relaxed = host_settings(retry_on_same_host=False)
    retry = state.retry_attempts["id-A-1"]
    effects = core.on_retries_refreshed(state, [retry], [make_issue("A-1")], relaxed, 40.0, WALL)
    assert started_on(effects) == {"A-1": "w2"}


def test_a_host_failing_to_connect_in_a_row_is_down_for_its_cooloff_then_tried_again() -> None:
    from symphony.base.hosts import HOST_UNREACHABLE

    settings = host_settings(hosts=(HostSpec("w1", 2),))
    state = core.SchedulerState()
    refused = core.Failure("workspace", "cannot reach w1: Connection refused", HOST_UNREACHABLE)
    for n, now in ((1, 0.0), (2, 10.0)):
        core.select_dispatches(state, [make_issue(f"A-{n}")], settings, now, WALL)
        effects = core.on_worker_exit(
            state, f"id-A-{n}", core.WorkerExit(False, refused), settings, now + 1
        )
    assert effects[0] == core.HostMarkedDown("w1", 2, 30, refused.message)
    effects = core.select_dispatches(state, [make_issue("C-1")], settings, 20.0, WALL)
    assert started_on(effects) == {}
    [(_, why)] = core.explain_dispatch(state, [make_issue("C-1")], settings, now=20.0)
    assert why == "waits for a host: all 1 SSH hosts are busy or down (worker.ssh_hosts)"
    effects = core.select_dispatches(state, [make_issue("C-1")], settings, 45.0, WALL)
    assert started_on(effects) == {"C-1": "w1"}  # the cool-off is over
    ok = core.WorkerExit(True)
    core.on_worker_exit(state, "id-C-1", ok, settings, 46.0)
    assert "w1" not in state.host_health  # a run that reached it clears the count


def test_a_terminal_ticket_s_workspace_is_removed_on_its_host() -> None:
    settings = host_settings()
    state = core.SchedulerState()
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    core.apply_refresh(state, [make_issue("A-1", state="Done")], ["id-A-1"], settings)
    effects = core.on_worker_exit(state, "id-A-1", core.WorkerExit(False), settings, 1.0)
    assert core.RemoveWorkspace("A-1", "w1") in effects
    assert state.workspace_hosts == {}


# Agent pods (`worker.kubernetes`)


def pod_settings(max_pods: int | None, max_concurrent: int = 10) -> Settings:
    return dataclasses.replace(
        make_settings(max_concurrent=max_concurrent),
        worker=WorkerSettings(kubernetes=KubernetesSettings(image="runner:1", max_pods=max_pods)),
    )


def test_runs_go_to_the_cluster_and_max_pods_holds_the_rest() -> None:
    state = core.SchedulerState()
    settings = pod_settings(max_pods=2)
    issues = [make_issue(f"A-{n}", priority=n) for n in range(1, 4)]
    effects = core.select_dispatches(state, issues, settings, 0.0, WALL)
    assert started_on(effects) == {"A-1": CLUSTER, "A-2": CLUSTER}
    verdicts = dict(
        (i.identifier, why) for i, why in core.explain_dispatch(state, issues, settings)
    )
    assert verdicts["A-3"] == (
        "waits for a pod: 2 of this workflow's pods are running (worker.kubernetes.max_pods)"
    )
    # A run that ends frees its pod's slot for the waiting ticket.
    del state.running["id-A-1"]
    state.claimed.discard("id-A-1")
    later = core.select_dispatches(state, issues[2:], settings, 1.0, WALL)
    assert started_on(later) == {"A-3": CLUSTER}


def test_without_max_pods_the_agent_limit_alone_holds() -> None:
    state = core.SchedulerState()
    settings = pod_settings(max_pods=None, max_concurrent=3)
    issues = [make_issue(f"A-{n}", priority=n) for n in range(1, 6)]
    effects = core.select_dispatches(state, issues, settings, 0.0, WALL)
    assert list(started_on(effects).values()) == [CLUSTER] * 3


def test_the_smaller_of_max_pods_and_max_concurrent_agents_holds() -> None:
    state = core.SchedulerState()
    settings = pod_settings(max_pods=5, max_concurrent=1)
    issues = [make_issue(f"A-{n}", priority=n) for n in range(1, 4)]
    assert len(started_on(core.select_dispatches(state, issues, settings, 0.0, WALL))) == 1


def test_a_cluster_kubectl_cannot_reach_is_left_alone_for_the_cooloff() -> None:
    from symphony.base.hosts import HOST_UNREACHABLE

    settings = pod_settings(max_pods=5)
    state = core.SchedulerState()
    gone = core.Failure("workspace", "the cluster (context lab) did not answer", HOST_UNREACHABLE)
    cooloff, needed = settings.worker.ssh.cooloff_s, settings.worker.ssh.max_failures
    for n in range(needed):
        issue = make_issue(f"A-{n}")
        core.select_dispatches(state, [issue], settings, float(n), WALL)
        effects = core.on_worker_exit(state, issue.id, core.WorkerExit(False, gone), settings, n)
    assert [e for e in effects if isinstance(e, core.HostMarkedDown)]
    # While the cluster is marked down nothing is sent to it, and the wait says why.
    waiting = make_issue("B-1")
    assert started_on(core.select_dispatches(state, [waiting], settings, 10.0, WALL)) == {}
    (verdict,) = [why for _, why in core.explain_dispatch(state, [waiting], settings, now=10.0)]
    assert verdict.startswith("waits for the cluster: kubectl did not reach it")
    assert "the cluster (context lab) did not answer" in verdict
    # After the cool-off the next run tries it again.
    later = core.select_dispatches(state, [waiting], settings, needed + cooloff + 1.0, WALL)
    assert started_on(later) == {"B-1": CLUSTER}

"""Every automatic re-run has a name, a count and a cap, and a runaway guard stands above them:
a scripted ticket that never gets fixed stops at its cap and goes to a person with the loop,
the runs, their cost and the last output. A person's stop and cancel are final. Pure: an
injected clock, no I/O."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from symphony import core
from symphony.base.pulls import PullState
from symphony.config.stages import StageMachine, StageOutcome
from symphony.core.state import RunKind
from symphony.store.codec import ledger_from_json, ledger_to_json
from tests.core.test_follow import (
    DONE,
    GREEN,
    RED,
    follow_settings,
    published,
    read,
    status,
)
from tests.factories import WALL, make_issue, make_settings, make_stage


def fix_run_pushes(
    state: core.SchedulerState, issue_id: str, settings: core.Settings, at: float, sha: str
) -> None:
    """The fix run reports done and its push lands: the ticket is back in review at `sha`."""
    entry = state.running[issue_id]
    entry.last_message = f"committed notes at {sha[:7]}"
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, report=DONE), settings, at)
    core.on_transition_written(
        state, issue_id, core.WriteResult.MOVED, None, settings, at + 0.5, WALL
    )
    state.pull_requests[issue_id].head_sha = sha


def test_a_conflict_fix_that_never_resolves_stops_at_its_cap_with_the_loop_named() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    state.ticket_totals[issue_id] = core.TicketTotals("A-1", total_tokens=1500, cost_usd=0.25)
    labels = []
    for n in range(1, 3):
        sha = str(n) * 40
        (start,) = read(state, issue_id, status(mergeable=False, sha=sha), settings, now=10.0 * n)
        assert isinstance(start, core.StartWorker)
        labels.append(start.label)
        fix_run_pushes(state, issue_id, settings, 10.0 * n + 1, str(n + 1) * 40)
    assert labels == ["conflict fix 1/2", "conflict fix 2/2"]
    # The third head still conflicts: no third run, a person is told which loop and its cost.
    effects = read(state, issue_id, status(mergeable=False, sha="9" * 40), settings, now=40.0)
    (move,) = effects
    assert isinstance(move, core.PerformTransition) and move.target == "Needs Attention"
    plan = state.transitions[issue_id].plan
    assert plan.outcome is StageOutcome.CAPPED
    body = plan.comments[0].body
    assert "2 conflict fix runs did not settle it (follow.max_conflict_fixes: 2)" in body
    assert "conflict fix 1/2" in body and "conflict fix 2/2" in body
    assert "$0.25" in body and "1,500 tokens" in body
    assert "committed notes at 3333333" in body  # the last output
    assert "no longer merges onto `main`" in body  # what the runs were sent for
    record = state.pull_requests[issue_id]
    assert record.escalated and any("conflicts with main" in h for h in record.history)
    # Nothing more is started for it, whatever the next readings say.
    core.on_transition_written(state, issue_id, core.WriteResult.MOVED, None, settings, 41, WALL)
    assert read(state, issue_id, status(mergeable=False, sha="8" * 40), settings, 50.0) == []


def test_a_fix_that_settles_the_conflict_starts_its_count_again() -> None:
    state, settings = core.SchedulerState(), follow_settings(max_conflict_fixes=1)
    issue_id = published(state, settings)
    (start,) = read(state, issue_id, status(mergeable=False, sha="1" * 40), settings)
    assert isinstance(start, core.StartWorker) and start.label == "conflict fix 1/1"
    fix_run_pushes(state, issue_id, settings, 11.0, "2" * 40)
    read(state, issue_id, status(mergeable=True, sha="2" * 40), settings, now=20.0)
    assert "merges cleanly again at 222222222222" in state.pull_requests[issue_id].history
    # A later merge onto main makes it conflict again: a fresh fix, not an escalation.
    (again,) = read(state, issue_id, status(mergeable=False, sha="2" * 40), settings, now=30.0)
    assert isinstance(again, core.StartWorker) and again.label == "conflict fix 1/1"


def test_check_fix_labels_name_the_failed_checks() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    (start,) = read(state, issue_id, status(RED), settings)
    assert isinstance(start, core.StartWorker)
    assert start.label == "check fix 1/3 (ci)"
    assert state.running[issue_id].label == "check fix 1/3 (ci)"
    assert state.pull_requests[issue_id].history == (
        "ci failed on aaaaaaaaaaaa: check fix 1/3 (ci) sent",
    )
    # A green reading after the fix's push ends the loop, and the history says on which head.
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, report=DONE), settings, 20.0)
    core.on_transition_written(state, issue_id, core.WriteResult.MOVED, None, settings, 21, WALL)
    read(state, issue_id, status(GREEN, sha="b" * 40), settings, now=30.0)
    assert state.pull_requests[issue_id].history[-1] == "checks green on bbbbbbbbbbbb"
    assert RunKind.CHECK_FIX.value not in state.ledgers[issue_id].counts


def test_the_runaway_guard_stops_a_ticket_a_tracker_bounces_between_active_states() -> None:
    machine = StageMachine(
        (
            make_stage("plan", ("Todo",), on_success="Plan Review"),
            make_stage("implement", ("Ready",), on_success="Human Review"),
        ),
        "Needs Attention",
    )
    settings = dataclasses.replace(make_settings(active=("Todo", "Ready")), machine=machine)
    settings = dataclasses.replace(
        settings, agent=dataclasses.replace(settings.agent, max_runs_per_ticket=4)
    )
    state = core.SchedulerState()
    started = 0
    for n in range(10):
        where = ("Todo", "Ready")[n % 2]
        issue = make_issue("A-1", state=where)
        wall = WALL + timedelta(minutes=n)
        effects = core.select_dispatches(state, [issue], settings, float(n), wall)
        if not any(isinstance(e, core.StartWorker) for e in effects):
            break
        started += 1
        # The tracker moves it to the other active state: the run stops, the next poll
        # dispatches it in the other stage.
        state.running[issue.id].stop_reason = core.StopReason.STAGE_CHANGED
        core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, n + 0.5)
    assert started == 4
    (move,) = effects
    assert isinstance(move, core.PerformTransition) and move.target == "Needs Attention"
    plan = state.transitions["id-A-1"].plan
    assert plan.outcome is StageOutcome.RUNAWAY
    assert "the runaway guard stopped it: 4 runs within 1 h" in plan.comments[0].body
    # An hour later the old runs are out of the window, but the ticket waits for a person:
    # it is in Needs Attention, and the ledger says why.
    assert state.ledgers["id-A-1"].escalated is not None


def test_a_person_sending_an_escalated_ticket_back_renews_its_counts() -> None:
    settings = make_settings(active=("Todo",))
    settings = dataclasses.replace(
        settings, agent=dataclasses.replace(settings.agent, max_continuations=1)
    )
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Todo", updated_at=WALL)
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    (retry,) = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 1.0)
    assert isinstance(retry, core.RetryScheduled)
    (start,) = core.on_retries_refreshed(
        state, [retry.entry], [issue], settings, retry.entry.due_at, WALL
    )
    assert isinstance(start, core.StartWorker) and start.label == "continuation 1/1"
    (again,) = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 5.0)
    assert isinstance(again, core.RetryScheduled)
    # Without stages: held where it is with a comment, nothing more starts.
    (comment,) = core.on_retries_refreshed(
        state, [again.entry], [issue], settings, again.entry.due_at, WALL
    )
    assert isinstance(comment, core.PostComment)
    assert "1 continuation run did not settle it (agent.max_continuations: 1)" in comment.body
    assert issue.id not in state.claimed and issue.id not in state.retry_attempts
    assert core.select_dispatches(state, [issue], settings, 10.0, WALL) == []
    # A person edits it: dispatched again, with its counts renewed.
    edited = dataclasses.replace(issue, updated_at=WALL + timedelta(minutes=5))
    (fresh,) = core.select_dispatches(state, [edited], settings, 20.0, WALL)
    assert isinstance(fresh, core.StartWorker) and fresh.label == "first run"
    assert state.ledgers[issue.id].counts == {} and state.ledgers[issue.id].escalated is None


def test_errors_and_stalls_are_capped_in_a_row_and_a_good_run_starts_them_again() -> None:
    settings = make_settings(active=("Todo",))
    settings = dataclasses.replace(
        settings, agent=dataclasses.replace(settings.agent, max_retries=2, max_stall_restarts=1)
    )
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Todo")
    failed = core.WorkerExit(False, core.Failure("turn 1", "boom"))
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    labels = []
    now = 0.0
    for _ in range(2):
        (retry,) = core.on_worker_exit(state, issue.id, failed, settings, now + 1)
        assert isinstance(retry, core.RetryScheduled)
        now = retry.entry.due_at
        (start,) = core.on_retries_refreshed(state, [retry.entry], [issue], settings, now, WALL)
        assert isinstance(start, core.StartWorker)
        labels.append(start.label)
    assert labels == ["retry 1/2 after error", "retry 2/2 after error"]
    # A run that ends well: the error count starts again.
    (cont,) = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, now + 1)
    assert RunKind.RETRY.value not in state.ledgers[issue.id].counts
    # A stall restart is counted on its own.
    assert isinstance(cont, core.RetryScheduled)
    core.on_retries_refreshed(state, [cont.entry], [issue], settings, cont.entry.due_at, WALL)
    state.running[issue.id].stop_reason = core.StopReason.STALLED
    (stall,) = core.on_worker_exit(state, issue.id, core.WorkerExit(False), settings, 100.0)
    assert isinstance(stall, core.RetryScheduled) and stall.entry.kind is core.RetryKind.STALL
    (start,) = core.on_retries_refreshed(
        state, [stall.entry], [issue], settings, stall.entry.due_at, WALL
    )
    assert isinstance(start, core.StartWorker) and start.label == "stall restart 1/1"


def test_a_ledger_survives_the_store_as_it_was() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    read(state, issue_id, status(mergeable=False, sha="1" * 40), settings)
    ledger = state.ledgers[issue_id]
    ledger.last_output = "still conflicting"
    again = ledger_from_json(ledger.identifier, ledger_to_json(ledger))
    assert again.counts == {"conflict fix": 1} and again.history == ledger.history
    assert again.starts == [round(at, 3) for at in ledger.starts]
    assert again.last_output == "still conflicting"


def test_cancel_while_the_agent_is_mid_turn_stops_it_and_moves_once_it_exits() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue = make_issue("A-1", state="Ready")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    taken = core.review_actions.take(
        state, issue, core.review_actions.ReviewAction.CANCEL, settings, by="ada", now=1.0
    )
    assert isinstance(taken, core.StopWorker) and taken.reason is core.StopReason.PERSON
    # The run would have scheduled a continuation: the cancel goes first, nothing restarts.
    effects = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 2.0)
    moves = [e for e in effects if isinstance(e, core.PerformTransition)]
    assert [m.target for m in moves] == ["Cancelled"]
    assert not any(isinstance(e, core.RetryScheduled) for e in effects)
    assert issue.id not in state.retry_attempts
    assert state.transitions[issue.id].plan.outcome is StageOutcome.CANCELLED


def test_cancel_while_the_daemon_writes_its_own_move_follows_that_move() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue = make_issue("A-1", state="Ready")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, report=DONE), settings, 1.0)
    assert issue.id in state.transitions  # the hand-off (the push) is under way
    taken = core.review_actions.take(
        state, issue, core.review_actions.ReviewAction.CANCEL, settings, by="ada", now=1.5
    )
    assert isinstance(taken, core.review_actions.Queued)
    effects = core.on_transition_written(
        state, issue.id, core.WriteResult.MOVED, None, settings, 2.0, WALL
    )
    (move,) = [e for e in effects if isinstance(e, core.PerformTransition)]
    assert move.target == "Cancelled"
    # It moves from wherever the daemon's own move took it.
    assert "human review" in core.moves_from(state.transitions[issue.id], settings)


def test_a_pull_request_closed_during_a_fix_run_ends_publishing() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    read(state, issue_id, status(RED), settings)
    assert issue_id in state.running
    (stop,) = read(state, issue_id, status(RED, state=PullState.CLOSED), settings, now=20.0)
    assert isinstance(stop, core.StopWorker) and stop.reason is core.StopReason.PULL_CLOSED
    # The fix run's exit publishes nothing: no pending hand-off, no new pull request.
    effects = core.on_worker_exit(
        state, issue_id, core.WorkerExit(True, report=DONE), settings, 21.0
    )
    assert [type(e) for e in effects] == [core.Released]
    (due,) = core.follow.due_reads(state, settings, 100.0)
    assert isinstance(due, core.ReadPullRequest)
    (move,) = read(state, issue_id, status(state=PullState.CLOSED), settings, now=100.0)
    assert isinstance(move, core.PerformTransition) and move.target == "Needs Attention"
    assert "publishes nothing more" in state.transitions[issue_id].plan.comments[0].body
    assert core.follow.due_reads(state, settings, 1000.0) == []


def test_a_stopped_ticket_waiting_for_a_fix_or_a_retry_starts_nothing() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    in_review = state.pull_requests[issue_id].issue
    assert core.operator.stop(state, issue_id, "ada", in_review) is None  # nothing ran: held
    assert read(state, issue_id, status(RED), settings) == []
    assert issue_id not in state.running
    # A retry due for a held ticket is dropped, not dispatched.
    settings = make_settings(active=("Todo",))
    state = core.SchedulerState()
    issue = make_issue("B-1", state="Todo")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    failed = core.WorkerExit(False, core.Failure("turn 1", "boom"))
    (retry,) = core.on_worker_exit(state, issue.id, failed, settings, 1.0)
    assert isinstance(retry, core.RetryScheduled)
    assert core.operator.stop(state, issue.id, "ada", issue) is None
    assert issue.id not in state.retry_attempts and issue.id not in state.claimed
    assert core.select_dispatches(state, [issue], settings, 100.0, WALL) == []


def test_a_fix_run_cut_short_is_judged_again_and_counted() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    (start,) = read(state, issue_id, status(mergeable=False, sha="1" * 40), settings)
    assert isinstance(start, core.StartWorker) and start.label == "conflict fix 1/2"
    failed = core.WorkerExit(False, core.Failure("turn 1", "the agent crashed"))
    (retry,) = core.on_worker_exit(state, issue_id, failed, settings, 11.0)
    assert isinstance(retry, core.RetryScheduled)
    in_review = make_issue("A-1", state="Human Review")
    (released,) = core.on_retries_refreshed(
        state, [retry.entry], [in_review], settings, retry.entry.due_at, WALL
    )
    assert isinstance(released, core.Released)
    (again,) = read(state, issue_id, status(mergeable=False, sha="1" * 40), settings, 20.0)
    assert isinstance(again, core.StartWorker) and again.label == "conflict fix 2/2"


def test_a_pull_request_closed_while_its_hand_off_waits_publishes_nothing_new() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    read(state, issue_id, status(RED), settings)
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, report=DONE), settings, 11.0)
    pending = state.transitions[issue_id]
    assert pending.plan.publish is not None  # the fix's push and update are next
    core.on_transition_written(
        state, issue_id, core.WriteResult.FAILED, "tracker down", settings, 12.0, WALL
    )
    assert not pending.in_flight  # waiting for its retry
    assert read(state, issue_id, status(state=PullState.CLOSED), settings, 13.0) == []
    assert state.transitions[issue_id].plan.publish is None


def test_a_ledger_is_forgotten_once_its_ticket_is_out_of_sight_and_out_of_the_window() -> None:
    settings = make_settings(active=("Todo",))
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Todo")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 1.0)
    state.retry_attempts.clear()
    state.claimed.clear()
    core.reruns.forget(state, [], WALL + timedelta(minutes=5), settings)
    assert issue.id in state.ledgers  # out of sight, but its run is within the window
    core.reruns.forget(state, [issue.id], WALL + timedelta(hours=2), settings)
    assert issue.id in state.ledgers  # still polled
    core.reruns.forget(state, [], WALL + timedelta(hours=2), settings)
    assert issue.id not in state.ledgers

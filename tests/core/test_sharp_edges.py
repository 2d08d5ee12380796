"""The reference algorithms' published sharp edges, each proved absent here: a backoff that
cannot overflow, errors that are not retried forever, a workspace never removed under a running
agent, a run not killed by one read that omits its ticket, and a continuation loop that cannot
spin faster than its interval. Pure: an injected clock."""

from __future__ import annotations

import dataclasses
import itertools

from symphony import core
from symphony.core.runs import CONTINUATION_DELAY_S, retry_delay_s
from tests.factories import WALL, make_issue, make_settings


def test_the_backoff_cannot_overflow_at_any_attempt_count() -> None:
    agent = make_settings().agent
    cap = agent.max_retry_backoff_ms / 1000
    for attempt in (0, 1, 2, 5, 64, 65, 1_000, 10**9):
        delay = retry_delay_s(attempt, core.RetryKind.FAILURE, agent)
        assert 0 < delay <= cap
    assert retry_delay_s(1, core.RetryKind.FAILURE, agent) == 10.0
    assert retry_delay_s(10**9, core.RetryKind.STALL, agent) == cap


def test_a_permanent_error_is_not_retried_forever() -> None:
    """Bad credentials fail every start the same way: the ticket goes to a person after
    `agent.max_retries` runs, with the error, instead of backing off for ever."""
    settings = make_settings(active=("Todo",))
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Todo")
    failed = core.WorkerExit(
        False, core.Failure("agent startup", "401 bad credentials", "agent_startup")
    )
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    now, starts = 0.0, 1
    for _ in range(50):
        (effect,) = core.on_worker_exit(state, issue.id, failed, settings, now + 1)
        if not isinstance(effect, core.RetryScheduled):
            break
        now = effect.entry.due_at
        effects = core.on_retries_refreshed(state, [effect.entry], [issue], settings, now, WALL)
        if not any(isinstance(e, core.StartWorker) for e in effects):
            (said,) = effects
            break
        starts += 1
    assert starts == 1 + settings.agent.max_retries
    assert isinstance(said, core.PostComment)
    assert "agent.max_retries" in said.body and "401 bad credentials" in said.body
    assert issue.id not in state.retry_attempts and issue.id not in state.claimed


def test_a_workspace_is_never_removed_while_its_agent_runs() -> None:
    settings = make_settings(active=("Todo",))
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Todo")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    done = dataclasses.replace(issue, state="Done")
    effects = core.apply_refresh(state, [done], [issue.id], settings)
    assert [type(e) for e in effects] == [core.StopWorker]  # stop first; nothing removed yet
    assert issue.id in state.running
    exited = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, 1.0)
    assert any(isinstance(e, core.RemoveWorkspace) for e in exited)  # only once it exited


def test_a_poll_that_omits_a_running_ticket_does_not_stop_it() -> None:
    """The candidates poll is no verdict on a running ticket (a page of results, a filter, a
    tracker's hiccup): only a read of that ticket by its id decides."""
    settings = make_settings(active=("Todo",))
    state = core.SchedulerState()
    running, other = make_issue("A-1", state="Todo"), make_issue("B-1", state="Todo")
    core.select_dispatches(state, [running], settings, 0.0, WALL)
    effects = core.select_dispatches(state, [other], settings, 30.0, WALL)  # A-1 not listed
    assert not any(isinstance(e, core.StopWorker) for e in effects)
    assert running.id in state.running and state.running[running.id].stop_reason is None
    kept = core.apply_refresh(state, [running], [running.id], settings)  # read by id: there
    assert kept == [] and state.running[running.id].stop_reason is None


def test_a_continuation_loop_cannot_spin_faster_than_its_interval() -> None:
    settings = make_settings(active=("Todo",))
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Todo")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    now, starts = 0.0, []
    for _ in range(50):
        (effect,) = core.on_worker_exit(state, issue.id, core.WorkerExit(True), settings, now)
        if not isinstance(effect, core.RetryScheduled):
            break
        assert effect.delay_s >= CONTINUATION_DELAY_S
        assert core.due_retries(state, now) == []  # not before its time
        now = effect.entry.due_at
        effects = core.on_retries_refreshed(state, [effect.entry], [issue], settings, now, WALL)
        if not any(isinstance(e, core.StartWorker) for e in effects):
            break
        starts.append(now)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= CONTINUATION_DELAY_S for gap in gaps)
    assert len(starts) == settings.agent.max_continuations  # and it stops at its cap

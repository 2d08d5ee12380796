"""A suspected injection: a write carrying the run's canary stops the run, escalates the ticket
and holds every merge policy until a person approves."""

from __future__ import annotations

from symphony import core
from symphony.base.pulls import ReviewDecision
from symphony.config.stages import StageOutcome
from symphony.core.injection import carries, merge_held
from symphony.core.review_actions import Checkpoint, _approve_pull
from symphony.core.state import Failure, FailureReason
from symphony.store.codec import ledger_from_json, ledger_to_json
from tests.core.test_follow import (
    DONE,
    GREEN,
    follow_settings,
    published,
    read,
    status,
    with_merge,
)
from tests.factories import WALL, make_issue

CANARY = "cnr0123456789abcdef01234567"


def test_a_canary_is_found_anywhere_in_a_tool_call_s_arguments() -> None:
    assert carries({"body": f"hello {CANARY}"}, [CANARY])
    assert carries({"tickets": [{"title": "x", "description": ("a", CANARY)}]}, [CANARY])
    assert carries({CANARY: 1}, [CANARY])
    assert not carries({"body": "hello", "n": 3}, [CANARY])
    assert not carries({"body": ""}, [""])


def test_a_run_stopped_for_its_canary_escalates_marked_and_is_not_retried() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue = make_issue("A-1", state="Ready")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    failure = Failure(
        "turn 1", "a `comment` call", "suspected_injection", FailureReason.SUSPECTED_INJECTION
    )
    ended = core.WorkerExit(False, failure)
    (perform,) = core.on_worker_exit(state, issue.id, ended, settings, 1.0)
    assert isinstance(perform, core.PerformTransition)
    plan = state.transitions[issue.id].plan
    assert (plan.target, plan.outcome) == ("Needs Attention", StageOutcome.SUSPECTED_INJECTION)
    (comment,) = plan.comments
    assert "suspected injection: a `comment` call carried the run's canary" in comment.body
    assert "no merge policy merges" in comment.body and CANARY not in comment.body
    assert issue.id not in state.retry_attempts
    ledger = state.ledgers[issue.id]
    assert ledger.suspected is not None
    assert ledger_from_json("A-1", ledger_to_json(ledger)).suspected == ledger.suspected


def test_a_suspected_ticket_is_merged_only_once_a_person_approves_its_head() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    record = state.pull_requests[issue_id]
    core.reruns.ledger_of(state, issue_id, "A-1").suspected = "suspected injection: a comment"
    green = status(GREEN, decision=ReviewDecision.APPROVED)
    assert merge_held(state, record)
    assert read(state, issue_id, green, settings) == []  # approved on the host is not enough
    _approve_pull(record, record.issue, Checkpoint(None, "Human Review"), "ana", "")
    assert not merge_held(state, record)
    effects = read(state, issue_id, green, settings, now=100.0)
    assert any(isinstance(e, core.MergePullRequest) for e in effects)
    record.head_sha = "b" * 40  # a later push needs a new approval
    assert merge_held(state, record)


def test_a_publication_refused_for_the_canary_escalates_marked() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue = make_issue("A-1", state="Ready")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, report=DONE), settings, 1.0)
    (perform,) = core.on_transition_written(
        state, issue.id, core.WriteResult.SUSPECTED, "the pushed commits", settings, 2.0, WALL
    )
    assert isinstance(perform, core.PerformTransition) and perform.target == "Needs Attention"
    plan = state.transitions[issue.id].plan
    assert plan.outcome is StageOutcome.SUSPECTED_INJECTION and plan.publish is None
    assert "refused to publish" in plan.comments[0].body
    assert state.ledgers[issue.id].suspected == "suspected injection: the pushed commits"

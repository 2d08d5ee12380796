"""A person's actions at a checkpoint (`core.review_actions`): where each one moves the ticket,
what the comment says, and when one is refused."""

from __future__ import annotations

import dataclasses

from symphony import core
from symphony.config.sections import Settings
from symphony.config.stages import StageMachine, StageOutcome
from symphony.core.review_actions import Refusal, ReviewAction, checkpoint_of, take
from tests.factories import make_issue, make_settings, make_stage


def review_settings() -> Settings:
    machine = StageMachine(
        (
            make_stage("plan", ("Todo",), on_success="Plan Review", on_approved="Ready",
                       on_changes_requested="Todo"),
            make_stage("implement", ("Ready", "Rework"), on_success="Human Review",
                       on_approved="Done", on_changes_requested="Rework"),
        ),
        "Needs Attention",
    )  # fmt: skip
    settings = make_settings(active=("Todo", "Ready", "Rework"))
    return dataclasses.replace(settings, machine=machine)


def pending_plan(state: core.SchedulerState, issue_id: str) -> core.TransitionPlan:
    return state.transitions[issue_id].plan


def test_approving_a_plan_moves_it_to_the_next_stage_with_a_comment_saying_who() -> None:
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Plan Review")
    effect = take(state, issue, ReviewAction.APPROVE, review_settings(), by="ada", now=5.0)
    assert isinstance(effect, core.PerformTransition) and effect.target == "Ready"
    plan = pending_plan(state, issue.id)
    assert plan.outcome is StageOutcome.APPROVED and plan.by == "ada"
    (comment,) = plan.comments
    assert comment.body == "ada approved at Plan Review; moving the ticket to Ready."
    assert issue.id in state.claimed  # never dispatched while the move is written
    # A person's move goes only from where they saw it.
    assert core.moves_from(state.transitions[issue.id], review_settings()) == {"plan review"}


def test_requesting_changes_needs_words_and_sends_them_to_the_rework_state() -> None:
    state = core.SchedulerState()
    issue = make_issue("A-1", state="Human Review")
    settings = review_settings()
    refused = take(state, issue, ReviewAction.REQUEST_CHANGES, settings, by="ada", now=0.0)
    assert refused == Refusal("comment_required", "say what should change: the comment is empty")
    assert not state.transitions and not state.claimed
    effect = take(state, issue, ReviewAction.REQUEST_CHANGES, settings, by="ada",
                  comment="Handle negative numbers.", now=0.0)  # fmt: skip
    assert isinstance(effect, core.PerformTransition) and effect.target == "Rework"
    (comment,) = pending_plan(state, issue.id).comments
    assert comment.body.endswith("\n\nHandle negative numbers.")


def test_replan_and_cancel_work_at_every_checkpoint_including_escalation() -> None:
    settings = review_settings()
    for where in ("Plan Review", "Human Review", "Needs Attention"):
        state = core.SchedulerState()
        issue = make_issue("A-1", state=where)
        replan = take(state, issue, ReviewAction.REPLAN, settings, by="ada", now=0.0)
        assert isinstance(replan, core.PerformTransition) and replan.target == "Todo"
        state = core.SchedulerState()
        cancel = take(state, issue, ReviewAction.CANCEL, settings, by="ada", now=0.0)
        assert isinstance(cancel, core.PerformTransition) and cancel.target == "Cancelled"


def test_actions_are_refused_away_from_a_checkpoint_and_while_the_daemon_works() -> None:
    settings = review_settings()
    state = core.SchedulerState()
    running = make_issue("A-1", state="Ready")
    refusal = take(state, running, ReviewAction.APPROVE, settings, by="ada", now=0.0)
    assert isinstance(refusal, Refusal) and refusal.code == "not_at_checkpoint"
    escalated = make_issue("A-2", state="Needs Attention")
    refusal = take(state, escalated, ReviewAction.APPROVE, settings, by="ada", now=0.0)
    assert isinstance(refusal, Refusal) and refusal.code == "not_approvable"
    waiting = make_issue("A-3", state="Plan Review")
    state.claimed.add(waiting.id)
    refusal = take(state, waiting, ReviewAction.APPROVE, settings, by="ada", now=0.0)
    assert isinstance(refusal, Refusal) and refusal.code == "busy"
    assert not state.transitions


def test_the_checkpoint_names_the_stage_that_handed_the_ticket_over() -> None:
    settings = review_settings()
    at_plan = checkpoint_of(make_issue("A-1", state="plan review"), settings)
    assert at_plan is not None and at_plan.stage is not None and at_plan.stage.name == "plan"
    escalated = checkpoint_of(make_issue("A-1", state="Needs Attention"), settings)
    assert escalated is not None and escalated.stage is None
    assert checkpoint_of(make_issue("A-1", state="Todo"), settings) is None

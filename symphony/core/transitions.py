"""The outbox of stage transitions: a decided move is kept pending, the ticket claimed, until the
daemon has written it and read it back; a failed write is tried again with backoff, and a move a
person overtook is given up (`moves_from`).

The daemon performs each one through the tracker (`symphony.tracker.writes`); what a stage
outcome means in the first place is `symphony.core.stage_outcomes`.
"""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime
from typing import Any

from symphony.base.issue import Issue, normalize_state
from symphony.config.sections import Settings
from symphony.config.stages import Stage, StageOutcome
from symphony.core.accounting import ticket_totals_of
from symphony.core.costs import budget_exceeded_text
from symphony.core.effects import (
    Effect,
    PerformTransition,
    Released,
    TransitionDone,
    TransitionRetry,
)
from symphony.core.evidence import build_evidence
from symphony.core.outcomes import ESCALATED, HANDOFF, OutcomeRecord
from symphony.core.publishing import publish_intent
from symphony.core.stage_outcomes import PlannedComment, TransitionPlan, plan_transition
from symphony.core.state import (
    PendingTransition,
    RunLedger,
    RunningEntry,
    SchedulerState,
    StageProgress,
    TicketTotals,
    WorkerExit,
)

TRANSITION_BASE_DELAY_S = 5.0
"""A failed tracker write is tried again after 5 s, doubling up to `agent.max_retry_backoff_ms`."""


def stage_outcome(
    state: SchedulerState, entry: RunningEntry, result: WorkerExit, settings: Settings, now: float
) -> PerformTransition | None:
    """The transition a finished stage run asks for, now pending (claim kept); None when the
    stage simply continues (spec mode, or no report with turns left)."""
    machine = settings.machine
    if machine is None or entry.stage is None:
        return None
    stage = machine.stage_named(entry.stage)
    if stage is None:
        return None  # a reload removed the stage: its tickets are judged afresh
    progress = state.stage_progress.get(entry.issue.id)
    turns = progress.turns if progress is not None and progress.stage == stage.name else 0
    plan = plan_transition(
        stage,
        result.report,
        stuck=result.stuck,
        turns_used=turns,
        last_message=entry.last_message,
        verification=result.verification,
        evidence=_evidence(state, entry, stage, result, turns),
    )
    if plan is None:
        return None
    review = {normalize_state(s) for s in machine.review_states(settings.tracker.terminal_states)}
    if plan.outcome is StageOutcome.DONE and normalize_state(plan.target) in review:
        plan = dataclasses.replace(plan, hands_off=True)
    if plan.outcome is StageOutcome.DONE and result.report is not None:
        asked = state.reviews.get(entry.issue.id)
        replies = asked.threads if asked is not None else ()
        intent = publish_intent(
            stage, settings, entry.issue, result.report, plan.evidence, replies, result.pushed
        )
        if intent is not None:
            plan = dataclasses.replace(plan, publish=intent)
    return pend(state, entry.issue, plan, turns=turns, now=now)


def pend(
    state: SchedulerState, issue: Issue, plan: TransitionPlan, *, turns: int, now: float
) -> PerformTransition:
    """Keep `plan` pending, the ticket claimed, and start writing it."""
    state.transition_seq += 1
    state.transitions[issue.id] = PendingTransition(
        issue=issue,
        plan=plan,
        key=f"{plan.stage}-{state.transition_seq}",
        turns_used=turns,
        due_at=now,
        in_flight=True,
        attempts=1,
    )
    state.claimed.add(issue.id)
    return PerformTransition(issue.id, issue.identifier, plan.target, 1)


def _evidence(
    state: SchedulerState, entry: RunningEntry, stage: Stage, result: WorkerExit, turns: int
) -> dict[str, Any] | None:
    """The evidence bundle of a verified (or unverified) `done` in a stage with evidence."""
    report, verification = result.report, result.verification
    if (
        not stage.evidence
        or report is None
        or report.outcome is not StageOutcome.DONE
        or (verification is not None and not verification.passed)
    ):
        return None
    totals = state.ticket_totals.get(entry.issue.id) or TicketTotals(entry.identifier)
    handed = state.handed_off.get(entry.issue.id, ())
    return build_evidence(
        identifier=entry.identifier,
        stage=stage.name,
        target=stage.on_success,
        report=report,
        verification=verification,
        facts=result.facts,
        turns=turns,
        tokens=(totals.input_tokens, totals.output_tokens, totals.total_tokens),
        agent_seconds=totals.seconds,
        hand_off=handed.count(normalize_state(stage.on_success)) + 1,
        cost_usd=totals.known_cost_usd,
        agent=entry.agent_kind,
        model=entry.model,
        sandbox=entry.sandbox,
        run=entry.label,
    )


def budget_transition(
    state: SchedulerState, entry: RunningEntry, settings: Settings, now: float
) -> PerformTransition:
    """A run stopped at its ticket's budget: to `budget.on_exceeded`, with the breakdown."""
    budget = settings.budget
    totals = ticket_totals_of(state, entry)
    totals.budget_exceeded = True
    state.changed_totals.add(entry.issue.id)
    limit = budget.per_ticket_usd or 0.0
    body = budget_exceeded_text(
        totals.window_spent_usd, limit, budget.on_exceeded, totals.cost_usd, totals.cost_by_stage
    )
    plan = TransitionPlan(
        entry.stage or "run",
        StageOutcome.BUDGET_EXCEEDED,
        budget.on_exceeded,
        (PlannedComment("budget_exceeded", body),),
    )
    return pend(state, entry.issue, plan, turns=0, now=now)


def moves_from(pending: PendingTransition, settings: Settings) -> frozenset[str]:
    """The states (normalized) a pending transition still moves its ticket from: where the run
    found it and its stage's states (a budget stop: every active state). In any other state
    but the target a person moved the ticket meanwhile, and the daemon gives way."""
    states = {normalize_state(pending.issue.state)}
    machine = settings.machine
    if pending.plan.by is not None and pending.plan.outcome is StageOutcome.CANCELLED:
        # A person's cancel holds wherever the daemon's own steps have taken the ticket since.
        states.update(normalize_state(s) for s in settings.tracker.active_states)
        if machine is not None:
            terminal = settings.tracker.terminal_states
            states.update(normalize_state(s) for s in machine.checkpoint_states(terminal))
        return frozenset(states)
    if pending.plan.by is not None:
        return frozenset(states)  # a person's action: from the checkpoint they saw it at
    stage = machine.stage_named(pending.plan.stage) if machine is not None else None
    if pending.plan.outcome is StageOutcome.BUDGET_EXCEEDED:
        states.update(normalize_state(s) for s in settings.tracker.active_states)
    elif stage is not None:
        states.update(normalize_state(s) for s in stage.states)
    return frozenset(states)


def due_transitions(state: SchedulerState, now: float) -> list[Effect]:
    """Start the writes of pending transitions whose retry is due."""
    effects: list[Effect] = []
    for issue_id, pending in state.transitions.items():
        if not pending.in_flight and pending.due_at <= now:
            pending.in_flight = True
            pending.attempts += 1
            effects.append(
                PerformTransition(
                    issue_id, pending.identifier, pending.plan.target, pending.attempts
                )
            )
    return effects


class WriteResult(enum.StrEnum):
    """What the write of a decided move answered."""

    MOVED = "moved"
    ABANDONED = "abandoned"
    """A person moved the ticket first, or it vanished: the daemon gives way."""
    FAILED = "failed"
    """A step failed; the core tries again after a backoff."""
    REFUSED = "refused"
    """Publishing was refused for good (the remote rejected the push): the ticket goes to
    `escalation_state` with the remote's words instead."""
    SUSPECTED = "suspected"
    """Publishing was refused because what it would send out carried a run's canary
    (`core.injection`): the ticket goes to `escalation_state`, marked suspected."""


def on_transition_written(
    state: SchedulerState,
    issue_id: str,
    result: WriteResult,
    detail: str | None,
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """A move's write answered: a failure is tried again after a backoff; a refused publish
    escalates instead; a move, or giving way to a person, ends it (`on_transition_failed`,
    `on_transition_confirmed`)."""
    if result is WriteResult.FAILED:
        return on_transition_failed(state, issue_id, detail or "failed", settings, now)
    if result is WriteResult.REFUSED:
        return _escalate_unpublished(state, issue_id, detail or "refused", settings, now)
    if result is WriteResult.SUSPECTED:
        return _escalate_unpublished(
            state, issue_id, detail or SUSPECTED, settings, now, suspected=True
        )
    moved = result is WriteResult.MOVED
    return on_transition_confirmed(state, issue_id, moved=moved, wall=wall, reason=detail)


def on_transition_confirmed(
    state: SchedulerState,
    issue_id: str,
    *,
    moved: bool,
    wall: datetime,
    reason: str | None = None,
) -> list[Effect]:
    """The tracker shows the ticket in its target (`moved`), or a person moved it elsewhere
    first (`moved=False`): either way the daemon is done with it until a person acts."""
    pending = state.transitions.pop(issue_id, None)
    if pending is None:
        return []
    state.claimed.discard(issue_id)
    progress = state.stage_progress.pop(issue_id, None)
    if moved:
        _record_move(state, pending, progress, wall)
        record = state.pull_requests.get(issue_id)
        if record is not None:
            # Following finds the ticket where the daemon put it.
            record.issue = dataclasses.replace(pending.issue, state=pending.plan.target)
        if pending.plan.publish is not None:
            state.reviews.pop(issue_id, None)
    # The workspace stays for the next stage (or the reviewer) until the ticket turns terminal.
    state.kept_workspaces[issue_id] = pending.identifier
    plan = pending.plan
    return [
        TransitionDone(
            issue_id, pending.identifier, plan.stage, plan.target, plan.outcome.value, moved
        ),
        Released(
            issue_id,
            pending.identifier,
            f"moved to {plan.target} ({plan.stage}: {plan.outcome.value})"
            if moved
            else reason or "moved by a person meanwhile",
        ),
        *take_queued(state, issue_id, pending.due_at),
    ]


def take_queued(state: SchedulerState, issue_id: str, now: float) -> list[Effect]:
    """A person's move queued behind the daemon's step on the ticket (`queued_moves`):
    written now that the step ended."""
    queued = state.queued_moves.pop(issue_id, None)
    if queued is None:
        return []
    issue, plan = queued
    return [pend(state, issue, plan, turns=0, now=now)]


def _record_move(
    state: SchedulerState,
    pending: PendingTransition,
    progress: StageProgress | None,
    wall: datetime,
) -> None:
    plan, issue_id = pending.plan, pending.issue.id
    if plan.hands_off:
        target = normalize_state(plan.target)
        before = state.handed_off.get(issue_id, ())
        state.handed_off[issue_id] = (*before, target)
        totals = state.ticket_totals.get(issue_id)
        entered = progress.entered_at if progress is not None else None
        data: dict[str, Any] = {
            "stage": plan.stage,
            "state": plan.target,
            "rework": target in before,
            "tokens": totals.total_tokens if totals is not None else 0,
        }
        if entered is not None:
            data["seconds"] = round(max((wall - entered).total_seconds(), 0.0), 1)
        state.new_outcomes.append(OutcomeRecord(wall, HANDOFF, issue_id, pending.identifier, data))
    elif (
        plan.outcome is not StageOutcome.DONE and plan.by is None
    ):  # a person's move is no escalation
        state.new_outcomes.append(
            OutcomeRecord(
                wall, ESCALATED, issue_id, pending.identifier,
                {"stage": plan.stage, "outcome": plan.outcome.value, "state": plan.target,
                 "reason": _reason(plan)},
            )
        )  # fmt: skip


def _reason(plan: TransitionPlan) -> str:
    """The first words of the comment an escalation posts: why, for a person's notice."""
    for comment in plan.comments:
        for line in comment.body.splitlines():
            if line.strip():
                return line.strip()[:300]
    return ""


def _escalate_unpublished(
    state: SchedulerState,
    issue_id: str,
    why: str,
    settings: Settings,
    now: float,
    *,
    suspected: bool = False,
) -> list[Effect]:
    """The hand-off could not be published: the ticket goes to `escalation_state` instead,
    with what the remote said, or, `suspected`, marked as a suspected injection."""
    pending = state.transitions.get(issue_id)
    machine = settings.machine
    if pending is None or machine is None:
        return []
    outcome, kind = StageOutcome.PUBLISH_FAILED, "publish_failed"
    body = f"The daemon could not publish stage `{pending.plan.stage}`: {why}"
    if suspected:
        outcome, kind = StageOutcome.SUSPECTED_INJECTION, StageOutcome.SUSPECTED_INJECTION.value
        body = f"The daemon refused to publish stage `{pending.plan.stage}`, {SUSPECTED}: {why}"
        body += f"\n\n{SUSPECTED_ADVICE}"
        ledger = state.ledgers.setdefault(issue_id, RunLedger(pending.identifier))
        ledger.suspected = f"{SUSPECTED}: {why}"
        state.changed_ledgers.add(issue_id)
    body += (
        f"\n\nThe branch stays in the workspace; moving the ticket to "
        f"{machine.escalation_state} for a person."
    )
    pending.plan = TransitionPlan(
        pending.plan.stage, outcome, machine.escalation_state, (PlannedComment(kind, body),)
    )
    pending.in_flight, pending.attempts, pending.due_at, pending.error = True, 1, now, why
    return [PerformTransition(issue_id, pending.identifier, pending.plan.target, 1)]


SUSPECTED = "suspected injection"
SUSPECTED_ADVICE = (
    "A write of the agent's carried the marker its prompt told it never to repeat: it was "
    "most likely following instructions planted in text it read (the ticket, a comment, a "
    "review, a log). The write was refused and the run stopped. Read what the agent was "
    "given before sending the ticket back to work; no merge policy merges its pull request "
    "until a person approves it on the review page."
)


def on_transition_failed(
    state: SchedulerState, issue_id: str, error: str, settings: Settings, now: float
) -> list[Effect]:
    """The write failed: keep the claim and try again after a backoff."""
    pending = state.transitions.get(issue_id)
    if pending is None:
        return []
    exponent = max(pending.attempts - 1, 0)
    delay = min(
        TRANSITION_BASE_DELAY_S * 2 ** min(exponent, 64),
        max(settings.agent.max_retry_backoff_ms / 1000, TRANSITION_BASE_DELAY_S),
    )
    pending.in_flight = False
    pending.due_at = now + delay
    pending.error = error
    return [
        TransitionRetry(
            issue_id, pending.identifier, pending.plan.target, pending.attempts + 1, delay, error
        )
    ]

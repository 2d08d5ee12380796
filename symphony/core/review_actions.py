"""What a person's action at a checkpoint does to a ticket: the move and the comment, written
through the daemon's outbox like its own transitions (`core.transitions.pend`).

A checkpoint is where a stage hands its tickets to a person (its `on_success` target, such as
`Plan Review` or `Human Review`) or where escalated tickets wait (`escalation_state`):

- approve: to the stage's `on_approved` (the next stage, or done after the last); a diff whose
  pull request the merge policy merges stays where it is, approved: the policy merges it once
  its checks pass (`core.follow`);
- request_changes: a comment with the person's words, then to the stage's
  `on_changes_requested`, so the next run gets them as `{{ comments }}`;
- replan: an optional comment, then back to the first stage's first state;
- cancel: to the tracker's cancelled state, from a checkpoint or from any active state, whatever
  the daemon is doing: a running agent is stopped and the move follows its exit, a move under
  way is followed by this one; nothing is started for the ticket meanwhile (`cancel`).

Pure: a refusal is a `Refusal` with the reason, and nothing changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from symphony.base.issue import Issue, normalize_state
from symphony.config.repository import MergePolicy
from symphony.config.sections import Settings
from symphony.config.stages import Stage, StageOutcome
from symphony.core.effects import PerformTransition, PostComment, StopWorker
from symphony.core.stage_outcomes import PlannedComment, TransitionPlan
from symphony.core.state import PullRecord, SchedulerState, StopReason
from symphony.core.transitions import pend

MAX_COMMENT_CHARS = 20_000


class ReviewAction(enum.StrEnum):
    APPROVE = "approve"
    REQUEST_CHANGES = "request_changes"
    REPLAN = "replan"
    CANCEL = "cancel"
    SPLIT = "split"
    """The plan checkpoint: the person's sub-tickets are created (`split_tickets`), then the
    ticket is closed as split into them."""


MAX_SPLIT_TICKETS = 10


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an action was not taken (an HTTP 409 or 400): `code` is stable, `message` words."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a ticket waits for a person: the stage that handed it over (None: escalated)."""

    stage: Stage | None
    state: str


def checkpoint_of(issue: Issue, settings: Settings) -> Checkpoint | None:
    """The checkpoint the ticket is at, or None (running, terminal, or not in stage mode)."""
    return checkpoint_at(issue.state, settings)


def checkpoint_at(state_name: str, settings: Settings) -> Checkpoint | None:
    """The checkpoint `state_name` is, or None (a stage's state, terminal, unknown)."""
    machine = settings.machine
    if machine is None:
        return None
    here = normalize_state(state_name)
    if machine.stage_for(state_name) is not None:
        return None
    for stage in machine.stages:
        if normalize_state(stage.on_success) == here:
            return Checkpoint(stage, state_name)
    if here == normalize_state(machine.escalation_state):
        return Checkpoint(None, state_name)
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """Where an allowed action takes the ticket, from which checkpoint, in words."""

    checkpoint: Checkpoint
    target: str
    outcome: StageOutcome
    verb: str
    merge: PullRecord | None = None
    """An approval of a diff whose pull request the merge policy merges: no move, the
    approval is noted on the record and the policy merges once the checks pass."""


def decide(
    state: SchedulerState,
    issue: Issue,
    action: ReviewAction,
    settings: Settings,
    comment: str = "",
) -> Decision | Refusal:
    """Whether `action` may be taken on `issue` as it is now, and where it goes; changes
    nothing (a split checks here before creating its tickets)."""
    machine = settings.machine
    checkpoint = checkpoint_of(issue, settings)
    if (
        action is ReviewAction.CANCEL
        and machine is not None
        and checkpoint is None
        and settings.tracker.is_active(issue.state)
    ):
        checkpoint = Checkpoint(machine.stage_for(issue.state), issue.state)
    if machine is None or checkpoint is None:
        return Refusal(
            "not_at_checkpoint",
            f"{issue.identifier} is in {issue.state}, where no person's review is waited for",
        )
    busy = issue.id in state.claimed or issue.id in state.running
    if busy and action is not ReviewAction.CANCEL:
        return Refusal("busy", f"the daemon is working on {issue.identifier} right now")
    words = comment.strip()
    if len(words) > MAX_COMMENT_CHARS:
        return Refusal("comment_too_long", f"a comment is at most {MAX_COMMENT_CHARS} characters")
    stage = checkpoint.stage
    if action is ReviewAction.APPROVE:
        if stage is None:
            return Refusal(
                "not_approvable",
                f"{issue.identifier} was escalated, not handed over: send it back or cancel it",
            )
        record = state.pull_requests.get(issue.id)
        if record is not None and settings.merge.policy is not MergePolicy.NONE:
            if record.head_sha is None:
                return Refusal(
                    "pull_request_unread",
                    f"pull request #{record.number} has not been read yet: try again shortly",
                )
            return Decision(checkpoint, "", StageOutcome.APPROVED, "approved", merge=record)
        target, outcome, verb = stage.on_approved, StageOutcome.APPROVED, "approved"
    elif action is ReviewAction.REQUEST_CHANGES:
        if not words:
            return Refusal("comment_required", "say what should change: the comment is empty")
        if stage is None:
            return Refusal(
                "no_stage", f"{issue.identifier} was escalated: send it back with replan instead"
            )
        target, outcome, verb = (
            stage.on_changes_requested,
            StageOutcome.CHANGES_REQUESTED,
            ("requested changes"),
        )
    elif action is ReviewAction.REPLAN:
        target, outcome, verb = (
            machine.stages[0].states[0],
            StageOutcome.REPLAN,
            "asked for a new plan",
        )
    elif action is ReviewAction.SPLIT:
        if stage is None or stage.evidence:
            return Refusal("not_a_plan", f"{issue.identifier} is not at a plan checkpoint")
        target, outcome, verb = cancelled_state(settings), StageOutcome.CANCELLED, "split it"
    else:
        target, outcome, verb = cancelled_state(settings), StageOutcome.CANCELLED, "cancelled it"
    return Decision(checkpoint, target, outcome, verb)


def take(
    state: SchedulerState,
    issue: Issue,
    action: ReviewAction,
    settings: Settings,
    *,
    by: str,
    comment: str = "",
    now: float,
) -> PerformTransition | PostComment | StopWorker | Queued | Refusal:
    """The transition `action` starts for `issue` as it is now (or, approving a pull request
    the policy merges, the comment that says so; cancelling a ticket the daemon works on,
    the stop of its run or the note that the move waits), or why it cannot."""
    decision = decide(state, issue, action, settings, comment)
    if isinstance(decision, Refusal):
        return decision
    if decision.merge is not None:
        return _approve_pull(decision.merge, issue, decision.checkpoint, by, comment)
    checkpoint, target, outcome, verb = (
        decision.checkpoint, decision.target, decision.outcome, decision.verb,
    )  # fmt: skip
    stage, words = checkpoint.stage, comment.strip()
    body = f"{by} {verb} at {checkpoint.state}; moving the ticket to {target}."
    if words:
        body += f"\n\n{words}"
    plan = TransitionPlan(
        stage.name if stage is not None else "review",
        outcome,
        target,
        (PlannedComment("review_action", body),),
        by=by,
    )
    state.held.pop(issue.id, None)  # a person's word at the checkpoint ends their stop
    if action is ReviewAction.CANCEL:
        return cancel(state, issue, plan, by, now)
    return pend(state, issue, plan, turns=0, now=now)


def cancel(
    state: SchedulerState, issue: Issue, plan: TransitionPlan, by: str, now: float
) -> PerformTransition | StopWorker | Queued:
    """A person's cancel, final whatever the daemon is doing: its pull request is followed
    for merged and closed only, a waiting retry is dropped, a running agent is stopped; the
    move is written now, or as soon as the run or the move under way ends."""
    record = state.pull_requests.get(issue.id)
    if record is not None:
        record.escalated = True
    state.reviews.pop(issue.id, None)
    entry = state.running.get(issue.id)
    if entry is not None or issue.id in state.transitions:
        state.queued_moves[issue.id] = (issue, plan)
        if entry is not None and entry.stop_reason is None:
            entry.stop_reason = StopReason.PERSON
            return StopWorker(issue.id, entry.identifier, StopReason.PERSON, f"cancelled by {by}")
        return Queued(issue.id, issue.identifier, plan.target)
    state.retry_attempts.pop(issue.id, None)
    state.claimed.discard(issue.id)
    return pend(state, issue, plan, turns=0, now=now)


@dataclass(frozen=True, slots=True)
class Queued:
    """A person's move waits for the daemon's step under way on the ticket, then is written."""

    issue_id: str
    identifier: str
    target: str


def _approve_pull(
    record: PullRecord, issue: Issue, checkpoint: Checkpoint, by: str, comment: str
) -> PostComment:
    """Note the approval of the pull request's current head and read it again now: the merge
    policy (`core.follow.merge_reasons`) takes it from there."""
    record.approved_by, record.approved_head = by, record.head_sha
    record.next_read_at = 0.0
    head = str(record.head_sha)[:12]
    body = (
        f"{by} approved pull request #{record.number} at {checkpoint.state} (head {head}); "
        "the daemon merges it once its checks pass and the code host allows it."
    )
    if comment.strip():
        body += f"\n\n{comment.strip()}"
    return PostComment(issue, "review_approval", f"{record.number}:{head}", body)


def cancelled_state(settings: Settings) -> str:
    """The terminal state a cancel moves to: one called Cancelled, else the last terminal."""
    terminal = settings.tracker.terminal_states
    for name in terminal:
        if normalize_state(name) in ("cancelled", "canceled"):
            return name
    return terminal[-1] if terminal else "Cancelled"


def split_tickets(raw: object) -> list[tuple[str, str]] | Refusal:
    """The sub-tickets a split names: `[{"title", "description"}]`, one to ten, each title one
    line; or why not."""
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_SPLIT_TICKETS:
        return Refusal(
            "tickets_required", f"split needs tickets: a list of 1 to {MAX_SPLIT_TICKETS}"
        )
    found = []
    for index, entry in enumerate(raw, 1):
        title = entry.get("title") if isinstance(entry, dict) else None
        description = entry.get("description", "") if isinstance(entry, dict) else None
        if not isinstance(title, str) or not title.strip() or "\n" in title.strip():
            return Refusal("tickets_required", f"ticket {index} needs a one-line title")
        if not isinstance(description, str) or len(description) > MAX_COMMENT_CHARS:
            return Refusal("tickets_required", f"ticket {index}'s description is not text")
        found.append((title.strip()[:200], description.strip()))
    return found

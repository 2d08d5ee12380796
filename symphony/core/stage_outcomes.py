"""What a finished stage run means for its ticket: the target state and the comments on the way.

Pure: the stage (`symphony.config.stages`), the agent's report, the daemon's verification and
the evidence go in, a `TransitionPlan` comes out; the outbox (`symphony.core.transitions`)
keeps it until the daemon has written it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.config.stages import Report, Stage, StageOutcome
from symphony.core.evidence import render_evidence
from symphony.core.verification import Verification, describe_failures


@dataclass(frozen=True, slots=True)
class PlannedComment:
    """A comment the daemon posts as part of a transition. `kind` is its marker. A `single`
    comment exists once per ticket and is edited in place on later transitions: the plan (the
    newest one is `{{ plan }}`) and the evidence."""

    kind: str
    body: str
    single: bool = False


@dataclass(frozen=True, slots=True)
class TransitionPlan:
    """Where a stage outcome (or a person's action) moves a ticket, and what is posted and published
    on the way; the outbox keeps it until the daemon has written it."""

    stage: str
    outcome: StageOutcome
    target: str
    comments: tuple[PlannedComment, ...]
    evidence: Mapping[str, Any] | None = None
    """The evidence bundle of a hand-off, also written to the workspace."""
    hands_off: bool = False
    """The target is a review state: the ticket goes to a person for review."""
    publish: PublishIntent | None = None
    """The stage publishes: the branch is pushed and its pull request opened or brought up to
    date before the comments and the move."""
    by: str | None = None
    """A person's action (`core.review_actions`), attributed to them; None: the daemon's."""


@dataclass(frozen=True, slots=True)
class RunPush:
    """The ticket's branch as its run pushed it before its workspace ended with the run (a
    pod's, Appendix B): its publication opens the pull request from the remote's branch. When
    nothing could be pushed, `refused` says why (masked: the remote's words) and `suspected`
    whether the commits carried a canary; the publication reports that, since the workspace
    it would push from is gone."""

    branch: str = ""
    sha: str = ""
    refused: str = ""
    suspected: bool = False


@dataclass(frozen=True, slots=True)
class PublishIntent:
    """What publishing a ticket's branch asks the code host for (`core.publishing`)."""

    title_template: str
    """Rendered for the ticket by the daemon when it publishes (Liquid loads asyncio, which the
    core never imports)."""
    body: str
    base: str | None = None
    draft: bool = False
    labels: tuple[str, ...] = ()
    replies: tuple[str, ...] = ()
    """Review threads the run addressed: each is answered "addressed in <sha>" after the push."""
    head: str | None = None
    """The commit the daemon verified (the evidence's): what is pushed, whatever the agent
    checked out since. None without evidence: the workspace's HEAD at publishing."""
    branch: str | None = None
    """The branch the evidence was read on: the one pushed to."""
    answer: str = ""
    """What the run said it did (its report's summary): quoted in each thread's reply."""
    pushed: RunPush | None = None
    """The run pushed `branch` at `head` itself (its workspace ended with it): publishing
    pushes nothing and opens the pull request from the remote's branch."""


def plan_transition(
    stage: Stage,
    report: Report | None,
    *,
    stuck: bool,
    turns_used: int,
    last_message: str | None,
    verification: Verification | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> TransitionPlan | None:
    """Where a finished stage run takes its ticket, or None when nothing was decided (no report
    and turns left: the stage continues). A `done` whose verification failed to the end goes
    to `on_verify_failed`; a `done` with `evidence` hands over with the evidence comment."""
    if (
        report is not None
        and report.outcome is StageOutcome.DONE
        and verification is not None
        and not verification.passed
    ):
        fixes = verification.fix_turns
        body = (
            f"The agent reported stage `{stage.name}` done, but the daemon's verification "
            f"still failed after {fixes} fix turn{'s' if fixes != 1 else ''}; moving the "
            f"ticket to {stage.on_verify_failed}.\n\n{describe_failures(verification.last)}"
            f"\n\nThe agent's last summary:\n\n{report.summary.strip()}"
        )
        return TransitionPlan(
            stage.name,
            StageOutcome.VERIFY_FAILED,
            stage.on_verify_failed,
            (PlannedComment("verify_failed", body),),
        )
    if report is not None and report.outcome is StageOutcome.DONE:
        comments: list[PlannedComment] = []
        if report.plan:
            comments.append(PlannedComment("plan", report.plan.strip(), single=True))
        if evidence is not None:
            comments.append(PlannedComment("evidence", render_evidence(evidence), single=True))
        else:
            comments.append(
                PlannedComment(
                    "done",
                    f"Stage `{stage.name}` is done; moving the ticket to {stage.on_success}."
                    f"\n\n{report.summary.strip()}",
                )
            )
        return TransitionPlan(
            stage.name, StageOutcome.DONE, stage.on_success, tuple(comments), evidence
        )
    if report is not None and report.outcome is StageOutcome.BLOCKED:
        body = (
            f"The agent is blocked in stage `{stage.name}`; moving the ticket to "
            f"{stage.on_blocked}.\n\n{report.summary.strip()}"
        )
        if report.open_questions:
            body += "\n\nOpen questions:\n" + "\n".join(f"- {q}" for q in report.open_questions)
        return TransitionPlan(
            stage.name, StageOutcome.BLOCKED, stage.on_blocked, (PlannedComment("blocked", body),)
        )
    if stuck:
        body = (
            f"Stage `{stage.name}` used {turns_used} turns (max_total_turns "
            f"{stage.max_total_turns}) without the agent reporting an outcome; moving the "
            f"ticket to {stage.on_stuck}."
        )
        if last_message:
            body += "\n\nThe agent's last message:\n\n> " + "\n> ".join(
                last_message.strip().splitlines()
            )
        return TransitionPlan(
            stage.name, StageOutcome.STUCK, stage.on_stuck, (PlannedComment("stuck", body),)
        )
    return None

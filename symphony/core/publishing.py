"""What a stage that publishes asks of the code host when it succeeds: the pull request's title
template, body and base (`PublishIntent`), and the hand-off's comments once it exists.

Pure: the stage's `publish:` settings, the ticket, the evidence and the agent's report go in. The
daemon pushes the branch and opens or updates the pull request (`symphony.daemon.publish`), then
writes the transition with `with_pull_request`, so the evidence comment names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from symphony.base.issue import Issue
from symphony.base.pulls import PullRequest
from symphony.config.sections import Settings
from symphony.config.stages import Report, Stage, StageOutcome
from symphony.core.evidence import render_evidence
from symphony.core.stage_outcomes import PlannedComment, PublishIntent, RunPush, TransitionPlan

MAX_BODY_CHARS = 60_000
"""Below GitHub's 65,536 and GitLab's 1,048,576 characters, with room for the closing line."""


def publish_intent(
    stage: Stage,
    settings: Settings,
    issue: Issue,
    report: Report,
    evidence: Mapping[str, Any] | None,
    replies: tuple[str, ...] = (),
    pushed: RunPush | None = None,
) -> PublishIntent | None:
    """The pull request a `done` of `stage` publishes, or None when the stage publishes
    nothing (or the workflow names no repository). `pushed`: what the run pushed itself, which
    names the branch and the head."""
    publish, repository = stage.publish, settings.repository
    if publish is None or repository is None or report.outcome is not StageOutcome.DONE:
        return None
    verified = evidence.get("workspace") if evidence is not None else None
    verified = verified if isinstance(verified, Mapping) else {}
    return PublishIntent(
        title_template=publish.title,
        body=pull_request_body(issue, report, evidence, closes=repository.closes_tickets),
        base=publish.base,
        draft=publish.draft,
        labels=publish.labels,
        replies=replies,
        head=(pushed.sha if pushed is not None else verified.get("head")) or None,
        branch=(pushed.branch if pushed is not None else verified.get("branch")) or None,
        answer=report.summary.strip() if replies else "",
        pushed=pushed,
    )


def pull_request_body(
    issue: Issue, report: Report, evidence: Mapping[str, Any] | None, *, closes: bool
) -> str:
    """The evidence (gates, commits, diff stat, cost, summary, open questions) and, when the
    tracker is the same repository or project, the reference that closes the ticket."""
    if evidence is not None:
        text = render_evidence(evidence)
    else:
        text = f"**The agent's summary**\n\n{report.summary.strip()}"
        if report.open_questions:
            text += "\n\n**Open questions**\n\n" + "\n".join(
                f"- {q}" for q in report.open_questions
            )
    text = text[:MAX_BODY_CHARS]
    if closes:
        text += f"\n\nCloses {issue.identifier}"
    return text


def with_pull_request(plan: TransitionPlan, pull: PullRequest) -> TransitionPlan:
    """The plan as written once its pull request exists: the evidence names it."""
    if plan.evidence is None:
        return plan
    evidence = {**plan.evidence, "published": {"number": pull.number, "url": pull.url}}
    comments = tuple(
        PlannedComment(c.kind, render_evidence(evidence), c.single) if c.kind == "evidence" else c
        for c in plan.comments
    )
    return dataclasses.replace(plan, evidence=evidence, comments=comments)

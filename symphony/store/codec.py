"""How the store writes the values it keeps and reads them back: an Issue, a transition plan, a
pull request, a run ledger and a review request as JSON, and timestamps that may be missing or
damaged (a bad one falls back rather than failing the whole load)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from symphony.base.issue import BlockerRef, Issue
from symphony.base.pulls import PullState, ReviewDecision
from symphony.base.times import parse_instant
from symphony.config.stages import StageOutcome
from symphony.core.stage_outcomes import PlannedComment, PublishIntent, RunPush, TransitionPlan
from symphony.core.state import PullRecord, ReviewRequest, RunLedger


def time_or(text: str, fallback: datetime) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return fallback
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def issue_to_json(issue: Issue) -> str:
    data = issue.to_template()
    data["blocked_by"] = [[b.id, b.identifier, b.state] for b in issue.blocked_by]
    return json.dumps(data, separators=(",", ":"), default=str)


def issue_from_json(text: str) -> Issue:
    data = json.loads(text)
    return Issue(
        id=data["id"],
        identifier=data["identifier"],
        title=data["title"],
        state=data["state"],
        dispatchable=bool(data["dispatchable"]),
        description=data.get("description"),
        priority=data.get("priority"),
        branch_name=data.get("branch_name"),
        url=data.get("url"),
        assignee_id=data.get("assignee_id"),
        labels=tuple(data.get("labels") or ()),
        blocked_by=tuple(BlockerRef(*ref) for ref in data.get("blocked_by") or ()),
        created_at=parse_instant(data.get("created_at")),
        updated_at=parse_instant(data.get("updated_at")),
        author=data.get("author"),
        native_ref=data.get("native_ref"),
    )


def plan_to_json(plan: TransitionPlan) -> str:
    return json.dumps(
        {
            "stage": plan.stage,
            "outcome": plan.outcome.value,
            "target": plan.target,
            "comments": [[c.kind, c.body, c.single] for c in plan.comments],
            "evidence": plan.evidence,
            "hands_off": plan.hands_off,
            "publish": dataclasses.asdict(plan.publish) if plan.publish is not None else None,
            "by": plan.by,
        }
    )


def plan_from_json(text: str) -> TransitionPlan:
    data = json.loads(text)
    return TransitionPlan(
        data["stage"],
        StageOutcome(data["outcome"]),
        data["target"],
        tuple(
            # Written before comments said so, only the plan was one of a kind.
            PlannedComment(c[0], c[1], bool(c[2]) if len(c) > 2 else c[0] == "plan")
            for c in data["comments"]
        ),
        data.get("evidence"),
        bool(data.get("hands_off", False)),
        _intent(data.get("publish")),
        data.get("by"),
    )


def _intent(data: Any) -> PublishIntent | None:
    if not isinstance(data, dict):
        return None
    return PublishIntent(
        str(data["title_template"]), str(data["body"]), data.get("base"), bool(data.get("draft")),
        tuple(data.get("labels") or ()), tuple(data.get("replies") or ()),
        data.get("head"), data.get("branch"), str(data.get("answer") or ""),
        _run_push(data.get("pushed")),
    )  # fmt: skip


def _run_push(data: Any) -> RunPush | None:
    if not isinstance(data, dict):
        return None
    return RunPush(str(data.get("branch") or ""), str(data.get("sha") or ""),
                   str(data.get("refused") or ""), bool(data.get("suspected")))  # fmt: skip


def pull_to_json(record: PullRecord) -> str:
    """A followed pull request; what is in flight (a read, a merge) is not kept: a restart
    reads it again."""
    return json.dumps(
        {
            "issue": json.loads(issue_to_json(record.issue)),
            "stage": record.stage,
            "number": record.number,
            "url": record.url,
            "branch": record.branch,
            "base": record.base,
            "state": record.state.value,
            "head_sha": record.head_sha,
            "checks": record.checks,
            "review": record.review.value,
            "mergeable": record.mergeable,
            "check_fixes": record.check_fixes,
            "fix_pushed": record.fix_pushed,
            "handled": sorted(record.handled),
            "published_at": record.published_at.isoformat() if record.published_at else None,
            "escalated": record.escalated,
            "approved_by": record.approved_by,
            "approved_head": record.approved_head,
            "history": list(record.history),
            "closing": record.closing,
            "seen_checks": sorted(record.seen_checks),
        }
    )


def pull_from_json(text: str) -> PullRecord:
    data = json.loads(text)
    return PullRecord(
        issue=issue_from_json(json.dumps(data["issue"])),
        stage=str(data["stage"]),
        number=int(data["number"]),
        url=str(data["url"]),
        branch=str(data["branch"]),
        base=str(data["base"]),
        state=PullState(data.get("state", "open")),
        head_sha=data.get("head_sha"),
        checks=str(data.get("checks") or ""),
        review=ReviewDecision(data.get("review", "none")),
        mergeable=data.get("mergeable"),
        check_fixes=int(data.get("check_fixes") or 0),
        fix_pushed=bool(data.get("fix_pushed")),
        handled=frozenset(str(k) for k in data.get("handled") or ()),
        published_at=parse_instant(data.get("published_at")),
        escalated=bool(data.get("escalated")),
        approved_by=data.get("approved_by"),
        approved_head=data.get("approved_head"),
        history=tuple(str(h) for h in data.get("history") or ()),
        closing=bool(data.get("closing")),
        seen_checks=frozenset(str(c) for c in data.get("seen_checks") or ()),
    )


def ledger_to_json(ledger: RunLedger) -> str:
    return json.dumps(
        {
            "counts": ledger.counts,
            "starts": [round(at, 3) for at in ledger.starts],
            "history": ledger.history,
            "last_output": ledger.last_output,
            "escalated": ledger.escalated,
            "suspected": ledger.suspected,
        },
        sort_keys=True,
    )


def ledger_from_json(identifier: str, text: str) -> RunLedger:
    data = json.loads(text)
    return RunLedger(
        identifier,
        counts={str(k): int(v) for k, v in (data.get("counts") or {}).items()},
        starts=[float(at) for at in data.get("starts") or ()],
        history=[str(h) for h in data.get("history") or ()],
        last_output=data.get("last_output"),
        escalated=data.get("escalated"),
        suspected=data.get("suspected"),
    )


def review_to_json(request: ReviewRequest) -> str:
    return json.dumps({"kind": request.kind, "text": request.text, "threads": request.threads})


def review_from_json(text: str) -> ReviewRequest:
    data = json.loads(text)
    return ReviewRequest(str(data["kind"]), str(data["text"]), tuple(data.get("threads") or ()))

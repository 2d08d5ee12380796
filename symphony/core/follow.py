"""Following a published pull request until it is merged or closed, and merging it by policy.

Pure: each reading of a pull request (`on_pull_read`) is judged against the ticket's
`PullRecord` and the workflow's `follow:` and `merge:` settings, on the current head commit only:

- merged: the ticket moves to `follow.on_merged` (its workspace then goes as for any terminal
  ticket); closed unmerged: to `follow.on_closed`;
- a review that requests changes, or unresolved threads: to `follow.on_changes_requested`, whose
  run gets the review as `{{ review }}`; the same review is acted on once (the daemon's own
  replies do not count as new words);
- a conflict with the base: with `fix`, a fix run told to merge the base in; else a move;
- failed checks (every check that counts has finished, one or more failed): with `fix`, a fix
  run of the publishing stage in the ticket's workspace, its ticket left where it waits, the
  failures with the end of their output as `{{ review }}`; each (head, failed set) once; after
  `follow.max_check_fixes` to `escalation_state`. A check pending past `pending_timeout_ms` is a
  comment;
- green, approved, mergeable, not a draft (and labelled, if the policy asks): a merge at the
  head commit read, one at a time per base branch.

Nothing is decided for a ticket the daemon is working on (claimed): its run or its move comes
first, and the next reading sees what it left.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime

from symphony.base.fences import plain, quoted
from symphony.base.pulls import (
    Check,
    CheckState,
    PullRequest,
    PullState,
    PullStatus,
    ReviewDecision,
    ReviewThread,
)
from symphony.config.repository import FIX, ChecksScope, MergePolicy
from symphony.config.sections import Settings
from symphony.config.stages import StageOutcome
from symphony.config.trust import TrustSettings
from symphony.core.dispatch import has_slot, start_run
from symphony.core.effects import (
    Effect,
    MergePullRequest,
    PostComment,
    ReadPullRequest,
    StopWorker,
)
from symphony.core.injection import merge_held
from symphony.core.markers import marked, marker_of
from symphony.core.outcomes import CHECK_FIX, CHECK_FIXED, MERGED, OutcomeRecord
from symphony.core.reruns import escalate, refusal, settled
from symphony.core.stage_outcomes import PlannedComment, TransitionPlan
from symphony.core.state import (
    PullRecord,
    ReviewRequest,
    RunKind,
    SchedulerState,
    StopReason,
)
from symphony.core.transitions import pend
from symphony.core.trust import material

ADDRESSED = "addressed"
"""The marker kind of the daemon's replies on review threads (not a reviewer's words)."""
MAX_REVIEW_CHARS = 20_000
"""`{{ review }}` is cut to this many characters: the prompt stays bounded."""
HISTORY = 20
"""Entries of a pull request's red and green history kept."""


class MergeAnswer(enum.StrEnum):
    """What a merge call came back with."""

    MERGED = "merged"
    REFUSED = "refused"
    """The host said no as asked (not mergeable, rules not met): not tried again at this head."""
    HEAD_MOVED = "head_moved"
    """The branch's head is no longer the commit judged (a push between reading and merging):
    read again at once and judge the new head; nothing to say on the ticket."""
    FAILED = "failed"
    """The network, the host's 5xx, a timeout, read back unmerged: judged at the next reading."""


class ChecksVerdict(enum.StrEnum):
    """What a pull request's counted checks say together (`verdict_of`)."""

    GREEN = "green"
    RED = "red"
    PENDING = "pending"
    NONE = "none"
    """No check counts."""


def counted_checks(checks: Sequence[Check], scope: ChecksScope) -> tuple[Check, ...]:
    """The checks that decide green and red: `required` takes those the base branch requires,
    or every check where it requires none; `all` every one; `none` none."""
    if scope is ChecksScope.NONE:
        return ()
    if scope is ChecksScope.REQUIRED:
        required = tuple(c for c in checks if c.required)
        if required:
            return required
    return tuple(checks)


def verdict_of(counted: Sequence[Check]) -> ChecksVerdict:
    if not counted:
        return ChecksVerdict.NONE
    if any(c.state is CheckState.PENDING for c in counted):
        return ChecksVerdict.PENDING
    if any(c.state is CheckState.FAILED for c in counted):
        return ChecksVerdict.RED
    return ChecksVerdict.GREEN


def summarize_checks(counted: Sequence[Check]) -> str:
    """`2 passed, 1 failed`, for people; empty when no check counts."""
    counts = {s: sum(c.state is s for c in counted) for s in CheckState}
    return ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)


# Publishing and reading


def on_published(state: SchedulerState, issue_id: str, pull: PullRequest, wall: datetime) -> None:
    """The pending hand-off of `issue_id` published `pull`: follow it from now on (a rework's
    new push to the same pull request resumes following it)."""
    pending = state.transitions.get(issue_id)
    record = state.pull_requests.get(issue_id)
    if record is None or record.number != pull.number:
        if pending is None:
            return
        record = PullRecord(
            issue=pending.issue,
            stage=pending.plan.stage,
            number=pull.number,
            url=pull.url,
            branch=pull.branch,
            base=pull.base,
            published_at=wall,
        )
        state.pull_requests[issue_id] = record
    record.url, record.base, record.state = pull.url, pull.base, PullState.OPEN
    record.head_sha, record.pending_since = pull.head_sha, None
    record.escalated = record.merging = False
    record.next_read_at = 0.0


def due_reads(state: SchedulerState, settings: Settings, now: float) -> list[Effect]:
    """Start reading the open pull requests whose interval has passed."""
    effects: list[Effect] = []
    for issue_id, record in state.pull_requests.items():
        followed = record.state is PullState.OPEN or record.closing
        if followed and not record.reading and record.next_read_at <= now:
            record.reading = True
            effects.append(ReadPullRequest(issue_id, record.identifier, record.number))
    return effects


def next_read_at(state: SchedulerState) -> float | None:
    """When the next pull request is due to be read; None when none is followed."""
    due = [
        r.next_read_at
        for r in state.pull_requests.values()
        if (r.state is PullState.OPEN or r.closing) and not r.reading
    ]
    return min(due) if due else None


def read_now(state: SchedulerState, issue_ids: Iterable[str] | None = None) -> None:
    """A webhook said something changed: read these pull requests (None: every one) at once."""
    wanted = set(issue_ids) if issue_ids is not None else None
    for issue_id, record in state.pull_requests.items():
        if wanted is None or issue_id in wanted:
            record.next_read_at = 0.0


def on_read_failed(state: SchedulerState, issue_id: str, settings: Settings, now: float) -> None:
    """A reading failed: try again after the interval (the failure is in the log)."""
    record = state.pull_requests.get(issue_id)
    if record is not None:
        record.reading = False
        record.next_read_at = now + _interval_s(settings)


def _interval_s(settings: Settings) -> float:
    return (settings.follow.interval_ms or settings.polling.interval_ms) / 1000


# Judging a reading


def on_pull_read(
    state: SchedulerState,
    issue_id: str,
    status: PullStatus,
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """What a reading of the ticket's pull request asks for (see the module's docstring)."""
    record = state.pull_requests.get(issue_id)
    if record is None:
        return []
    record.reading = False
    record.next_read_at = now + _interval_s(settings)
    pull = status.pull
    if pull.head_sha != record.head_sha:
        record.head_sha, record.pending_since = pull.head_sha, None
    counted = counted_checks(status.checks, settings.follow.checks)
    verdict, waiting = _evidence_verdict(record, status, counted, settings)
    record.checks = summarize_checks(counted) + (
        f" (waiting for {', '.join(waiting)})" if waiting else ""
    )
    record.seen_checks |= {c.name for c in counted}
    record.review, record.mergeable = status.review_decision, status.mergeable
    _settle(state, record, status, verdict)
    if pull.state is PullState.CLOSED and record.state is PullState.OPEN:
        # A person closed it: whatever the daemon is doing for the ticket ends now.
        record.state, record.closing = PullState.CLOSED, True
        pending = state.transitions.get(issue_id)
        if pending is not None and pending.plan.publish is not None and not pending.in_flight:
            # A hand-off waiting to be written publishes nothing now (no new pull request).
            pending.plan = dataclasses.replace(pending.plan, publish=None)
        entry = state.running.get(issue_id)
        if entry is not None and entry.stop_reason is None:
            entry.stop_reason = StopReason.PULL_CLOSED
            detail = f"pull request #{record.number} was closed by a person"
            return [StopWorker(issue_id, record.identifier, StopReason.PULL_CLOSED, detail)]
    if issue_id in state.claimed or record.merging:
        return []
    if record.closing:
        return _closed(state, record, settings, now)
    if pull.state is PullState.MERGED:
        return _merged(state, record, settings, now, wall, "merged on the code host")
    if record.escalated or issue_id in state.held:
        return []
    if record.fix_pushed and verdict is ChecksVerdict.GREEN:
        record.fix_pushed = False
        data = {"number": record.number}
        state.new_outcomes.append(
            OutcomeRecord(wall, CHECK_FIXED, issue_id, record.identifier, data)
        )
    for judge in (_review, _conflict, _failed_checks):
        effects = judge(state, record, status, counted, settings, now, wall)
        if effects is not None:
            return effects
    if verdict is ChecksVerdict.PENDING:
        return _pending(record, settings, now)
    return _merge(state, record, status, verdict, settings, now)


def _evidence_verdict(
    record: PullRecord, status: PullStatus, counted: Sequence[Check], settings: Settings
) -> tuple[ChecksVerdict, list[str]]:
    """The verdict on this head, and the checks it still waits for: a head with no check
    reported yet, or without a check an earlier head of this pull request had, is pending,
    never green (only `follow.checks: none` merges without checks)."""
    verdict = verdict_of(counted)
    if settings.follow.checks is ChecksScope.NONE or verdict in (
        ChecksVerdict.RED,
        ChecksVerdict.PENDING,
    ):
        return verdict, []
    missing = sorted(record.seen_checks - {c.name for c in status.checks})
    if missing:
        return ChecksVerdict.PENDING, missing
    if verdict is ChecksVerdict.NONE:
        return ChecksVerdict.PENDING, ["any check to report"]
    return verdict, []


def _settle(
    state: SchedulerState, record: PullRecord, status: PullStatus, verdict: ChecksVerdict
) -> None:
    """Green checks end the check-fix loop and a clean merge the conflict loop: their counts
    start again, and the history says which head settled it."""
    issue_id, head = record.issue.id, str(record.head_sha)[:12]
    ledger = state.ledgers.get(issue_id)
    counts = ledger.counts if ledger is not None else {}
    if verdict is ChecksVerdict.GREEN and RunKind.CHECK_FIX.value in counts:
        settled(state, issue_id, RunKind.CHECK_FIX)
        note(record, f"checks green on {head}")
    if status.mergeable is True and RunKind.CONFLICT_FIX.value in counts:
        settled(state, issue_id, RunKind.CONFLICT_FIX)
        note(record, f"merges cleanly again at {head}")


def note(record: PullRecord, text: str) -> None:
    """Add to the pull request's red and green history (bounded)."""
    record.history = (*record.history, text)[-HISTORY:]


def _merged(
    state: SchedulerState,
    record: PullRecord,
    settings: Settings,
    now: float,
    wall: datetime,
    how: str,
) -> list[Effect]:
    record.state = PullState.MERGED
    issue_id = record.issue.id
    state.reviews.pop(issue_id, None)
    data: dict[str, object] = {"number": record.number, "check_fixes": record.check_fixes}
    if record.published_at is not None:
        data["seconds"] = round(max((wall - record.published_at).total_seconds(), 0.0), 1)
    handed = state.handed_off.get(issue_id, ())
    data["rework"] = len(set(handed)) != len(handed)
    state.new_outcomes.append(OutcomeRecord(wall, MERGED, issue_id, record.identifier, data))
    _read_base_again(state, record)
    target = settings.follow.on_merged
    if target is None:
        return []
    body = f"Pull request #{record.number} was {how} ({record.url}); moving the ticket to {target}."
    return _move(state, record, target, StageOutcome.MERGED, "merged", body, now)


def _closed(
    state: SchedulerState, record: PullRecord, settings: Settings, now: float
) -> list[Effect]:
    record.state, record.closing, record.escalated = PullState.CLOSED, False, True
    state.reviews.pop(record.issue.id, None)
    machine = settings.machine
    target = settings.follow.on_closed or (machine.escalation_state if machine else None)
    if target is None:
        return []
    body = (
        f"Pull request #{record.number} was closed without being merged ({record.url}): "
        f"the daemon publishes nothing more for this ticket; moving it to {target}."
    )
    return _move(state, record, target, StageOutcome.CLOSED, "closed", body, now)


def _review(
    state: SchedulerState,
    record: PullRecord,
    status: PullStatus,
    counted: Sequence[Check],
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect] | None:
    threads = tuple(t for t in status.threads if _reviewer_spoke_last(t))
    if status.review_decision is not ReviewDecision.CHANGES_REQUESTED and not threads:
        return None
    key = review_key(status)
    if key in record.handled:
        return None
    record.handled |= {key}
    target = settings.follow.on_changes_requested
    if target is None:
        body = (
            f"The review of pull request #{record.number} asks for changes, and "
            "`follow.on_changes_requested` names no state: the ticket waits for a person."
        )
        return [PostComment(record.issue, "changes_requested", key, body)]
    text = review_text(record, status, threads, counted, settings.trust)
    state.reviews[record.issue.id] = ReviewRequest("review", text, tuple(t.id for t in threads))
    body = (
        f"The review of pull request #{record.number} asks for changes "
        f"({len(threads)} open thread{'s' if len(threads) != 1 else ''}); moving the ticket to "
        f"{target}, whose run addresses them."
    )
    return _move(
        state, record, target, StageOutcome.CHANGES_REQUESTED, "changes_requested", body, now
    )


def review_key(status: PullStatus) -> str:
    """What the reviewers said, not counting the daemon's own replies: the same words are
    acted on once, a new review or a new comment on a thread is a new round. A review a person
    gave on the review page is acted on there: its key is noted as handled at once."""
    asked = [r for r in status.reviews if r.state == "changes_requested"]
    return "review:" + _digest(
        [f"{r.author}:{r.body}" for r in asked]
        + [f"{t.id}:{sum(not _is_reply(c.body) for c in t.comments)}" for t in status.threads]
    )


def _reviewer_spoke_last(thread: ReviewThread) -> bool:
    """A thread whose last word is the daemon's own "addressed in" reply waits for its
    reviewer, not for another run."""
    return bool(thread.comments) and not _is_reply(thread.comments[-1].body)


def _is_reply(body: str) -> bool:
    marker = marker_of(body)
    return marker is not None and marker[0] == ADDRESSED


def _conflict(
    state: SchedulerState,
    record: PullRecord,
    status: PullStatus,
    counted: Sequence[Check],
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect] | None:
    if status.mergeable is not False:
        return None
    key = f"conflict:{record.head_sha}"
    if key in record.handled:
        return None
    text = (
        f"The branch `{record.branch}` of pull request #{record.number} no longer merges onto "
        f"`{record.base}`. Fetch the current `{record.base}`, merge it into the branch (do not "
        "rebase: the daemon never force-pushes), resolve the conflicts, make the checks pass "
        "and commit; then report done."
    )
    target = settings.follow.on_conflict
    if target != FIX:
        record.handled |= {key}
        state.reviews[record.issue.id] = ReviewRequest("conflict", text)
        body = f"Pull request #{record.number} conflicts with {record.base}; moving to {target}."
        return _move(state, record, target, StageOutcome.CONFLICT, "conflict", body, now)
    seen = f"conflicts with {record.base} at {str(record.head_sha)[:12]}"
    request = ReviewRequest("conflict", text)
    return _fix_run(state, record, settings, now, wall, key, request, RunKind.CONFLICT_FIX, seen)


def _failed_checks(
    state: SchedulerState,
    record: PullRecord,
    status: PullStatus,
    counted: Sequence[Check],
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect] | None:
    if verdict_of(counted) is not ChecksVerdict.RED:
        return None
    failed = [c for c in counted if c.state is CheckState.FAILED]
    key = f"checks:{record.head_sha}:" + ",".join(sorted(c.name for c in failed))
    if key in record.handled:
        return None
    text = checks_text(record, failed)
    follow = settings.follow
    if follow.on_checks_failed != FIX:
        record.handled |= {key}
        state.reviews[record.issue.id] = ReviewRequest("checks", text)
        body = f"Checks failed on pull request #{record.number}; moving the ticket to "
        body += f"{follow.on_checks_failed}.\n\n{plain(text)}"
        return _move(
            state, record, follow.on_checks_failed, StageOutcome.CHECKS_FAILED, "checks_failed",
            body, now,
        )  # fmt: skip
    names = ", ".join(c.name for c in failed)
    seen = f"{names} failed on {str(record.head_sha)[:12]}"
    request = ReviewRequest("checks", text)
    effects = _fix_run(
        state, record, settings, now, wall, key, request, RunKind.CHECK_FIX, seen, detail=names
    )
    if effects and record.escalated:
        return effects
    if effects:
        record.check_fixes += 1
        record.fix_pushed = True
        data = {"number": record.number, "failed": [c.name for c in failed]}
        state.new_outcomes.append(
            OutcomeRecord(wall, CHECK_FIX, record.issue.id, record.identifier, data)
        )
    return effects


def _fix_run(
    state: SchedulerState,
    record: PullRecord,
    settings: Settings,
    now: float,
    wall: datetime,
    key: str,
    request: ReviewRequest,
    kind: RunKind,
    seen: str,
    *,
    detail: str = "",
) -> list[Effect]:
    """Run the publishing stage again in the ticket's workspace while the ticket waits where
    it is; without a free slot, the next reading tries again. Past the kind's cap (or the
    runaway guard) the ticket goes to a person instead, with the request. `seen` is what the
    reading found, for the pull request's history."""
    machine = settings.machine
    stage = machine.stage_named(record.stage) if machine is not None else None
    if stage is None:
        return []
    why = refusal(state, record.issue.id, kind, settings, wall)
    if why is not None:
        record.handled |= {key}
        note(record, f"{seen}: no {kind.value} started, {why}")
        return escalate(
            state, record.issue, f"pull request #{record.number}: {why}", settings, now,
            stage=stage.name, extra=request.text,
        )  # fmt: skip
    if not has_slot(state, settings.agent, record.issue.state):
        return []
    record.handled |= {key}
    state.reviews[record.issue.id] = request
    start = start_run(
        state, record.issue, None, now, wall, settings,
        stage_name=stage.name, hold_state=record.issue.state, kind=kind, detail=detail,
    )  # fmt: skip
    note(record, f"{seen}: {start.label} sent")
    return [start]


def _pending(record: PullRecord, settings: Settings, now: float) -> list[Effect]:
    if record.pending_since is None:
        record.pending_since = now
        return []
    waited = now - record.pending_since
    key = f"pending:{record.head_sha}"
    if waited * 1000 < settings.follow.pending_timeout_ms or key in record.handled:
        return []
    record.handled |= {key}
    body = (
        f"Checks on pull request #{record.number} are still pending after "
        f"{round(waited / 60)} min (head {str(record.head_sha)[:12]}: {record.checks}); the "
        "daemon waits for them, and fixes and merges nothing until they finish."
    )
    return [PostComment(record.issue, "checks_pending", str(record.head_sha), body)]


def _merge(
    state: SchedulerState,
    record: PullRecord,
    status: PullStatus,
    verdict: ChecksVerdict,
    settings: Settings,
    now: float,
) -> list[Effect]:
    merge = settings.merge
    if merge.policy is MergePolicy.NONE or record.head_sha is None:
        return []
    if merge_held(state, record):
        return []  # a suspected injection: a person approves this head first
    why = merge_reasons(record, status, verdict, settings)
    if why is None or f"merge-refused:{record.head_sha}" in record.handled:
        return []
    if any(other.merging and other.base == record.base for other in state.pull_requests.values()):
        return []  # one merge at a time per base branch; this one is read again after it
    record.merging = True
    return [
        MergePullRequest(
            record.issue.id, record.identifier, record.number, record.head_sha,
            merge.method.value, why,
        )
    ]  # fmt: skip


def merge_reasons(
    record: PullRecord, status: PullStatus, verdict: ChecksVerdict, settings: Settings
) -> str | None:
    """Why the policy allows merging now, in a sentence; None when it does not."""
    merge = settings.merge
    if status.pull.draft or status.mergeable is not True or status.threads:
        return None
    if status.merge_allowed is False:
        return None  # the host says it will not merge now (rules unmet, behind, blocked)
    if verdict not in (ChecksVerdict.GREEN, ChecksVerdict.NONE):
        return None
    label = merge.require_label
    if label is not None and label not in status.labels and label not in record.issue.labels:
        return None
    if status.review_decision is ReviewDecision.APPROVED:
        approvers = sorted({r.author for r in status.reviews if r.state == "approved"})
        approved = "approved" + (f" by {', '.join(approvers)}" if approvers else "")
    elif (
        record.approved_by is not None
        and record.approved_head == record.head_sha
        and status.review_decision is not ReviewDecision.CHANGES_REQUESTED
    ):
        approved = f"approved by {record.approved_by} on the review page"
    elif status.review_decision is ReviewDecision.NONE and status.approvals_required == 0:
        approved = "the base branch requires no approval"
    else:
        return None
    checks = (
        f"every check that counts passed ({record.checks})"
        if verdict is ChecksVerdict.GREEN
        else "no check counts"
    )
    labelled = f", labelled {label}" if label is not None else ""
    return (
        f"{approved}; {checks} on {str(record.head_sha)[:12]}; mergeable, not a draft"
        f"{labelled} (merge.policy {merge.policy.value})"
    )


def on_merge_answered(
    state: SchedulerState,
    issue_id: str,
    answer: MergeAnswer,
    detail: str,
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """The merge call answered (see `MergeAnswer`): merged moves the ticket on; refused is said
    once per head commit and not tried again until the head changes; a moved head is read
    again at once; a call that failed otherwise is judged again at the next reading."""
    record = state.pull_requests.get(issue_id)
    if record is None:
        return []
    record.merging = False
    if answer is MergeAnswer.MERGED:
        return _merged(state, record, settings, now, wall, f"merged by the daemon: {detail}")
    if answer is MergeAnswer.HEAD_MOVED:
        record.next_read_at = now
        return []
    if answer is MergeAnswer.FAILED:
        return []  # read again after the interval, as after any reading
    key = f"merge-refused:{record.head_sha}"
    record.handled |= {key}
    _read_base_again(state, record)
    body = f"The daemon's merge of pull request #{record.number} was refused: {detail}"
    return [PostComment(record.issue, "merge_refused", str(record.head_sha), body)]


def _read_base_again(state: SchedulerState, record: PullRecord) -> None:
    """After a merge on a base, every other pull request onto it is read again: the merge
    may have made it conflict, or freed it to merge next."""
    for other in state.pull_requests.values():
        if other is not record and other.base == record.base and other.state is PullState.OPEN:
            other.next_read_at = 0.0


def _move(
    state: SchedulerState,
    record: PullRecord,
    target: str,
    outcome: StageOutcome,
    kind: str,
    body: str,
    now: float,
) -> list[Effect]:
    plan = TransitionPlan(record.stage, outcome, target, (PlannedComment(kind, body),))
    return [pend(state, record.issue, plan, turns=0, now=now)]


# What a run is told


def checks_text(record: PullRecord, failed: Sequence[Check]) -> str:
    """The failed checks with the end of each one's output, for the fix run and the ticket."""
    lines = [
        f"Checks failed on pull request #{record.number} ({record.url}) at "
        f"{str(record.head_sha)[:12]}:"
    ]
    for check in failed:
        where = f" ({check.url})" if check.url else ""
        lines += ["", f"### {check.name}{where}"]
        if check.output:
            lines += ["", quoted(check.output.strip(), f"CI log of {check.name}")]
    lines += [
        "",
        "Fix the cause in the branch and commit; the daemon runs the stage's gates again and "
        "pushes. Report done when the fix is committed.",
    ]
    return _bounded("\n".join(lines))


def review_text(
    record: PullRecord,
    status: PullStatus,
    threads: Sequence[ReviewThread],
    counted: Sequence[Check],
    trust: TrustSettings,
) -> str:
    """The review as a run reads it: the review bodies, then each open thread with its file,
    line, diff hunk and comments; each reviewer's words quoted under their name
    (`core.trust`), an untrusted one's labelled so or left out."""
    lines = [f"Review of pull request #{record.number} ({record.url}):"]
    left_out = 0
    for review in status.reviews:
        if review.state == "changes_requested" or review.body.strip():
            verdict = review.state.replace("_", " ")
            said = review.body.strip() or "(no text)"
            text = material(said, f"review ({verdict})", review.author, review.author_member, trust)
            left_out += text is None
            lines += ["", text] if text is not None else []
    for number, thread in enumerate(threads, 1):
        where = thread.path or "the change"
        if thread.line is not None:
            where += f", line {thread.line}"
        lines += ["", f"Thread {number}: {where}"]
        if thread.diff_hunk:
            lines.append(quoted(thread.diff_hunk.strip(), "diff hunk of the thread"))
        for comment in thread.comments:
            text = material(
                comment.body.strip(), "review comment", comment.author, comment.author_member,
                trust,
            )  # fmt: skip
            left_out += text is None
            lines += [text] if text is not None else []
    if left_out:
        lines += ["", f"({left_out} by authors this workflow does not trust left out)"]
    failed = [c for c in counted if c.state is CheckState.FAILED]
    if failed:
        lines += ["", "Failing checks too: " + ", ".join(c.name for c in failed)]
    lines += [
        "",
        "Address each point in the branch and commit; the daemon pushes and answers each thread.",
    ]
    return _bounded("\n".join(lines))


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REVIEW_CHARS else text[: MAX_REVIEW_CHARS - 1] + "…"


def _digest(parts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def addressed_reply(sha: str, answer: str = "") -> str:
    """The body of the daemon's reply on a thread its run addressed, with what the run said
    it did (marked, so it is never taken for a reviewer's new words)."""
    said = f"Addressed in {sha[:7].lower()}."
    if answer.strip():
        said += f"\n\n{answer.strip()[:MAX_ANSWER_CHARS]}"
    return marked(said, ADDRESSED)


MAX_ANSWER_CHARS = 4_000
"""The most of a run's summary a thread's reply quotes."""

"""A person's review from the review page, on the ticket's pull request and in its next run.

Requesting changes with line comments: the note and the comments are posted on the pull request
as one review (`CodeHost.submit_review`), the threads they open are kept to be answered after
the rework's push, and the run is given each comment with its file, line and the code round it
(`core.line_review`). The review the daemon itself posted is never taken for a new one by
following (its key is noted as handled). Approving notes the person on the pull request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog

from symphony.base.pulls import DiffSide, LineComment, PullState
from symphony.base.secrets import SecretMasker
from symphony.codehost.contract import CodeHost, CodeHostError, ReviewDraft, ReviewVerdict
from symphony.core import follow
from symphony.core.line_review import review_text, where
from symphony.core.review_actions import Refusal
from symphony.core.state import PullRecord, ReviewRequest
from symphony.workspace.diff_lines import code_around

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PersonReview:
    """What a change request with line comments leaves for the rework run."""

    request: ReviewRequest | None
    """None: no line comments; the note reaches the run as a ticket comment."""
    ticket_words: str
    """The note, then each comment where it is: the ticket's record of the review."""


async def request_changes(
    host: CodeHost | None,
    record: PullRecord | None,
    *,
    by: str,
    note: str,
    comments: Sequence[LineComment],
    patches: Mapping[str, str],
    masker: SecretMasker,
) -> PersonReview | Refusal:
    """Post the review where there is an open pull request, and write the run's request."""
    threads: tuple[str, ...] = ()
    if host is not None and record is not None and record.state is PullState.OPEN:
        body = f"Changes requested by {by} on the review page."
        if note.strip():
            body += f"\n\n{note.strip()}"
        draft = ReviewDraft(
            ReviewVerdict.REQUEST_CHANGES, body, record.head_sha, tuple(comments), by
        )
        try:
            posted = await host.submit_review(record.number, draft)
            status = await host.read_status(record.number)
        except CodeHostError as exc:
            said = masker.mask(exc.message)
            log.warning("review not posted", number=record.number, reason=said)
            return Refusal("code_host_unreachable", f"the review was not posted: {said}")
        threads = posted.threads
        record.handled |= {follow.review_key(status)}
    words = note.strip()
    for number, comment in enumerate(comments, 1):
        words += f"\n\n{number}. {where(comment)}: {comment.body}"
    if not comments:
        return PersonReview(None, words.strip())
    code = [
        code_around(
            patches.get(c.path, ""), c.line, left=c.side is DiffSide.LEFT, start=c.start_line
        )
        for c in comments
    ]
    url = record.url if record is not None else None
    text = review_text(by, note, comments, code, url)
    return PersonReview(ReviewRequest("review", text, threads), words.strip())


async def note_approval(
    host: CodeHost | None, record: PullRecord | None, by: str, masker: SecretMasker
) -> None:
    """Say on the open pull request who approved which head on the review page. Best effort:
    the approval stands on the ticket whether or not the host took the note."""
    if host is None or record is None or record.state is not PullState.OPEN:
        return
    head = (record.head_sha or "")[:7].lower()
    body = f"Approved by {by} on the review page" + (f" at {head}." if head else ".")
    try:
        await host.submit_review(
            record.number, ReviewDraft(ReviewVerdict.COMMENT, body, record.head_sha, by=by)
        )
    except CodeHostError as exc:
        log.warning("approval not noted", number=record.number, reason=masker.mask(exc.message))

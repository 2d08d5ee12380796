"""What the daemon knows of a pull request (GitLab: merge request): its state, checks and
reviews as a code host reports them, in the daemon's own words.

Plain values, no I/O: the core's follow and merge decisions read them, a code host adapter
(`symphony.codehost`) builds them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class PullState(enum.StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    """Closed without being merged."""
    MERGED = "merged"


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A pull request (GitLab: merge request) as the code host reports it: its branch and base,
    whether it is open, and its head commit."""

    number: int
    url: str
    branch: str
    base: str
    state: PullState
    title: str
    draft: bool = False
    head_sha: str | None = None


class CheckState(enum.StrEnum):
    PENDING = "pending"
    """Queued or running: the check has not decided yet."""
    PASSED = "passed"
    """Succeeded, or finished without a verdict that blocks (neutral, skipped)."""
    FAILED = "failed"
    """Failed, errored, timed out, cancelled, or asks for action."""


@dataclass(frozen=True, slots=True)
class Check:
    """One check on the head commit: a GitHub check run or commit status, a GitLab job."""

    name: str
    state: CheckState
    required: bool = False
    """The base branch's rules require it to pass before a merge."""
    url: str | None = None
    output: str | None = None
    """What it said when it failed (the end of its log, its annotations), bounded by the
    adapter to `CHECK_OUTPUT_CHARS`; None while it passes or is pending."""


CHECK_OUTPUT_CHARS = 8_000
"""The most of one failed check's output a code host hands over (the end of it)."""


class ReviewDecision(enum.StrEnum):
    APPROVED = "approved"
    CHANGES_REQUESTED = "changes_requested"
    REVIEW_REQUIRED = "review_required"
    NONE = "none"
    """No review is required and none was given."""


@dataclass(frozen=True, slots=True)
class ReviewComment:
    """One comment in a review thread: who wrote it and what it says."""

    author: str
    body: str
    author_member: bool | None = None
    """Whether the host counts the author as one of the repository's people (a GitHub owner,
    member or collaborator; a GitLab project member); None when it does not say."""


@dataclass(frozen=True, slots=True)
class ReviewThread:
    """An unresolved conversation on a line of the change (GitHub review thread, GitLab
    discussion). `id` is what `reply_to_thread` takes."""

    id: str
    path: str | None
    line: int | None
    diff_hunk: str | None
    comments: tuple[ReviewComment, ...]
    aliases: tuple[str, ...] = ()
    """Other ids the host knows the thread by (GitHub: its comments' REST ids, which a review
    posted over REST answers with): `reply_to_thread` takes any of them."""


class DiffSide(enum.StrEnum):
    """Which side of a diff a line is counted on: the base's (removed) or the head's."""

    LEFT = "left"
    RIGHT = "right"


@dataclass(frozen=True, slots=True)
class LineComment:
    """A person's comment on a line, or a range of lines, of a pull request's change."""

    path: str
    line: int
    """The range's last line, numbered on `side` (the head's file for RIGHT)."""
    body: str
    side: DiffSide = DiffSide.RIGHT
    start_line: int | None = None
    """The range's first line on the same side; None: one line."""


class ReviewVerdict(enum.StrEnum):
    REQUEST_CHANGES = "request_changes"
    COMMENT = "comment"
    """Words only: what records an approval given on the review surface, since the daemon's
    token is not the person's and must not count as their approval on the host."""


@dataclass(frozen=True, slots=True)
class ReviewDraft:
    """A review the daemon posts for a person: an overall note and its line comments, sent
    together as one review (GitHub) or as one discussion per comment (GitLab)."""

    verdict: ReviewVerdict
    body: str
    head_sha: str | None = None
    """The commit the lines were read on; None: the pull request's head."""
    comments: tuple[LineComment, ...] = ()
    by: str = ""
    """The person, where a host records a reviewer apart from the words (the local host)."""


@dataclass(frozen=True, slots=True)
class PostedReview:
    """What the code host answered a review the daemon posted for a person (`submit_review`)."""

    threads: tuple[str, ...]
    """One thread id per line comment, in order: what `reply_to_thread` takes."""


@dataclass(frozen=True, slots=True)
class Review:
    """A submitted review with a verdict or a body (GitHub review, GitLab approval)."""

    author: str
    state: str
    """approved | changes_requested | commented"""
    body: str = ""
    author_member: bool | None = None
    """As `ReviewComment.author_member`."""


@dataclass(frozen=True, slots=True)
class PullStatus:
    """What following a pull request needs to know of it, read at one moment."""

    pull: PullRequest
    mergeable: bool | None
    """False: it conflicts with its base; None: the host has not computed it yet."""
    review_decision: ReviewDecision
    checks: tuple[Check, ...] = ()
    threads: tuple[ReviewThread, ...] = ()
    """Unresolved threads only."""
    reviews: tuple[Review, ...] = ()
    labels: tuple[str, ...] = ()
    approvals_required: int | None = None
    """How many approvals the base branch's rules require, where the host says so."""
    merge_allowed: bool | None = None
    """Whether the host would merge it now (GitHub `mergeable_state` clean, unstable or
    has_hooks; GitLab `detailed_merge_status` mergeable); False: it says it will not (rules
    unmet, behind its base, blocked, still computing); None: the host has no such answer."""
    merge_state: str | None = None
    """The host's own word for it (`blocked`, `behind`, `not_approved`, ...), for people."""


@dataclass(frozen=True, slots=True)
class Merged:
    """What the code host answered a merge it made (`CodeHost.merge`)."""

    sha: str | None
    """The commit the merge made on the base, where the host names it."""

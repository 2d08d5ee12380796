"""The boundary a code host implements for the daemon's pull requests (GitLab: merge requests),
and publishing built on it.

A code host is found by `repository.kind` like a tracker by `tracker.kind`: the adapter
package of that name declares a `CODE_HOST` (`CodeHostAdapter`). It knows one repository, given
by `RepositorySettings`, and speaks with the daemon's own token. Its errors are `CodeHostError`
with a stable category; an HTTP adapter maps its client's errors to them once, at its seam.

`publish_pull_request` is idempotent across crashes and restarts: the pull request the daemon
opened before for the branch is found and updated, never opened twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from symphony.base.adapters import adapter_module
from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.base.pulls import (
    CHECK_OUTPUT_CHARS,
    Check,
    CheckState,
    DiffSide,
    LineComment,
    Merged,
    PostedReview,
    PullRequest,
    PullState,
    PullStatus,
    Review,
    ReviewComment,
    ReviewDecision,
    ReviewDraft,
    ReviewThread,
    ReviewVerdict,
)
from symphony.config.repository import MergeMethod, RepositorySettings

CODE_HOST_REQUEST = ErrorCategory.CODE_HOST_REQUEST
CODE_HOST_STATUS = ErrorCategory.CODE_HOST_STATUS
CODE_HOST_RESPONSE = ErrorCategory.CODE_HOST_RESPONSE
CODE_HOST_RATE_LIMITED = ErrorCategory.CODE_HOST_RATE_LIMITED
CODE_HOST_REJECTED = ErrorCategory.CODE_HOST_REJECTED
"""The host refused what was asked as asked (a base branch that does not exist, ...)."""
CODE_HOST_HEAD_MOVED = ErrorCategory.CODE_HOST_HEAD_MOVED
"""A merge named a head commit the branch has moved past (a push after the reading)."""
UNSUPPORTED_CODE_HOST = ErrorCategory.UNSUPPORTED_CODE_HOST


__all__ = [
    "CHECK_OUTPUT_CHARS",
    "CODE_HOST_HEAD_MOVED",
    "CODE_HOST_RATE_LIMITED",
    "CODE_HOST_REJECTED",
    "CODE_HOST_REQUEST",
    "CODE_HOST_RESPONSE",
    "CODE_HOST_STATUS",
    "UNSUPPORTED_CODE_HOST",
    "Check",
    "CheckState",
    "CodeHost",
    "CodeHostAdapter",
    "CodeHostError",
    "DiffSide",
    "LineComment",
    "Merged",
    "PostedReview",
    "Published",
    "PullRequest",
    "PullRequestDraft",
    "PullState",
    "PullStatus",
    "Review",
    "ReviewComment",
    "ReviewDecision",
    "ReviewDraft",
    "ReviewThread",
    "ReviewVerdict",
    "code_host_adapter",
    "publish_pull_request",
]


class CodeHostError(SymphonyError):
    """A code host request failed; `category` says how."""


@dataclass(frozen=True, slots=True)
class PullRequestDraft:
    """What publishing asks for: the branch's pull request, as it should read now."""

    branch: str
    title: str
    body: str
    base: str | None = None
    """None: the repository's default branch."""
    draft: bool = False
    labels: tuple[str, ...] = ()


class CodeHost(Protocol):
    async def default_branch(self) -> str: ...

    async def find_pull_request(self, branch: str) -> PullRequest | None:
        """The newest pull request from `branch` in any state, or None."""
        ...

    async def open_pull_request(self, draft: PullRequestDraft, base: str) -> PullRequest: ...

    async def update_pull_request(
        self, number: int, draft: PullRequestDraft, base: str
    ) -> PullRequest: ...

    async def read_status(self, number: int) -> PullStatus:
        """The pull request as following sees it. Conditional reads: an unchanged pull
        request costs the host's quota nothing."""
        ...

    async def merge(self, number: int, head_sha: str, method: MergeMethod) -> Merged:
        """Merge `number` if its head is still `head_sha` (a newer push is never merged
        unseen); `code_host_rejected` when the host refuses (not mergeable, head moved)."""
        ...

    async def reply_to_thread(self, number: int, thread_id: str, body: str) -> None: ...

    async def submit_review(self, number: int, review: ReviewDraft) -> PostedReview:
        """Post a person's review, written by the daemon's token and naming them in `body`:
        the note and every line comment at once (GitHub: one review with its comments;
        GitLab: a note and one diff discussion per comment; local: the pull request's file).
        Each comment opens a thread whose id it answers with, in order."""
        ...

    async def approvals_required(self, base: str) -> int | None:
        """How many approvals the rules of branch `base` require before a merge; None: not
        known before a pull request exists (each one's status then says), or not readable."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Published:
    """A published pull request, and whether publishing opened it or updated the open one."""

    pull_request: PullRequest
    opened: bool
    """False: the pull request existed and was updated."""


async def publish_pull_request(host: CodeHost, draft: PullRequestDraft) -> Published:
    """Open the branch's pull request, or bring the open one up to date (title, body, base).

    A merged pull request is not reopened: publishing a merged branch again is refused, since
    its work is on the base already. A closed one is left closed and a new one opened, as a
    person would after closing the first."""
    base = draft.base or await host.default_branch()
    existing = await host.find_pull_request(draft.branch)
    if existing is not None and existing.state is PullState.MERGED:
        raise CodeHostError(
            CODE_HOST_REJECTED,
            f"pull request #{existing.number} of {draft.branch} is merged already",
        )
    if existing is not None and existing.state is PullState.OPEN:
        updated = await host.update_pull_request(existing.number, draft, base)
        return Published(updated, opened=False)
    return Published(await host.open_pull_request(draft, base), opened=True)


@dataclass(frozen=True, slots=True)
class CodeHostAdapter:
    """What an adapter package declares as its `CODE_HOST`."""

    kind: str
    create: Callable[[RepositorySettings], CodeHost]
    webhook_events: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Which webhook deliveries are about pull requests: a header (lower case) and the event
    names it carries for them. Such a delivery makes the daemon read its pull requests now."""

    def about_pull_requests(self, headers: Mapping[str, str]) -> bool:
        return any(headers.get(name) in names for name, names in self.webhook_events.items())


def code_host_adapter(kind: str) -> CodeHostAdapter:
    """The adapter of `repository.kind`, or `unsupported_code_host`."""
    adapter = getattr(adapter_module(kind), "CODE_HOST", None)
    if not isinstance(adapter, CodeHostAdapter) or adapter.kind != kind:
        raise CodeHostError(UNSUPPORTED_CODE_HOST, f"repository.kind {kind!r} has no code host")
    return adapter


def create_code_host(repository: RepositorySettings) -> CodeHost:
    """The client of `repository`'s code host."""
    return code_host_adapter(repository.kind.value).create(repository)

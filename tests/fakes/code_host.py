"""A code host in memory: pull requests by branch as `publish_pull_request` finds, opens and
updates them, a status the test sets for each, and the merges and thread replies it was asked
for."""

from __future__ import annotations

import dataclasses
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from symphony.base.pulls import (
    CheckState,
    Merged,
    PullRequest,
    PullState,
    PullStatus,
    Review,
    ReviewComment,
    ReviewDecision,
    ReviewThread,
)
from symphony.codehost.contract import (
    CODE_HOST_REJECTED,
    CodeHostError,
    PostedReview,
    PullRequestDraft,
    ReviewDraft,
)
from symphony.config.repository import MergeMethod, RepositorySettings


@dataclass
class MemoryCodeHost:
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    bodies: dict[int, str] = field(default_factory=dict)
    statuses: dict[int, PullStatus] = field(default_factory=dict)
    """What `read_status` answers, by number (set by the test); default: open, nothing known.
    Its checks count for the head its pull request names; on a newer head they are pending."""
    merges: list[tuple[int, str, MergeMethod]] = field(default_factory=list)
    replies: list[tuple[int, str, str]] = field(default_factory=list)
    reviews: list[tuple[int, ReviewDraft]] = field(default_factory=list)
    """Reviews posted for a person, in order; each line comment is thread `t<n>`."""
    reads: int = 0
    remote: Path | None = None
    """A bare repository the daemon pushes to: a pull request's head is its branch there."""
    base_approvals: int | None = None
    """What the base branch's rules require (`approvals_required`)."""

    def __call__(self, repository: RepositorySettings) -> MemoryCodeHost:
        return self  # the orchestrator's code host factory

    def head_of(self, branch: str) -> str | None:
        if self.remote is None:
            return None
        found = subprocess.run(
            ["git", "-C", str(self.remote), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return found.stdout.strip() or None

    def set_state(self, number: int, state: PullState) -> None:
        self.pulls[number] = dataclasses.replace(self.pulls[number], state=state)

    async def default_branch(self) -> str:
        return "main"

    async def find_pull_request(self, branch: str) -> PullRequest | None:
        found = [p for p in self.pulls.values() if p.branch == branch]
        return max(found, key=lambda p: p.number) if found else None

    async def open_pull_request(self, draft: PullRequestDraft, base: str) -> PullRequest:
        number = 100 + len(self.pulls) + 1
        url = f"https://code.test/pull/{number}"
        pull = PullRequest(
            number, url, draft.branch, base, PullState.OPEN, draft.title,
            head_sha=self.head_of(draft.branch),
        )  # fmt: skip
        self.pulls[number], self.bodies[number] = pull, draft.body
        return pull

    async def update_pull_request(
        self, number: int, draft: PullRequestDraft, base: str
    ) -> PullRequest:
        self.pulls[number] = dataclasses.replace(
            self.pulls[number], title=draft.title, base=base, head_sha=self.head_of(draft.branch)
        )
        self.bodies[number] = draft.body
        return self.pulls[number]

    async def read_status(self, number: int) -> PullStatus:
        self.reads += 1
        pull = self.pulls[number]
        status = self.statuses.get(number) or PullStatus(pull, None, ReviewDecision.NONE)
        if status.pull.head_sha != pull.head_sha:
            # Set for an older head: on this one, the same checks have not finished yet.
            pending = tuple(dataclasses.replace(c, state=CheckState.PENDING, output=None)
                            for c in status.checks)  # fmt: skip
            status = dataclasses.replace(status, checks=pending)
        threads, reviews = self._posted(number)
        return dataclasses.replace(
            status, pull=pull, threads=(*status.threads, *threads),
            reviews=(*status.reviews, *reviews),
        )  # fmt: skip

    def _posted(self, number: int) -> tuple[list[ReviewThread], list[Review]]:
        """The threads and reviews posted here for a person, with the replies on them."""
        threads, reviews, made = [], [], 0
        for posted_on, review in self.reviews:
            ids = [f"t{made + n}" for n in range(1, len(review.comments) + 1)]
            made += len(review.comments)
            if posted_on != number:
                continue
            said_as = (
                "changes_requested" if review.verdict.value == "request_changes" else "commented"
            )
            reviews.append(Review("symphony", said_as, review.body))
            for thread_id, comment in zip(ids, review.comments, strict=True):
                said = [ReviewComment("symphony", comment.body)] + [
                    ReviewComment("symphony", body)
                    for on, replied, body in self.replies
                    if on == number and replied == thread_id
                ]
                threads.append(ReviewThread(thread_id, comment.path, comment.line, None,
                                            tuple(said)))  # fmt: skip
        return threads, reviews

    async def merge(self, number: int, head_sha: str, method: MergeMethod) -> Merged:
        if self.pulls[number].head_sha != head_sha:
            raise CodeHostError(CODE_HOST_REJECTED, "Head branch was modified")
        self.merges.append((number, head_sha, method))
        self.pulls[number] = dataclasses.replace(self.pulls[number], state=PullState.MERGED)
        return Merged("m" * 40)

    async def reply_to_thread(self, number: int, thread_id: str, body: str) -> None:
        self.replies.append((number, thread_id, body))

    async def submit_review(self, number: int, review: ReviewDraft) -> PostedReview:
        self.reviews.append((number, review))
        made = sum(len(r.comments) for _, r in self.reviews[:-1])
        return PostedReview(tuple(f"t{made + n}" for n in range(1, len(review.comments) + 1)))

    async def approvals_required(self, base: str) -> int | None:
        return self.base_approvals

    async def aclose(self) -> None:
        pass

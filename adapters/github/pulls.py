"""`GitHubPulls`: the code host of one GitHub repository, for the daemon's pull requests.

REST over the shared HTTP client (retries, rate limits, conditional GETs) with the daemon's own
token from `repository:`: `GET /repos/{slug}` for the default branch, `GET .../pulls?head=
<owner>:<branch>&state=all` to find the branch's pull request (newest first), `POST .../pulls`
to open one (labels then added through the issues API, a pull request being an issue there) and
`PATCH .../pulls/{n}` to bring its title, body and base up to date. A 422 (GitHub's answer to a
base that does not exist, or a pull request that exists already) is `code_host_rejected` with
GitHub's words; every other failure keeps the category of the client's error, renamed once here.

Following reads five conditional GETs (the pull request; its head commit's check runs and
combined status; its reviews and review comments), which cost no quota when GitHub answers 304.
When all five are unchanged since the last read of that pull request, that read's status is the
answer and nothing else is sent. Otherwise one GraphQL query adds what REST lacks (the review
decision, unresolved threads, which checks the base requires), each failed check's output is read
once per head commit (its annotations, or an Actions job's log), and the base branch's required
approvals once per base. The threads come from the first 100 and the checks' required flags from
the first 100 contexts of the head commit: enough for any pull request a person reviews.

A merge is a `PUT .../merge` naming the head commit, so a push GitHub has and we have not seen is
refused (409) rather than merged. It is never sent twice: after an answer that leaves open whether
it happened (a timeout, a 5xx), the pull request is read back and says.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from symphony.codehost.contract import (
    CODE_HOST_HEAD_MOVED,
    CODE_HOST_REJECTED,
    CODE_HOST_RESPONSE,
    Check,
    CheckState,
    CodeHostError,
    Merged,
    PostedReview,
    PullRequest,
    PullRequestDraft,
    PullState,
    PullStatus,
    ReviewDraft,
)
from symphony.config.repository import MergeMethod, RepositorySettings
from symphony.tracker.contract import (
    TRACKER_REQUEST,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    TrackerError,
)

from .._support.graphql import graphql
from .._support.http import Response, next_link
from .._support.normalize import as_int, text_or_none
from . import pull_status, queries, review_posting
from .config import graphql_url_for
from .project import is_rate_limited
from .tracker import github_client

_MAX_BODY_CHARS = 65_536  # GitHub's limit on a pull request body
_PER_PAGE = 100
_PAGE_LIMIT = 10
_ANNOTATIONS = 50  # GitHub's most per page
_MERGE_REFUSALS = (405, 422)
"""Not mergeable (conflicts, rules not met), or a merge method the repository bans."""
_HEAD_MOVED = 409
"""The merge named a head commit the branch has moved past."""
_STATUS_IN_MESSAGE = re.compile(r"GitHub [^:]*?\b([1-5]\d\d)\b")


@dataclass(frozen=True, slots=True)
class _Listed:
    """Every item of a paged REST list, and whether no page changed since the last read."""

    items: list[Any]
    unchanged: bool
    """Every page answered 304: the same as at the previous read."""


class GitHubPulls:
    def __init__(
        self,
        repository: RepositorySettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.repository = repository
        self.http = github_client(
            repository.api_url, repository.token, transport=transport, sleep=sleep
        )
        self._repo = f"/repos/{repository.slug}"
        self._owner, _, self._name = repository.slug.partition("/")
        self._graphql_url = graphql_url_for(repository.api_url)
        self._statuses: dict[int, PullStatus] = {}
        """The last whole status of each pull request, answered again while nothing changed."""
        self._outputs: dict[int, dict[tuple[int, str], str]] = {}
        """Each pull request's failed check runs' outputs by (check run id, head sha); only the
        current read's are kept."""
        self._approvals: dict[str, int | None] = {}
        """Required approvals by base branch; None: not readable with this token."""

    async def default_branch(self) -> str:
        with _as_code_host_error():
            answer = await self.http.request("GET", self._repo, conditional=True)
        branch = answer.body.get("default_branch") if isinstance(answer.body, Mapping) else None
        if not isinstance(branch, str) or not branch:
            raise CodeHostError(
                CODE_HOST_RESPONSE, f"GitHub named no default branch of {self._repo}"
            )
        return branch

    async def find_pull_request(self, branch: str) -> PullRequest | None:
        params = {
            "head": f"{self._owner}:{branch}",
            "state": "all",
            "sort": "created",
            "direction": "desc",
            "per_page": 10,
        }
        with _as_code_host_error():
            answer = await self.http.request(
                "GET", f"{self._repo}/pulls", params=params, conditional=True
            )
        if not isinstance(answer.body, list):
            raise CodeHostError(CODE_HOST_RESPONSE, "GitHub's pull request list is not a list")
        found = [_pull(item) for item in answer.body]
        return max(found, key=lambda pull: pull.number) if found else None

    async def open_pull_request(self, draft: PullRequestDraft, base: str) -> PullRequest:
        body = {
            "title": draft.title,
            "head": draft.branch,
            "base": base,
            "body": draft.body[:_MAX_BODY_CHARS],
            "draft": draft.draft,
        }
        with _as_code_host_error():
            answer = await self.http.request(
                "POST", f"{self._repo}/pulls", json_body=body, ok=(201,)
            )
        pull = _pull(answer.body)
        if draft.labels:
            with _as_code_host_error():
                await self.http.request(
                    "POST",
                    f"{self._repo}/issues/{pull.number}/labels",
                    json_body={"labels": list(draft.labels)},
                    ok=(200,),
                    idempotent=True,  # adding labels twice adds them once
                )
        return pull

    async def update_pull_request(
        self, number: int, draft: PullRequestDraft, base: str
    ) -> PullRequest:
        body = {"title": draft.title, "body": draft.body[:_MAX_BODY_CHARS], "base": base}
        with _as_code_host_error():
            answer = await self.http.request(
                "PATCH", f"{self._repo}/pulls/{number}", json_body=body, ok=(200,)
            )
        return _pull(answer.body)

    async def read_status(self, number: int) -> PullStatus:
        with _as_code_host_error():
            read = await self.http.request("GET", f"{self._repo}/pulls/{number}", conditional=True)
            pull = _pull(read.body)
            sha = pull.head_sha
            if sha is None:
                raise CodeHostError(
                    CODE_HOST_RESPONSE, f"GitHub's pull request #{number} names no head commit"
                )
            runs = await self._list(f"{self._repo}/commits/{sha}/check-runs", "check_runs")
            statuses = await self._list(f"{self._repo}/commits/{sha}/status", "statuses")
            reviews = await self._list(f"{self._repo}/pulls/{number}/reviews")
            comments = await self._list(f"{self._repo}/pulls/{number}/comments")
        previous = self._statuses.get(number)
        lists = (runs, statuses, reviews, comments)
        if previous is not None and read.from_cache and all(each.unchanged for each in lists):
            return previous
        with _as_code_host_error():
            data = await self._graphql(
                queries.PULL_FOLLOW, {"owner": self._owner, "name": self._name, "number": number}
            )
            follow = pull_status.follow_pull(data)
            checks, outputs_whole = await self._checks(
                number, sha, runs.items, statuses.items, pull_status.required_checks(follow)
            )
            approvals, approvals_whole = await self._approvals_required(pull.base)
        record: Mapping[str, Any] = read.body
        status = PullStatus(
            pull=pull,
            mergeable=pull_status.mergeable(record.get("mergeable"), follow),
            review_decision=pull_status.review_decision(follow),
            checks=checks,
            threads=pull_status.threads(follow, comments.items),
            reviews=pull_status.reviews(reviews.items),
            labels=pull_status.labels(record),
            approvals_required=approvals,
            merge_allowed=pull_status.merge_allowed(record.get("mergeable_state")),
            merge_state=text_or_none(record.get("mergeable_state")),
        )
        # A status missing a part that failed for now is not kept: the next read tries again.
        if outputs_whole and approvals_whole:
            self._statuses[number] = status
        else:
            self._statuses.pop(number, None)
        return status

    async def merge(self, number: int, head_sha: str, method: MergeMethod) -> Merged:
        try:
            answer = await self.http.request(
                "PUT",
                f"{self._repo}/pulls/{number}/merge",
                json_body={"sha": head_sha, "merge_method": method.value},
                ok=(200,),
                idempotent=False,
            )
        except TrackerError as exc:
            if _ambiguous(exc):
                merged = await self._merged_already(number)
                if merged is not None:
                    return merged
            if _status_of(exc) == _HEAD_MOVED:
                raise CodeHostError(CODE_HOST_HEAD_MOVED, exc.message) from None
            raise _code_host_error(exc, _MERGE_REFUSALS) from None
        result = answer.body if isinstance(answer.body, Mapping) else {}
        if result.get("merged") is not True:
            said = text_or_none(result.get("message")) or "no reason given"
            raise CodeHostError(CODE_HOST_REJECTED, f"GitHub did not merge #{number}: {said}")
        return Merged(text_or_none(result.get("sha")))

    async def reply_to_thread(self, number: int, thread_id: str, body: str) -> None:
        if thread_id.isdigit():  # a review comment's REST id (a review the daemon posted)
            with _as_code_host_error():
                await self.http.request(
                    "POST",
                    f"{self._repo}/pulls/{number}/comments/{thread_id}/replies",
                    json_body={"body": body[:_MAX_BODY_CHARS]},
                    ok=(201,),
                    idempotent=False,
                )
            return
        with _as_code_host_error():
            data = await self._graphql(
                queries.REPLY_TO_THREAD, {"threadId": thread_id, "body": body[:_MAX_BODY_CHARS]}
            )
        payload = data.get("addPullRequestReviewThreadReply")
        if not isinstance(payload, Mapping) or not isinstance(payload.get("comment"), Mapping):
            raise CodeHostError(
                CODE_HOST_RESPONSE, f"GitHub added no reply to thread {thread_id} of #{number}"
            )

    async def submit_review(self, number: int, review: ReviewDraft) -> PostedReview:
        """One review with every line comment. GitHub refuses a verdict on one's own pull
        request (422): the daemon's token opened it, so the review is then sent as a comment
        review, the note still saying who asked for changes."""
        url = f"{self._repo}/pulls/{number}/reviews"
        event = review_posting.EVENTS[review.verdict]
        try:
            answer = await self._post_review(url, review, event)
        except CodeHostError as exc:
            if exc.category != CODE_HOST_REJECTED or event == "COMMENT":
                raise
            answer = await self._post_review(url, review, "COMMENT")
        if not review.comments:
            return PostedReview(())
        posted = review_posting.review_id(answer)
        with _as_code_host_error():
            listed = await self._list(f"{url}/{posted}/comments")
        return PostedReview(review_posting.thread_ids(review.comments, listed.items))

    async def _post_review(self, url: str, review: ReviewDraft, event: str) -> Any:
        with _as_code_host_error():
            answer = await self.http.request(
                "POST", url, json_body=review_posting.review_request(review, event),
                ok=(200,), idempotent=False,
            )  # fmt: skip
        return answer.body

    async def approvals_required(self, base: str) -> int | None:
        with _as_code_host_error():
            count, _ = await self._approvals_required(base)
        return count

    async def aclose(self) -> None:
        await self.http.aclose()

    # Reading

    async def _graphql(self, document: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        return await graphql(
            self.http,
            document,
            variables,
            path=self._graphql_url,
            is_rate_limited=is_rate_limited,
        )

    async def _list(self, url: str, key: str | None = None) -> _Listed:
        """Every page of a REST list (the items under `key` of an object answer), each read
        conditionally."""
        items: list[Any] = []
        unchanged = True
        params: Mapping[str, Any] | None = {"per_page": _PER_PAGE}
        for _ in range(_PAGE_LIMIT):
            answer = await self.http.request("GET", url, params=params, conditional=True)
            body = answer.body
            page = body.get(key) if key is not None and isinstance(body, Mapping) else body
            if not isinstance(page, list):
                raise CodeHostError(CODE_HOST_RESPONSE, f"GitHub's {url} holds no list")
            items.extend(page)
            unchanged = unchanged and answer.from_cache
            link = next_link(answer.headers)
            if link is None:
                break
            url, params = link, None
        return _Listed(items, unchanged)

    async def _checks(
        self,
        number: int,
        sha: str,
        runs: list[Any],
        statuses: list[Any],
        required: frozenset[str],
    ) -> tuple[tuple[Check, ...], bool]:
        """The head commit's checks, a failed check run with its output (read once per run and
        head), and whether every output could be read."""
        known = self._outputs.get(number, {})
        kept: dict[tuple[int, str], str] = {}
        whole = True
        checks: list[Check] = []
        for run in runs:
            if not isinstance(run, Mapping):
                continue
            run_id = as_int(run.get("id"))
            output = None
            if run_id is not None and pull_status.run_state(run) is CheckState.FAILED:
                output = known.get((run_id, sha))
                read_whole = True
                if output is None:
                    output, read_whole = await self._run_output(run_id, run)
                if read_whole:
                    kept[(run_id, sha)] = output
                whole = whole and read_whole
            checks.append(pull_status.check_run(run, required, output))
        checks.extend(
            pull_status.commit_status(status, required)
            for status in statuses
            if isinstance(status, Mapping)
        )
        self._outputs[number] = kept
        return tuple(checks), whole

    async def _run_output(self, run_id: int, run: Mapping[str, Any]) -> tuple[str, bool]:
        """What a failed check run said: its own output and annotations, then the end of its
        Actions job's log (GitHub answers with a redirect to the log's download)."""
        described = pull_status.run_description(run)
        whole = True
        if pull_status.annotations_of(run):
            answer, read_whole = await self._optional(
                f"{self._repo}/check-runs/{run_id}/annotations", {"per_page": _ANNOTATIONS}
            )
            whole = whole and read_whole
            if answer is not None and isinstance(answer.body, list):
                lines = pull_status.annotation_lines(answer.body)
                described = f"{described}\n\n{lines}" if described else lines
        log = ""
        job = pull_status.actions_job(run)
        if job is not None:
            answer, read_whole = await self._optional(
                f"{self._repo}/actions/jobs/{job}/logs", text=True
            )
            whole = whole and read_whole
            if answer is not None and isinstance(answer.body, str):
                log = answer.body
        return pull_status.bounded(described, log), whole

    async def _approvals_required(self, base: str) -> tuple[int | None, bool]:
        """From the base branch's protection: a protected branch without a review rule needs
        none, one this token may not read (403/404, also an unprotected one) is unknown."""
        if base in self._approvals:
            return self._approvals[base], True
        answer, whole = await self._optional(
            f"{self._repo}/branches/{quote(base, safe='')}/protection"
        )
        count = None
        if answer is not None and isinstance(answer.body, Mapping):
            rule = answer.body.get("required_pull_request_reviews")
            count = (
                as_int(rule.get("required_approving_review_count"))
                if isinstance(rule, Mapping)
                else 0
            )
        if whole:
            self._approvals[base] = count
        return count, whole

    async def _optional(
        self, url: str, params: Mapping[str, Any] | None = None, *, text: bool = False
    ) -> tuple[Response | None, bool]:
        """A GET that may fail without failing the read: (answer or None, whether the answer is
        final). A 4xx is final (not there, or not ours to see); an outage is not."""
        try:
            return await self.http.request("GET", url, params=params, ok=(200,), text=text), True
        except TrackerError as exc:
            status = _status_of(exc)
            if exc.category == TRACKER_STATUS and status is not None and status < 500:
                return None, True
            if exc.category in (TRACKER_STATUS, TRACKER_REQUEST, TRACKER_RESPONSE):
                return None, False
            raise

    async def _merged_already(self, number: int) -> Merged | None:
        """The merge commit, when the pull request read back now is merged."""
        try:
            answer = await self.http.request("GET", f"{self._repo}/pulls/{number}")
        except TrackerError:
            return None
        record = answer.body
        if not isinstance(record, Mapping) or not record.get("merged_at"):
            return None
        return Merged(text_or_none(record.get("merge_commit_sha")))


def _pull(item: Any) -> PullRequest:
    """A pull request from GitHub's `pull-request` / `pull-request-simple` record."""
    if not isinstance(item, Mapping):
        raise CodeHostError(CODE_HOST_RESPONSE, "GitHub's pull request record is not an object")
    number = as_int(item.get("number"))
    head, base = item.get("head"), item.get("base")
    if number is None or not isinstance(head, Mapping) or not isinstance(base, Mapping):
        raise CodeHostError(CODE_HOST_RESPONSE, "GitHub's pull request has no number, head or base")
    if item.get("merged_at"):
        state = PullState.MERGED
    else:
        state = PullState.OPEN if item.get("state") == "open" else PullState.CLOSED
    return PullRequest(
        number=number,
        url=text_or_none(item.get("html_url")) or "",
        branch=text_or_none(head.get("ref")) or "",
        base=text_or_none(base.get("ref")) or "",
        state=state,
        title=text_or_none(item.get("title")) or "",
        draft=item.get("draft") is True,
        head_sha=text_or_none(head.get("sha")),
    )


def _status_of(exc: TrackerError) -> int | None:
    """The HTTP status a client error names (`GitHub answered 502: ...`, `... (404): ...`)."""
    if exc.category != TRACKER_STATUS:
        return None
    found = _STATUS_IN_MESSAGE.match(exc.message)
    return int(found.group(1)) if found else None


def _ambiguous(exc: TrackerError) -> bool:
    """Whether a failed write may have been applied all the same: it timed out after being
    sent, or GitHub failed while handling it."""
    status = _status_of(exc)
    return exc.category == TRACKER_REQUEST or (status is not None and status >= 500)


def _code_host_error(exc: TrackerError, rejected: tuple[int, ...] = (422,)) -> CodeHostError:
    """The HTTP client's error as the code host's: `tracker_status` -> `code_host_status`, a
    refusal (by default a 422) -> `code_host_rejected`, in GitHub's words."""
    if _status_of(exc) in rejected:
        return CodeHostError(CODE_HOST_REJECTED, exc.message)
    return CodeHostError(exc.category.replace("tracker_", "code_host_", 1), exc.message)


@contextmanager
def _as_code_host_error() -> Iterator[None]:
    try:
        yield
    except TrackerError as exc:
        raise _code_host_error(exc) from None

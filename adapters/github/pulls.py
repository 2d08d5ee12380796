"""`GitHubPulls`: the code host of one GitHub repository, for the daemon's pull requests.

REST over the shared HTTP client (retries, rate limits, conditional GETs) with the daemon's own
token from `repository:`: `GET /repos/{slug}` for the default branch, `GET .../pulls?head=
<owner>:<branch>&state=all` to find the branch's pull request (newest first), `POST .../pulls`
to open one (labels then added through the issues API, a pull request being an issue there) and
`PATCH .../pulls/{n}` to bring its title, body and base up to date. A 422 (GitHub's answer to a
base that does not exist, or a pull request that exists already) is `code_host_rejected` with
GitHub's words; every other failure keeps the category of the client's error, renamed once here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from symphony.codehost.contract import (
    CODE_HOST_REJECTED,
    CODE_HOST_RESPONSE,
    CodeHostError,
    PullRequest,
    PullRequestDraft,
    PullState,
)
from symphony.config.repository import RepositorySettings
from symphony.tracker.contract import TrackerError

from .._support.normalize import as_int, text_or_none
from .tracker import github_client

_MAX_BODY_CHARS = 65_536  # GitHub's limit on a pull request body


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
        self._owner = repository.slug.split("/", 1)[0]

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

    async def aclose(self) -> None:
        await self.http.aclose()


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


@contextmanager
def _as_code_host_error() -> Iterator[None]:
    """The HTTP client's errors as the code host's: `tracker_status` -> `code_host_status`,
    a 422 -> `code_host_rejected`."""
    try:
        yield
    except TrackerError as exc:
        if exc.message.startswith("GitHub answered 422"):
            raise CodeHostError(CODE_HOST_REJECTED, exc.message) from None
        category = exc.category.replace("tracker_", "code_host_", 1)
        raise CodeHostError(category, exc.message) from None

"""The REST writes both scopes share: an issue's comments (post, edit, list), the comment that
links a pull request, opening an issue, and blockers (resolving `owner/name#n` references,
recording them with GitHub's issue dependencies API).

Everything goes through the tracker's one HTTP client, so writes share its retries, rate-limit
block and quota counters. A write GitHub cannot do as asked (a blocker that does not exist, a
comment of another issue, a state that cannot be a label) is `Rejected`: a `tracker_rejected`
TrackerError that also carries the failure code an agent tool reports for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from symphony.base.tools import ToolResult, is_inline
from symphony.tracker import tools as generic
from symphony.tracker.contract import TRACKER_RESPONSE, Comment, TrackerError
from symphony.tracker.tools import MoveIssue

from .._support.errors import Rejected as Rejected
from .._support.http import HttpClient, get_pages
from .._support.normalize import as_int
from . import tools
from .normalize import (
    Malformed,
    comment_of,
    identifier,
    issue_of_comment,
    parse_reference,
    repository_of,
    required,
)

log = structlog.get_logger(__name__)

PER_PAGE = 100
MAX_COMMENT_PAGES = 100
"""10,000 comments: far beyond what GitHub shows on one issue."""
MAX_TITLE_CHARS = 256  # GitHub refuses longer issue titles


def checked_state(state: str) -> str:
    """`state` trimmed, or `Rejected` when the move tool would refuse it too."""
    call = tools.parse_call(tools.MOVE_ISSUE, {"state": state}, "")
    if isinstance(call, ToolResult):
        raise Rejected(f"cannot use the state {state!r}: {call.output['message']}")
    assert isinstance(call, MoveIssue)
    return call.state


def checked_body(body: str) -> str:
    """A comment body the comment tool would accept, or `Rejected`."""
    call = tools.parse_call(tools.ADD_COMMENT, {"body": body}, "")
    if isinstance(call, ToolResult):
        raise Rejected(f"cannot post that comment: {call.output['message']}")
    return body


def checked_title(title: str) -> str:
    text = title.strip()
    if not text or len(text) > MAX_TITLE_CHARS or not is_inline(text):
        raise Rejected(
            f"a new issue needs a one-line title of at most {MAX_TITLE_CHARS} characters"
        )
    return text


# Comments


async def post_comment(
    http: HttpClient, repository: str, number: int, body: str, *, issue_identifier: str
) -> dict[str, Any]:
    """`POST …/issues/{n}/comments`; the answer as GitHub gave it ({} when not an object)."""
    response = await http.request(
        "POST", f"/repos/{repository}/issues/{number}/comments", json_body={"body": body}
    )
    log.info("issue commented", issue_identifier=issue_identifier)
    return response.body if isinstance(response.body, dict) else {}


def comment_from(answer: Any, what: str) -> Comment:
    try:
        return comment_of(answer)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitHub {what}: {exc}") from None


async def list_comments(http: HttpClient, repository: str, number: int) -> list[Comment]:
    """Every comment of the issue, oldest first (GitHub numbers comments as it stores them)."""
    entries = await get_pages(
        http,
        f"/repos/{repository}/issues/{number}/comments",
        {"per_page": PER_PAGE},
        MAX_COMMENT_PAGES,
    )
    found: dict[str, Comment] = {}
    for entry in entries:
        try:
            comment = comment_of(entry)
        except Malformed:
            continue  # best effort, as for blockers: an entry without an id cannot be named
        # A comment posted while the pages are read shifts the next page: keep the first copy.
        found.setdefault(comment.id, comment)
    return sorted(found.values(), key=lambda c: int(c.id))


async def edit_comment(
    http: HttpClient, repository: str, number: int, comment_id: str, body: str
) -> Comment:
    """Replace the body of a comment of this issue; no write when it already says `body`.

    Comment ids are repository-wide, so the comment is read first and must belong to the issue.
    """
    name = identifier(repository, number)
    if not comment_id.isdigit():
        raise Rejected(f"{comment_id!r} is not a GitHub comment id")
    path = f"/repos/{repository}/issues/comments/{int(comment_id)}"
    current = await http.request("GET", path, conditional=True, ok=(200, 404))
    if current.status == 404:
        raise Rejected(f"comment {comment_id} does not exist (any more) in {repository}")
    owner = issue_of_comment(current.body) if isinstance(current.body, Mapping) else None
    if owner is None or owner[0].lower() != repository.lower() or owner[1] != number:
        raise Rejected(f"comment {comment_id} is not a comment of {name}")
    existing = comment_from(current.body, f"comment {comment_id}")
    if existing.body == body:
        return existing
    answer = await http.request("PATCH", path, json_body={"body": body})
    log.info("comment edited", issue_identifier=name, comment_id=comment_id)
    return comment_from(answer.body, f"edited comment {comment_id}")


# Pull request links

LINK_PREFIX = "Linked pull request: "


@dataclass(frozen=True, slots=True)
class Linked:
    """The comment that names a pull request on an issue; `added` when this call posted it."""

    comment_id: int | None
    comment_url: str | None
    added: bool


def checked_link(url: str) -> str:
    """`url` trimmed when it is an http(s) URL, or `Rejected`."""
    call = generic.http_link({"url": url.strip()})
    if isinstance(call, ToolResult):
        raise Rejected(f"cannot link {url!r}: {call.output['message']}")
    return call.url


async def link_pull_request(
    http: HttpClient, repository: str, number: int, url: str, *, issue_url: str | None
) -> Linked:
    """Name the pull request at `url` on the issue, once.

    GitHub has no API that links an existing pull request to an issue: a closing reference
    (`Closes #n`) in the pull request's body is what links it, and the daemon writes one only
    when the tracker is the pull request's repository; an agent's pull request may have none.
    So the link is the comment `Linked pull request: <url>`, which holds whatever repository
    the pull request is in, and which GitHub renders as a reference showing the pull request's
    own title (so no text of ours is added). A comment whose first line is already that (posted
    by the link tool or an earlier call) is found first: linking the same URL again posts
    nothing.
    """
    line = LINK_PREFIX + url
    name = identifier(repository, number)
    for comment in await list_comments(http, repository, number):
        if comment.body.strip().split("\n", 1)[0].strip() == line:
            found = int(comment.id)
            return Linked(found, f"{issue_url}#issuecomment-{found}" if issue_url else None, False)
    answer = await post_comment(http, repository, number, line, issue_identifier=name)
    url_of = answer.get("html_url")
    return Linked(as_int(answer.get("id")), url_of if isinstance(url_of, str) else None, added=True)


# Issues and blockers


@dataclass(frozen=True, slots=True)
class Blocker:
    """An issue named as a blocker: its current name, and the REST id dependencies take."""

    identifier: str
    database_id: int
    """The REST `id`, which the dependencies API takes (not the number, not the node id)."""


async def resolve_blockers(
    http: HttpClient, references: Sequence[str], repository: str
) -> list[Blocker]:
    """Each referenced issue (`owner/name#n`, or `#n` in `repository`), read to learn its id;
    `Rejected` for a reference that is malformed, missing, or a pull request."""
    found: dict[str, Blocker] = {}
    for text in references:
        parsed = parse_reference(text, repository)
        if parsed is None:
            raise Rejected(f"blocker {text!r} is not a GitHub issue reference (owner/name#number)")
        name = identifier(*parsed)
        if name.lower() in found:
            continue
        response = await http.request(
            "GET", f"/repos/{parsed[0]}/issues/{parsed[1]}", conditional=True, ok=(200, 404, 410)
        )
        if response.status != 200:
            raise Rejected(f"blocker {name} does not exist or is not visible to the token")
        item = response.body
        try:
            number, _, _ = required(item)
        except Malformed as exc:
            raise TrackerError(TRACKER_RESPONSE, f"GitHub blocker {name}: {exc}") from None
        if "pull_request" in item:
            raise Rejected(f"blocker {name} is a pull request; only issues can block")
        database_id = as_int(item.get("id"))
        if database_id is None:
            raise TrackerError(TRACKER_RESPONSE, f"GitHub blocker {name} has no id")
        # A transferred issue answers from its new repository: name it as GitHub does now.
        found[name.lower()] = Blocker(
            identifier(repository_of(item) or parsed[0], number), database_id
        )
    return list(found.values())


async def open_issue(
    http: HttpClient, repository: str, title: str, body: str, labels: Sequence[str]
) -> dict[str, Any]:
    """`POST /repos/{o}/{r}/issues`; the created issue as GitHub answered it."""
    payload: dict[str, Any] = {"title": title, "body": body}
    if labels:
        payload["labels"] = list(labels)
    response = await http.request("POST", f"/repos/{repository}/issues", json_body=payload)
    try:
        required(response.body)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitHub new issue in {repository}: {exc}") from None
    created: dict[str, Any] = response.body
    return created


async def record_blockers(
    http: HttpClient, repository: str, number: int, blockers: Sequence[Blocker]
) -> None:
    for blocker in blockers:
        await http.request(
            "POST",
            f"/repos/{repository}/issues/{number}/dependencies/blocked_by",
            json_body={"issue_id": blocker.database_id},
        )


@contextmanager
def after_creation(name: str) -> Iterator[None]:
    """Failures once the issue exists keep their category and say that it does, so nobody
    creates it a second time."""
    try:
        yield
    except TrackerError as exc:
        raise TrackerError(
            exc.category,
            f"GitHub created {name}, then: {exc.message}",
            retry_after_s=exc.retry_after_s,
        ) from None

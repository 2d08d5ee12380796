"""The write side of one Kaiten board: moving a card to the column of a state, a card's comments
(post, edit, list), its external links, creating a card with its blockers, and running the agent
tools, whose move, comment and link are the same code as the daemon's `move_issue`,
`add_comment` and `link_pull_request`.

Every write goes through the `Board` of `adapters.kaiten.reads`, so it uses the tracker's one
HTTP client (its rate limiter and 429 block) and the board's cached layout. A write the board
cannot take (an unknown state or blocker, a card outside the board, a card or comment Kaiten no
longer has) is a `tracker_rejected` TrackerError for the daemon; an agent tool reports an
unknown state as `unknown_state` and a vanished card (`Gone`) as the status it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from symphony.base.issue import Issue
from symphony.base.tools import ToolResult
from symphony.tracker.contract import (
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    Comment,
    NewTicket,
    TrackerError,
)
from symphony.tracker.tools import AddComment, AddLink, MoveIssue

from .._support.http import Response
from .._support.normalize import as_int
from . import tools
from .columns import Column, Layout
from .config import KaitenConfig
from .normalize import card_number, comment_from, identifier
from .reads import Board, Known

log = structlog.get_logger(__name__)

MAX_TITLE_CHARS = 1_024
MAX_DESCRIPTION_CHARS = 32_768
"""Kaiten's limits on a new card's `title` and `description`."""

_NO_TIME = datetime.min.replace(tzinfo=UTC)


class UnknownState(TrackerError):
    """No column of the board carries the state: the move tool reports it as `unknown_state`."""

    def __init__(self, message: str) -> None:
        super().__init__(TRACKER_REJECTED, message)


class Gone(TrackerError):
    """Kaiten answered 404 for a card (or its comment): deleted, or invisible to the token.
    Agent tools report it as the status it is; the daemon's writes as `tracker_rejected`."""

    def __init__(self, message: str) -> None:
        super().__init__(TRACKER_STATUS, message)


def target_card(config: KaitenConfig, issue: Issue) -> int | None:
    """The session's own card id, checked against the configured board."""
    ref = issue.native_ref or {}
    card_id = as_int(ref.get("card_id"))
    if card_id is None or card_id < 1 or issue.id != str(card_id):
        return None
    if as_int(ref.get("board_id")) != config.board_id:
        return None
    return card_id


# The daemon's writes


async def move_issue(board: Board, issue: Issue, state: str) -> None:
    card_id = _own_card(board.config, issue)
    with _gone_is_rejected():
        await _move_card(board, card_id, state, issue)


async def add_comment(board: Board, issue: Issue, body: str) -> Comment:
    card_id = _own_card(board.config, issue)
    _check_comment(body)
    with _gone_is_rejected():
        answer = await _post_comment(board, card_id, body, issue)
    return _answered_comment(answer, f"the new comment on {issue.identifier}")


async def edit_comment(board: Board, issue: Issue, comment_id: str, body: str) -> Comment:
    card_id = _own_card(board.config, issue)
    if not comment_id.isascii() or not comment_id.isdigit():
        raise TrackerError(TRACKER_REJECTED, f"{comment_id!r} is not a Kaiten comment id")
    _check_comment(body)
    with _gone_is_rejected():
        response = await _card_request(
            board,
            "PATCH",
            f"/cards/{card_id}/comments/{int(comment_id)}",
            f"comment {comment_id} of Kaiten card {card_id}",
            json_body={"text": body},
        )
    log.info("card comment edited", issue_identifier=issue.identifier, comment_id=comment_id)
    return _answered_comment(response.body, f"comment {comment_id} of {issue.identifier}")


async def list_comments(board: Board, issue: Issue) -> list[Comment]:
    card_id = _own_card(board.config, issue)
    # Kaiten answers every comment of the card at once: the operation takes no paging.
    with _gone_is_rejected():
        response = await _card_request(
            board, "GET", f"/cards/{card_id}/comments", f"Kaiten card {card_id}"
        )
    if not isinstance(response.body, list):
        raise TrackerError(TRACKER_RESPONSE, f"Kaiten comments of card {card_id}: not a list")
    comments = [c for c in map(comment_from, response.body) if c is not None]
    # Oldest first whatever order Kaiten lists them in. Ids grow with time: they break ties
    # and order the comments without a usable timestamp, which come first.
    return sorted(comments, key=lambda c: (c.created_at or _NO_TIME, int(c.id)))


async def create_card(board: Board, ticket: NewTicket) -> Issue:
    """One `POST /cards` in the state's column, one `POST /cards/{id}/blockers` per blocker
    (each checked to exist beforehand), and the new card read back; no read of the tracker's
    runs in between (`board.gate`), so none sees the card before its blockers."""
    async with board.gate.creating():
        return await _create_card(board, ticket)


async def _create_card(board: Board, ticket: NewTicket) -> Issue:
    config = board.config
    title = ticket.title.strip()
    if not title or len(title) > MAX_TITLE_CHARS:
        raise TrackerError(
            TRACKER_REJECTED, f"a Kaiten card needs a title of 1-{MAX_TITLE_CHARS} characters"
        )
    description = ticket.description.strip()
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise TrackerError(
            TRACKER_REJECTED,
            f"a Kaiten card description holds at most {MAX_DESCRIPTION_CHARS} characters",
        )
    lane_id = config.lane_id
    if ticket.parent is not None:
        parent = ticket.parent
        if target_card(config, parent) is None:
            raise TrackerError(
                TRACKER_REJECTED,
                f"parent {parent.identifier} is not a card of {config.scope}",
            )
        if lane_id is None:
            lane_id = as_int((parent.native_ref or {}).get("lane_id"))
    numbers: dict[int, str] = {}
    for name in ticket.blocked_by:
        number = card_number(name)
        if number is None:
            raise TrackerError(
                TRACKER_REJECTED, f"blocker {name!r} is not a Kaiten card (KT-<number>)"
            )
        numbers.setdefault(number, name)
    board.new_operation()
    layout = await board.fresh_layout()
    target = await _column_for(board, layout, ticket.state)
    # Every blocker must exist before anything is created; their cards seed the read-back.
    known: Known = {}
    for number, name in numbers.items():
        card = await board.card(number)
        if card is None:
            raise TrackerError(TRACKER_REJECTED, f"blocker {name!r} does not exist in Kaiten")
        known[number] = await board.known_entry(card)
    payload: dict[str, Any] = {
        "title": title,
        "board_id": config.board_id,
        "column_id": target.id,
    }
    if lane_id is not None:
        payload["lane_id"] = lane_id
    if description:
        payload["description"] = description
    response = await board.http.request("POST", "/cards", json_body=payload)
    created = response.body
    card_id = as_int(created.get("id")) if isinstance(created, Mapping) else None
    if card_id is None:
        raise TrackerError(TRACKER_RESPONSE, "Kaiten answered a new card without its id")
    for number in numbers:
        try:
            await board.http.request(
                "POST", f"/cards/{card_id}/blockers", json_body={"blocker_card_id": number}
            )
        except TrackerError as exc:
            raise TrackerError(
                exc.category,
                f"Kaiten card {identifier(card_id)} was created, but its blocker "
                f"{identifier(number)} was not recorded: {exc.message}",
                retry_after_s=exc.retry_after_s,
            ) from None
    log.info(
        "card created",
        issue_identifier=identifier(card_id),
        state=layout.state_of(target.id, board.named) or target.title,
        blocked_by=[identifier(n) for n in numbers] or None,
    )
    issues = await board.by_ids([str(card_id)], known)
    if not issues:
        raise TrackerError(
            TRACKER_RESPONSE,
            f"Kaiten card {identifier(card_id)} was created but cannot be read back in "
            f"{config.scope}",
        )
    return issues[0]


async def link_pull_request(board: Board, issue: Issue, url: str, title: str) -> None:
    """An external link on the card, as `kaiten_add_link` adds it, with `title` as its text."""
    card_id = _own_card(board.config, issue)
    call = tools.parse_call(tools.ADD_LINK, {"url": url, "description": _link_text(title)})
    if isinstance(call, ToolResult):
        raise TrackerError(TRACKER_REJECTED, f"cannot link {url!r}: {call.output['message']}")
    assert isinstance(call, AddLink)
    with _gone_is_rejected():
        await _add_link(board, card_id, call, issue)


# The agent tools


async def run_tool(board: Board, call: tools.ToolCall, card_id: int, issue: Issue) -> ToolResult:
    """A parsed tool call on the session's own card."""
    if isinstance(call, MoveIssue):
        try:
            state, column_id = await _move_card(board, card_id, call.state, issue)
        except UnknownState as unknown:
            return ToolResult.failure(tools.UNKNOWN_STATE, unknown.message)
        return ToolResult(
            True, {"identifier": issue.identifier, "state": state, "column_id": column_id}
        )
    if isinstance(call, AddComment):
        answer = await _post_comment(board, card_id, call.body, issue)
        return ToolResult(
            True,
            {"identifier": issue.identifier, "commented": True, "comment_id": answer.get("id")},
        )
    link_id, added = await _add_link(board, card_id, call, issue)
    return ToolResult(
        True,
        {
            "identifier": issue.identifier,
            "url": call.url,
            "link_id": link_id,
            "already_linked": not added,
        },
    )


# Writes shared by the daemon and the agent tools


def _own_card(config: KaitenConfig, issue: Issue) -> int:
    card_id = target_card(config, issue)
    if card_id is None:
        raise TrackerError(TRACKER_REJECTED, f"{issue.identifier} is not a card of {config.scope}")
    return card_id


async def _move_card(board: Board, card_id: int, state: str, issue: Issue) -> tuple[str, int]:
    """Put the card in the column of `state`; (its state, the column Kaiten answered)."""
    board.new_operation()
    layout = await board.fresh_layout()
    current = as_int((issue.native_ref or {}).get("column_id"))
    target = await _column_for(board, layout, state, current)
    response = await _card_request(
        board,
        "PATCH",
        f"/cards/{card_id}",
        f"Kaiten card {card_id}",
        json_body={"column_id": target.id},
    )
    body = response.body if isinstance(response.body, Mapping) else {}
    layout = board.layout or layout  # re-read by `_column_for` when the state was new
    moved = layout.state_of(target.id, board.named) or target.title
    log.info("card moved", issue_identifier=issue.identifier, state=moved)
    return moved, as_int(body.get("column_id")) or target.id


async def _post_comment(board: Board, card_id: int, body: str, issue: Issue) -> Mapping[str, Any]:
    response = await _card_request(
        board,
        "POST",
        f"/cards/{card_id}/comments",
        f"Kaiten card {card_id}",
        json_body={"text": body},
    )
    log.info("card commented", issue_identifier=issue.identifier)
    return response.body if isinstance(response.body, Mapping) else {}


async def _add_link(
    board: Board, card_id: int, call: AddLink, issue: Issue
) -> tuple[int | None, bool]:
    """(the link's id, whether this call added it). Kaiten keeps any number of links with the
    same URL, so the card's links are read first and a URL it already has is not added again
    (its text is left as it is: the subset offers no edit of a link)."""
    what = f"Kaiten card {card_id}"
    listed = await _card_request(board, "GET", f"/cards/{card_id}/external-links", what)
    links = listed.body if isinstance(listed.body, list) else []
    for link in links:
        if isinstance(link, Mapping) and link.get("url") == call.url:
            return as_int(link.get("id")), False
    payload: dict[str, Any] = {"url": call.url}
    if call.label is not None:
        payload["description"] = call.label
    response = await _card_request(
        board, "POST", f"/cards/{card_id}/external-links", what, json_body=payload
    )
    body = response.body if isinstance(response.body, Mapping) else {}
    log.info("card linked", issue_identifier=issue.identifier, url=call.url)
    return as_int(body.get("id")), True


def _link_text(title: str) -> str | None:
    """The daemon's link text as the link tool takes it: one line, cut to the tool's limit."""
    return " ".join(title.split())[: tools.MAX_DESCRIPTION_CHARS].strip() or None


async def _column_for(
    board: Board, layout: Layout, state: str, current: int | None = None
) -> Column:
    """The column a card put in `state` goes to; a layout read earlier is read again once
    before the state is refused, so a column added on the board is found."""
    target = layout.target_for(state, board.named, current)
    if target is None and (again := await board.reread_layout()) is not None:
        layout = again
        target = layout.target_for(state, board.named, current)
    if target is None:
        raise UnknownState(
            f"board {board.config.board_id} has no column {state!r}; columns: "
            + ", ".join(layout.titles())
        )
    return target


async def _card_request(
    board: Board, method: str, path: str, what: str, *, json_body: Any = None
) -> Response:
    """A request about one card; a 404 (`what` is gone) raises `Gone`."""
    response = await board.http.request(method, path, json_body=json_body, ok=(200, 201, 204, 404))
    if response.status == 404:
        raise Gone(f"{what} not found (404): deleted, or not visible to the token")
    return response


@contextlib.contextmanager
def _gone_is_rejected() -> Iterator[None]:
    """For the daemon, a card or comment Kaiten no longer has is a write it cannot do."""
    try:
        yield
    except Gone as gone:
        raise TrackerError(TRACKER_REJECTED, gone.message) from None


def _check_comment(body: str) -> None:
    if not body.strip() or len(body) > tools.MAX_COMMENT_CHARS:
        raise TrackerError(
            TRACKER_REJECTED,
            f"a Kaiten comment needs text of at most {tools.MAX_COMMENT_CHARS} characters",
        )


def _answered_comment(answer: Any, what: str) -> Comment:
    comment = comment_from(answer)
    if comment is None:
        raise TrackerError(TRACKER_RESPONSE, f"Kaiten answered {what} without its id")
    return comment

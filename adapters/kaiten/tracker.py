"""`KaitenTracker`: the `Tracker` for the cards of one Kaiten board, over Kaiten's REST API.

Profile (SPEC.md has the full table):
- `tracker.provider`: exactly one of `domain` (`https://<domain>.kaiten.ru/api/latest`) or
  `base_url` (on-premise API root); `board_id` (required); optional `space_id`, `lane_id`;
  `token` (default `$KAITEN_TOKEN`, sent as `Authorization: Bearer <token>`).
- States are column titles (see `adapters.kaiten.columns`). The board's columns and sub-columns
  are read together (`GET /boards/{id}/columns`, plus `GET /columns/{id}/subcolumns` per
  top-level column when the first answer lists no sub-column) at most once per
  `LAYOUT_MAX_AGE_S` (minutes: the layout costs a request per column and rarely changes), and
  again, once per read, whenever a card names a column the layout does not know.
- Candidates: `GET /cards?board_id&condition=1&column_ids=<columns of the states>` (plus
  `lane_id` / `space_id` when configured), oldest first, `PAGE_SIZE` per page with `offset`
  until a short page; the first sighting of an id wins.
- Refresh: Kaiten has no ids filter, so one `GET /cards/{id}` per id. A card that is gone (404),
  archived, or moved to another board or lane is omitted.
- Every request a token sends (polls, refreshes, blocker reads, agent tool calls, and those of
  a tracker rebuilt by a reload) shares one sliding-window limiter: Kaiten allows
  `REQUESTS_PER_WINDOW` requests per `WINDOW_S`, counted as they arrive. A 429 blocks the
  client until `X-RateLimit-Reset` (epoch seconds).
- A card is not dispatchable while `blocked` is set by hand (no blocking card) or while a card
  in `blocked_by_card_ids` is not done: not in a terminal state and not of Kaiten's done state.
  Blocker cards that are not in the same listing are read one by one (limited); a blocker
  that no longer exists (404) does not block.
- State reads skip malformed cards and log each once per problem; a refresh fails with
  `tracker_response` instead, since omission means "gone".
- The daemon's writes use the same client, limiter and cached layout. A move is one
  `PATCH /cards/{id}` `{"column_id"}` (the move tool runs the same code): the column comes from
  `Layout.target_for`, and an unknown state re-reads a cached layout once before it is refused.
  Comments are `GET` / `POST /cards/{id}/comments` and `PATCH .../comments/{comment_id}`
  (`text`, Markdown); the listing is one unpaged request, sorted oldest first here. A new card
  is one `POST /cards` in the state's column and the configured lane (else the parent's), one
  `POST /cards/{id}/blockers` `{"blocker_card_id"}` per blocker, each checked beforehand with
  `GET /cards/{id}`, and one `GET` to read it back. `tracker_states()` lists the states the
  columns carry; Kaiten columns are the board's design, so `ensure_states` creates nothing.
- A write the board cannot take (unknown state or blocker, a card outside the board, a card or
  comment Kaiten no longer has) is `tracker_rejected`; transport, status and rate-limit failures
  keep their categories.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import structlog

from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    TRACKER_PAGINATION,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    Comment,
    NewTicket,
    TrackerError,
)
from symphony.tracker.tools import AddComment, MoveIssue

from .._support.http import HttpClient, RateLimitHeaders, Response
from .._support.normalize import as_int
from .._support.ratelimit import SlidingWindowLimiter, shared_limiter
from .._support.skipped import SkippedRecords
from .._support.tool_calls import guarded
from . import tools
from .columns import Column, Layout, column_from
from .config import KaitenConfig
from .normalize import (
    CARD_DONE,
    ON_BOARD,
    Malformed,
    blocker_ids,
    card_issue,
    card_number,
    comment_from,
    identifier,
    required,
)

log = structlog.get_logger(__name__)

PAGE_SIZE = 100
"""Kaiten documents 100 as the largest page of comparable listings; /cards states none."""
MAX_PAGES = 100
"""A listing longer than this many pages (10,000 cards) is treated as a paging fault."""
REQUESTS_PER_WINDOW = 5
WINDOW_S = 1.0
"""Kaiten's documented limit: 5 requests per second per token."""
WINDOW_MARGIN_S = 0.1
"""Slack for the server's own clock and window edges (see `adapters._support.ratelimit`)."""
LAYOUT_MAX_AGE_S = 300.0
"""How long the board's columns are trusted; an unknown column forces a re-read sooner."""
MAX_TITLE_CHARS = 1_024
MAX_DESCRIPTION_CHARS = 32_768
"""Kaiten's limits on a new card's `title` and `description`."""

_NO_TIME = datetime.min.replace(tzinfo=UTC)

Known = dict[int, tuple[Mapping[str, Any], str | None]]
"""Cards already read in one operation, with their state (None off the board), by id."""


class UnknownState(TrackerError):
    """No column of the board carries the state: the move tool reports it as `unknown_state`."""

    def __init__(self, message: str) -> None:
        super().__init__(TRACKER_REJECTED, message)


class Gone(TrackerError):
    """Kaiten answered 404 for a card (or its comment): deleted, or invisible to the token.
    Agent tools report it as the status it is; the daemon's writes as `tracker_rejected`."""

    def __init__(self, message: str) -> None:
        super().__init__(TRACKER_STATUS, message)


@contextlib.contextmanager
def _gone_is_rejected() -> Iterator[None]:
    """For the daemon, a card or comment Kaiten no longer has is a write it cannot do."""
    try:
        yield
    except Gone as gone:
        raise TrackerError(TRACKER_REJECTED, gone.message) from None


class KaitenTracker:
    """A `Tracker` over one Kaiten board (optionally one lane of it)."""

    def __init__(
        self,
        config: KaitenConfig,
        *,
        workflow_states: Sequence[str] = (),
        terminal_states: Sequence[str] = (),
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        limiter: SlidingWindowLimiter | None = None,
    ) -> None:
        self.config = config
        # One client per tracker, one limiter per token: the limit covers every request sent
        # with it, and the 429 block every request of this tracker.
        self.limiter = limiter or shared_limiter(
            config.api_url,
            config.token.value,
            REQUESTS_PER_WINDOW,
            WINDOW_S,
            margin_s=WINDOW_MARGIN_S,
            clock=monotonic,
            sleep=sleep,
        )
        self.http = HttpClient(
            provider="Kaiten",
            base_url=config.api_url,
            headers={
                "Authorization": f"Bearer {config.token.value}",
                "Accept": "application/json",
                "User-Agent": "symphony",
            },
            rate_limits=RateLimitHeaders(
                remaining="x-ratelimit-remaining", reset="x-ratelimit-reset"
            ),
            transport=transport,
            limiter=self.limiter,
            clock=clock,
            sleep=sleep,
        )
        # Sub-columns named here keep their own title as state (see `adapters.kaiten.columns`).
        self._named = frozenset(normalize_state(s) for s in workflow_states)
        self._terminal = frozenset(normalize_state(s) for s in terminal_states)
        self._layout: Layout | None = None
        self._layout_reread = False
        # Malformed cards already reported, with the reason: logged when they appear or their
        # problem changes, not on every poll.
        self._skipped = SkippedRecords(log, "kaiten card", "card_id")

    # Tracker protocol

    async def discover_states(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(active, terminal) from the board's top-level columns: queue (type 1) and in
        progress (type 2) columns are active, done (type 3) columns terminal."""
        layout = await self._fresh_layout(force=True)
        active, terminal = layout.discover()
        if not active or not terminal:
            raise TrackerError(
                INVALID_TRACKER_CONFIG,
                f"Kaiten board {self.config.board_id} has no "
                f"{'queue or in-progress' if not active else 'done'} column; name "
                "tracker.active_states and tracker.terminal_states in the workflow",
            )
        if not self._terminal:
            self._terminal = frozenset(normalize_state(s) for s in terminal)
        return active, terminal

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        self._layout_reread = False
        layout = await self._fresh_layout()
        wanted = {normalize_state(s) for s in states}
        column_ids = layout.column_ids_for(states, self._named)
        if not column_ids:
            return []  # no column of the board carries these states
        cards = await self._list_cards(column_ids)
        found: dict[int, tuple[Mapping[str, Any], str]] = {}
        problems: dict[str, str] = {}
        for card in cards:
            try:
                card_id, _, column_id = required(card)
                state = await self._state_of(card_id, column_id)
            except Malformed as bad:
                problems[bad.key] = bad.reason
                continue
            if normalize_state(state) in wanted:
                found.setdefault(card_id, (card, state))
        self._skipped.update(problems)
        return await self._issues(found.values())

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        return await self._fetch_by_ids(ids, {})

    async def _fetch_by_ids(self, ids: Sequence[str], known: Known) -> list[Issue]:
        """`fetch_issues_by_ids`, with blocker cards already read in `known`."""
        found: dict[int, tuple[Mapping[str, Any], str]] = {}
        self._layout_reread = False
        for issue_id in dict.fromkeys(ids):
            # Ids are card numbers; anything else was never an id of this tracker.
            if not issue_id.isdigit():
                continue
            card = await self._card(int(issue_id))
            if card is None:
                continue  # deleted, or no longer visible to the token
            try:
                card_id, _, column_id = required(card)
                if not self._in_scope(card):
                    continue
                state = await self._state_of(card_id, column_id)
            except Malformed as bad:
                raise TrackerError(
                    TRACKER_RESPONSE, f"Kaiten card {issue_id} cannot be read: {bad.reason}"
                ) from None
            found.setdefault(card_id, (card, state))
        return await self._issues(found.values(), known)

    def agent_tools(self) -> list[ToolSpec]:
        return tools.tool_specs(
            f"Only columns of board {self.config.board_id} are accepted; the card keeps its lane."
        )

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments)
        if isinstance(call, ToolResult):
            return call
        card_id = self._target(issue)
        if card_id is None:
            return ToolResult.failure(
                tools.NOT_IN_SCOPE, f"{issue.identifier} is not a card of {self.config.scope}"
            )
        return await guarded("kaiten", name, issue, self._execute(call, card_id, issue))

    def secret_env_names(self) -> list[str]:
        name = self.config.token.env_name
        return [name] if name else []

    async def aclose(self) -> None:
        await self.http.aclose()

    # The daemon's writes

    async def move_issue(self, issue: Issue, state: str) -> None:
        card_id = self._own_card(issue)
        with _gone_is_rejected():
            await self._move_card(card_id, state, issue)

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        card_id = self._own_card(issue)
        _check_comment(body)
        with _gone_is_rejected():
            answer = await self._post_comment(card_id, body, issue)
        return _answered_comment(answer, f"the new comment on {issue.identifier}")

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        card_id = self._own_card(issue)
        if not comment_id.isascii() or not comment_id.isdigit():
            raise TrackerError(TRACKER_REJECTED, f"{comment_id!r} is not a Kaiten comment id")
        _check_comment(body)
        with _gone_is_rejected():
            response = await self._card_request(
                "PATCH",
                f"/cards/{card_id}/comments/{int(comment_id)}",
                f"comment {comment_id} of Kaiten card {card_id}",
                json_body={"text": body},
            )
        log.info("card comment edited", issue_identifier=issue.identifier, comment_id=comment_id)
        return _answered_comment(response.body, f"comment {comment_id} of {issue.identifier}")

    async def list_comments(self, issue: Issue) -> list[Comment]:
        card_id = self._own_card(issue)
        # Kaiten answers every comment of the card at once: the operation takes no paging.
        with _gone_is_rejected():
            response = await self._card_request(
                "GET", f"/cards/{card_id}/comments", f"Kaiten card {card_id}"
            )
        if not isinstance(response.body, list):
            raise TrackerError(TRACKER_RESPONSE, f"Kaiten comments of card {card_id}: not a list")
        comments = [c for c in map(comment_from, response.body) if c is not None]
        # Oldest first whatever order Kaiten lists them in. Ids grow with time: they break ties
        # and order the comments without a usable timestamp, which come first.
        return sorted(comments, key=lambda c: (c.created_at or _NO_TIME, int(c.id)))

    async def create_issue(self, ticket: NewTicket) -> Issue:
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
        lane_id = self.config.lane_id
        if ticket.parent is not None:
            parent = ticket.parent
            if self._target(parent) is None:
                raise TrackerError(
                    TRACKER_REJECTED,
                    f"parent {parent.identifier} is not a card of {self.config.scope}",
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
        self._layout_reread = False
        layout = await self._fresh_layout()
        target = await self._column_for(layout, ticket.state)
        # Every blocker must exist before anything is created; their cards seed the read-back.
        known: Known = {}
        for number, name in numbers.items():
            card = await self._card(number)
            if card is None:
                raise TrackerError(TRACKER_REJECTED, f"blocker {name!r} does not exist in Kaiten")
            known[number] = await self._known_entry(card)
        payload: dict[str, Any] = {
            "title": title,
            "board_id": self.config.board_id,
            "column_id": target.id,
        }
        if lane_id is not None:
            payload["lane_id"] = lane_id
        if description:
            payload["description"] = description
        response = await self.http.request("POST", "/cards", json_body=payload)
        created = response.body
        card_id = as_int(created.get("id")) if isinstance(created, Mapping) else None
        if card_id is None:
            raise TrackerError(TRACKER_RESPONSE, "Kaiten answered a new card without its id")
        for number in numbers:
            try:
                await self.http.request(
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
            state=layout.state_of(target.id, self._named) or target.title,
            blocked_by=[identifier(n) for n in numbers] or None,
        )
        issues = await self._fetch_by_ids([str(card_id)], known)
        if not issues:
            raise TrackerError(
                TRACKER_RESPONSE,
                f"Kaiten card {identifier(card_id)} was created but cannot be read back in "
                f"{self.config.scope}",
            )
        return issues[0]

    async def tracker_states(self) -> list[str] | None:
        layout = await self._fresh_layout()
        return layout.states(self._named)

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []  # columns are the board's design; a missing one shows in tracker_states()

    # Writes shared by the daemon and the agent tools

    def _own_card(self, issue: Issue) -> int:
        card_id = self._target(issue)
        if card_id is None:
            raise TrackerError(
                TRACKER_REJECTED, f"{issue.identifier} is not a card of {self.config.scope}"
            )
        return card_id

    async def _move_card(self, card_id: int, state: str, issue: Issue) -> tuple[str, int]:
        """Put the card in the column of `state`; (its state, the column Kaiten answered)."""
        self._layout_reread = False
        layout = await self._fresh_layout()
        current = as_int((issue.native_ref or {}).get("column_id"))
        target = await self._column_for(layout, state, current)
        response = await self._card_request(
            "PATCH",
            f"/cards/{card_id}",
            f"Kaiten card {card_id}",
            json_body={"column_id": target.id},
        )
        body = response.body if isinstance(response.body, Mapping) else {}
        layout = self._layout or layout  # re-read by `_column_for` when the state was new
        moved = layout.state_of(target.id, self._named) or target.title
        log.info("card moved", issue_identifier=issue.identifier, state=moved)
        return moved, as_int(body.get("column_id")) or target.id

    async def _post_comment(self, card_id: int, body: str, issue: Issue) -> Mapping[str, Any]:
        response = await self._card_request(
            "POST", f"/cards/{card_id}/comments", f"Kaiten card {card_id}", json_body={"text": body}
        )
        log.info("card commented", issue_identifier=issue.identifier)
        return response.body if isinstance(response.body, Mapping) else {}

    async def _column_for(self, layout: Layout, state: str, current: int | None = None) -> Column:
        """The column a card put in `state` goes to; a layout read earlier is read again once
        before the state is refused, so a column added on the board is found."""
        target = layout.target_for(state, self._named, current)
        if target is None and not self._layout_reread:
            self._layout_reread = True
            layout = await self._read_layout()
            target = layout.target_for(state, self._named, current)
        if target is None:
            raise UnknownState(
                f"board {self.config.board_id} has no column {state!r}; columns: "
                + ", ".join(layout.titles())
            )
        return target

    async def _card_request(
        self, method: str, path: str, what: str, *, json_body: Any = None
    ) -> Response:
        """A request about one card; a 404 (`what` is gone) raises `Gone`."""
        response = await self.http.request(
            method, path, json_body=json_body, ok=(200, 201, 204, 404)
        )
        if response.status == 404:
            raise Gone(f"{what} not found (404): deleted, or not visible to the token")
        return response

    # Tools

    async def _execute(self, call: tools.ToolCall, card_id: int, issue: Issue) -> ToolResult:
        if isinstance(call, MoveIssue):
            try:
                state, column_id = await self._move_card(card_id, call.state, issue)
            except UnknownState as unknown:
                return ToolResult.failure(tools.UNKNOWN_STATE, unknown.message)
            return ToolResult(
                True, {"identifier": issue.identifier, "state": state, "column_id": column_id}
            )
        if isinstance(call, AddComment):
            answer = await self._post_comment(card_id, call.body, issue)
            return ToolResult(
                True,
                {"identifier": issue.identifier, "commented": True, "comment_id": answer.get("id")},
            )
        payload: dict[str, Any] = {"url": call.url}
        if call.label is not None:
            payload["description"] = call.label
        response = await self.http.request(
            "POST", f"/cards/{card_id}/external-links", json_body=payload
        )
        body = response.body if isinstance(response.body, Mapping) else {}
        log.info("card linked", issue_identifier=issue.identifier)
        return ToolResult(
            True, {"identifier": issue.identifier, "url": call.url, "link_id": body.get("id")}
        )

    def _target(self, issue: Issue) -> int | None:
        """The session's own card id, checked against the configured board."""
        ref = issue.native_ref or {}
        card_id = as_int(ref.get("card_id"))
        if card_id is None or card_id < 1 or issue.id != str(card_id):
            return None
        if as_int(ref.get("board_id")) != self.config.board_id:
            return None
        return card_id

    # Reads

    async def _fresh_layout(self, *, force: bool = False) -> Layout:
        now = self.http.clock()
        layout = self._layout
        if force or layout is None or not 0 <= now - layout.read_at <= LAYOUT_MAX_AGE_S:
            layout = await self._read_layout()
            self._layout_reread = True  # just read: an unknown column is not on the board
        return layout

    async def _read_layout(self) -> Layout:
        board = self.config.board_id
        response = await self.http.request("GET", f"/boards/{board}/columns")
        if not isinstance(response.body, list):
            raise TrackerError(TRACKER_RESPONSE, f"Kaiten columns of board {board}: not a list")
        columns = [c for c in map(column_from, response.body) if c is not None]
        if columns and not any(c.parent_id is not None for c in columns):
            # This answer may leave sub-columns out; each top-level column lists its own.
            for top in list(columns):
                sub = await self.http.request("GET", f"/columns/{top.id}/subcolumns")
                if isinstance(sub.body, list):
                    columns += [
                        c for c in (column_from(raw, top.id) for raw in sub.body) if c is not None
                    ]
        if not columns:
            raise TrackerError(TRACKER_RESPONSE, f"Kaiten board {board} has no readable column")
        self._layout = Layout(columns, self.http.clock())
        return self._layout

    async def _state_of(self, card_id: int, column_id: int) -> str:
        layout = await self._fresh_layout()
        state = layout.state_of(column_id, self._named)
        if state is None and not self._layout_reread:
            # A column added since the layout was read: read it again, once per read.
            self._layout_reread = True
            layout = await self._read_layout()
            state = layout.state_of(column_id, self._named)
        if state is None:
            raise Malformed(
                str(card_id), f"column {column_id} is not a column of board {self.config.board_id}"
            )
        return state

    async def _list_cards(self, column_ids: list[int]) -> list[Any]:
        params: dict[str, Any] = {
            "board_id": self.config.board_id,
            # 1 = on the board: archived cards are never work.
            "condition": ON_BOARD,
            "column_ids": ",".join(map(str, column_ids)),
            # A stable order keeps offset pages from skipping cards that move meanwhile.
            "order_by": "created",
            "order_direction": "asc",
            "limit": PAGE_SIZE,
        }
        if self.config.lane_id is not None:
            params["lane_id"] = self.config.lane_id
        if self.config.space_id is not None:
            params["space_id"] = self.config.space_id
        cards: list[Any] = []
        for page in range(MAX_PAGES):
            response = await self.http.request(
                "GET", "/cards", params={**params, "offset": page * PAGE_SIZE}
            )
            if not isinstance(response.body, list):
                raise TrackerError(TRACKER_RESPONSE, "Kaiten card listing is not a list")
            cards += response.body
            if len(response.body) < PAGE_SIZE:
                return cards
        raise TrackerError(
            TRACKER_PAGINATION,
            f"Kaiten listing of {self.config.scope} did not end within {MAX_PAGES} pages",
        )

    async def _card(self, card_id: int) -> Mapping[str, Any] | None:
        response = await self.http.request("GET", f"/cards/{card_id}", ok=(200, 404))
        if response.status == 404:
            return None
        if not isinstance(response.body, Mapping):
            raise TrackerError(TRACKER_RESPONSE, f"Kaiten card {card_id} is not an object")
        return response.body

    def _in_scope(self, card: Mapping[str, Any]) -> bool:
        if as_int(card.get("board_id")) != self.config.board_id:
            return False
        if as_int(card.get("condition")) not in (None, ON_BOARD):
            return False  # archived or deleted
        return self.config.lane_id is None or as_int(card.get("lane_id")) == self.config.lane_id

    async def _issues(
        self, cards: Iterable[tuple[Mapping[str, Any], str]], known: Known | None = None
    ) -> list[Issue]:
        """Issues for (card, state) pairs, with their blockers resolved (`known`: blocker cards
        already read)."""
        pairs = list(cards)
        known = dict(known or {})
        for card, state in pairs:
            card_id, _, _ = required(card)
            known[card_id] = (card, state)
        issues = []
        for card, state in pairs:
            refs: list[BlockerRef] = []
            still_blocked = False
            # A terminal card's blockers change nothing: spare the requests.
            if normalize_state(state) not in self._terminal:
                for blocker_id in blocker_ids(card):
                    blocker = await self._blocker(blocker_id, known)
                    if blocker is None:
                        continue
                    ref, done = blocker
                    refs.append(ref)
                    still_blocked = still_blocked or not done
            issues.append(
                card_issue(
                    card,
                    state=state,
                    blockers=tuple(refs),
                    still_blocked=still_blocked,
                    web_url=self.config.web_url,
                    space_id=self.config.space_id,
                )
            )
        return issues

    async def _blocker(self, card_id: int, known: Known) -> tuple[BlockerRef, bool] | None:
        """The blocker's reference and whether it is done; None when it no longer exists."""
        if card_id not in known:
            card = await self._card(card_id)
            if card is None:
                return None
            known[card_id] = await self._known_entry(card)
        card, state = known[card_id]
        done = as_int(card.get("state")) == CARD_DONE or (
            state is not None and normalize_state(state) in self._terminal
        )
        return BlockerRef(id=str(card_id), identifier=identifier(card_id), state=state), done

    async def _known_entry(self, card: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
        """A card read as a blocker, with its state when it is on the configured board."""
        column_id = as_int(card.get("column_id"))
        state: str | None = None
        if as_int(card.get("board_id")) == self.config.board_id and column_id is not None:
            layout = await self._fresh_layout()
            state = layout.state_of(column_id, self._named)
        return card, state


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

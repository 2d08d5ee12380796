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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import httpx
import structlog

from symphony.issue import BlockerRef, Issue, normalize_state
from symphony.tools import ToolResult, ToolSpec
from symphony.tracker import (
    INVALID_TRACKER_CONFIG,
    TRACKER_PAGINATION,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerError,
)

from .._support.http import HttpClient, RateLimitHeaders
from .._support.normalize import as_int
from .._support.ratelimit import SlidingWindowLimiter, shared_limiter
from .._support.skipped import SkippedRecords
from .._support.tool_calls import guarded
from . import tools
from .columns import Layout, column_from
from .config import KaitenConfig
from .normalize import (
    CARD_DONE,
    ON_BOARD,
    Malformed,
    blocker_ids,
    card_issue,
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
        return await self._issues(found.values())

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

    # The daemon's writes: not yet offered by this adapter.

    async def move_issue(self, issue: Issue, state: str) -> None:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def list_comments(self, issue: Issue) -> list[Comment]:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def create_issue(self, ticket: NewTicket) -> Issue:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def tracker_states(self) -> list[str] | None:
        return None

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []

    # Tools

    async def _execute(self, call: tools.ToolCall, card_id: int, issue: Issue) -> ToolResult:
        path = f"/cards/{card_id}"
        if isinstance(call, tools.MoveCard):
            layout = await self._fresh_layout()
            target = layout.target_for(call.state)
            if target is None:
                return ToolResult.failure(
                    tools.UNKNOWN_STATE,
                    f"board {self.config.board_id} has no column {call.state!r}; columns: "
                    + ", ".join(layout.titles()),
                )
            response = await self.http.request("PATCH", path, json_body={"column_id": target.id})
            body = response.body if isinstance(response.body, Mapping) else {}
            state = layout.state_of(target.id, self._named) or target.title
            log.info("card moved", issue_identifier=issue.identifier, state=state)
            return ToolResult(
                True,
                {
                    "identifier": issue.identifier,
                    "state": state,
                    "column_id": as_int(body.get("column_id")) or target.id,
                },
            )
        if isinstance(call, tools.AddComment):
            response = await self.http.request(
                "POST", f"{path}/comments", json_body={"text": call.body}
            )
            body = response.body if isinstance(response.body, Mapping) else {}
            log.info("card commented", issue_identifier=issue.identifier)
            return ToolResult(
                True,
                {"identifier": issue.identifier, "commented": True, "comment_id": body.get("id")},
            )
        payload: dict[str, Any] = {"url": call.url}
        if call.description is not None:
            payload["description"] = call.description
        response = await self.http.request("POST", f"{path}/external-links", json_body=payload)
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

    async def _issues(self, cards: Iterable[tuple[Mapping[str, Any], str]]) -> list[Issue]:
        """Issues for (card, state) pairs, with their blockers resolved."""
        pairs = list(cards)
        known: dict[int, tuple[Mapping[str, Any], str | None]] = {}
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

    async def _blocker(
        self, card_id: int, known: dict[int, tuple[Mapping[str, Any], str | None]]
    ) -> tuple[BlockerRef, bool] | None:
        """The blocker's reference and whether it is done; None when it no longer exists."""
        if card_id not in known:
            card = await self._card(card_id)
            if card is None:
                return None
            column_id = as_int(card.get("column_id"))
            state: str | None = None
            if as_int(card.get("board_id")) == self.config.board_id and column_id is not None:
                layout = await self._fresh_layout()
                state = layout.state_of(column_id, self._named)
            known[card_id] = (card, state)
        card, state = known[card_id]
        done = as_int(card.get("state")) == CARD_DONE or (
            state is not None and normalize_state(state) in self._terminal
        )
        return BlockerRef(id=str(card_id), identifier=identifier(card_id), state=state), done

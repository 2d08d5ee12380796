"""`KaitenTracker`: the `Tracker` for the cards of one Kaiten board, over Kaiten's REST API.

Profile (SPEC.md has the full table):
- `tracker.provider`: exactly one of `domain` (`https://<domain>.kaiten.ru/api/latest`) or
  `base_url` (on-premise API root); `board_id` (required); optional `space_id`, `lane_id`;
  `token` (default `$KAITEN_TOKEN`, sent as `Authorization: Bearer <token>`).
- States are column titles (see `adapters.kaiten.columns`). The board's columns and sub-columns
  are read together (`GET /boards/{id}/columns`, plus `GET /columns/{id}/subcolumns` per
  top-level column when the first answer lists no sub-column) at most once per
  `reads.LAYOUT_MAX_AGE_S` (minutes: the layout costs a request per column and rarely changes), and
  again, once per read, whenever a card names a column the layout does not know.
- Candidates: `GET /cards?board_id&condition=1&column_ids=<columns of the states>` (plus
  `lane_id` / `space_id` when configured), oldest first, `reads.PAGE_SIZE` per page with `offset`
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
  `GET /cards/{id}`, and one `GET` to read it back. `link_pull_request` is the link tool's
  code: `GET /cards/{id}/external-links`, then `POST` of the URL unless the card already has
  it. `tracker_states()` lists the states the columns carry; Kaiten columns are the board's
  design, so `ensure_states` creates nothing.
- A write the board cannot take (unknown state or blocker, a card outside the board, a card or
  comment Kaiten no longer has) is `tracker_rejected`; transport, status and rate-limit failures
  keep their categories.

The class composes the two sides over one client: `adapters.kaiten.reads` (the layout, listings,
refreshes and blockers) and `adapters.kaiten.writes` (moves, comments, links, new cards, agent
tools).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from symphony.base.issue import Issue
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker.contract import Comment, NewTicket

from .._support.http import HttpClient, RateLimitHeaders
from .._support.ratelimit import SlidingWindowLimiter, shared_limiter
from .._support.tool_calls import guarded
from . import tools, writes
from .config import KaitenConfig
from .reads import Board

REQUESTS_PER_WINDOW = 5
WINDOW_S = 1.0
"""Kaiten's documented limit: 5 requests per second per token."""
WINDOW_MARGIN_S = 0.1
"""Slack for the server's own clock and window edges (see `adapters._support.ratelimit`)."""


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
        # Reads and writes share the client and the board's cached layout.
        self.board = Board(
            self.http,
            config,
            workflow_states=workflow_states,
            terminal_states=terminal_states,
        )

    # Tracker protocol

    async def discover_states(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(active, terminal) from the board's top-level columns: queue (type 1) and in
        progress (type 2) columns are active, done (type 3) columns terminal."""
        return await self.board.discover_states()

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        async with self.board.gate.reading():
            return await self.board.by_states(states)

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        async with self.board.gate.reading():
            return await self.board.by_ids(ids)

    def agent_tools(self) -> list[ToolSpec]:
        return tools.tool_specs(
            f"Only columns of board {self.config.board_id} are accepted; the card keeps its lane."
        )

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments)
        if isinstance(call, ToolResult):
            return call
        card_id = writes.target_card(self.config, issue)
        if card_id is None:
            return ToolResult.failure(
                tools.NOT_IN_SCOPE, f"{issue.identifier} is not a card of {self.config.scope}"
            )
        return await guarded(
            "kaiten", name, issue, writes.run_tool(self.board, call, card_id, issue)
        )

    def secret_env_names(self) -> list[str]:
        name = self.config.token.env_name
        return [name] if name else []

    async def aclose(self) -> None:
        await self.http.aclose()

    # The daemon's writes. The agent tools run the same code.

    async def move_issue(self, issue: Issue, state: str) -> None:
        await writes.move_issue(self.board, issue, state)

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        return await writes.add_comment(self.board, issue, body)

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        return await writes.edit_comment(self.board, issue, comment_id, body)

    async def list_comments(self, issue: Issue) -> list[Comment]:
        return await writes.list_comments(self.board, issue)

    async def create_issue(self, ticket: NewTicket) -> Issue:
        return await writes.create_card(self.board, ticket)

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        await writes.link_pull_request(self.board, issue, url, title)

    async def tracker_states(self) -> list[str] | None:
        return await self.board.states()

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []  # columns are the board's design; a missing one shows in tracker_states()

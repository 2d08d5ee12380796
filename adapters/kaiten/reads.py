"""The read side of one Kaiten board: its column layout (cached for `LAYOUT_MAX_AGE_S`, read
again once per operation when a card or state names a column it does not know), the candidate
listing by states (`GET /cards`, paged), the refresh by ids (one `GET /cards/{id}` each), and
the blocker cards that decide whether a card is still blocked.

`Board` holds what the reads of one tracker share with its writes, which use the same layout
and read new cards back through it; every request goes through the tracker's one HTTP client,
so reads share its rate limiter and 429 block.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog

from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    TRACKER_PAGINATION,
    TRACKER_RESPONSE,
    TrackerError,
)

from .._support.creation import CreationGate
from .._support.http import HttpClient
from .._support.normalize import as_int
from .._support.skipped import SkippedRecords
from .columns import Layout, column_from
from .config import KaitenConfig
from .normalize import CARD_DONE, ON_BOARD, Malformed, blocker_ids, card_issue, identifier, required

log = structlog.get_logger(__name__)

PAGE_SIZE = 100
"""Kaiten documents 100 as the largest page of comparable listings; /cards states none."""
MAX_PAGES = 100
"""A listing longer than this many pages (10,000 cards) is treated as a paging fault."""
LAYOUT_MAX_AGE_S = 300.0
"""How long the board's columns are trusted; an unknown column forces a re-read sooner."""

Known = dict[int, tuple[Mapping[str, Any], str | None]]
"""Cards already read in one operation, with their state (None off the board), by id."""


class Board:
    """The cards and columns of the configured board (optionally one lane of it), read with
    `http`. `workflow_states` name the sub-columns that keep their own title as state (see
    `adapters.kaiten.columns`)."""

    def __init__(
        self,
        http: HttpClient,
        config: KaitenConfig,
        *,
        workflow_states: Sequence[str] = (),
        terminal_states: Sequence[str] = (),
    ) -> None:
        self.http = http
        self.config = config
        self.named = frozenset(normalize_state(s) for s in workflow_states)
        self._terminal = frozenset(normalize_state(s) for s in terminal_states)
        self.layout: Layout | None = None
        self._layout_reread = False
        # Malformed cards already reported, with the reason: logged when they appear or their
        # problem changes, not on every poll.
        self._skipped = SkippedRecords(log, "kaiten card", "card_id")
        self.gate = CreationGate()
        """A card is made, then its blockers linked: the tracker's reads wait for that."""

    async def discover_states(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(active, terminal) from the board's top-level columns: queue (type 1) and in
        progress (type 2) columns are active, done (type 3) columns terminal."""
        layout = await self.fresh_layout(force=True)
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

    async def by_states(self, states: Sequence[str]) -> list[Issue]:
        """The cards of the board in `states`; malformed ones are skipped and logged."""
        self.new_operation()
        layout = await self.fresh_layout()
        wanted = {normalize_state(s) for s in states}
        column_ids = layout.column_ids_for(states, self.named)
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
                problems[bad.key or "?"] = bad.reason
                continue
            if normalize_state(state) in wanted:
                found.setdefault(card_id, (card, state))
        self._skipped.update(problems)
        return await self._issues(found.values())

    async def by_ids(self, ids: Sequence[str], known: Known | None = None) -> list[Issue]:
        """The cards with these ids that are still on the board, with blocker cards already
        read in `known`; a malformed one fails with `tracker_response`."""
        found: dict[int, tuple[Mapping[str, Any], str]] = {}
        self.new_operation()
        for issue_id in dict.fromkeys(ids):
            # Ids are card numbers; anything else was never an id of this tracker.
            if not issue_id.isdigit():
                continue
            card = await self.card(int(issue_id))
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

    async def states(self) -> list[str]:
        """The states the board's columns carry."""
        layout = await self.fresh_layout()
        return layout.states(self.named)

    # The layout

    def new_operation(self) -> None:
        """Starts an operation: the first unknown column or state in it may re-read the
        layout once (`reread_layout`)."""
        self._layout_reread = False

    async def fresh_layout(self, *, force: bool = False) -> Layout:
        """The cached layout, read again when it is older than `LAYOUT_MAX_AGE_S`."""
        now = self.http.clock()
        layout = self.layout
        if force or layout is None or not 0 <= now - layout.read_at <= LAYOUT_MAX_AGE_S:
            layout = await self._read_layout()
            self._layout_reread = True  # just read: an unknown column is not on the board
        return layout

    async def reread_layout(self) -> Layout | None:
        """The layout read again, so a column added on the board is found; None when it was
        already read during this operation."""
        if self._layout_reread:
            return None
        self._layout_reread = True
        return await self._read_layout()

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
        self.layout = Layout(columns, self.http.clock())
        return self.layout

    async def _state_of(self, card_id: int, column_id: int) -> str:
        layout = await self.fresh_layout()
        state = layout.state_of(column_id, self.named)
        # A column added since the layout was read: read it again, once per read.
        if state is None and (again := await self.reread_layout()) is not None:
            state = again.state_of(column_id, self.named)
        if state is None:
            raise Malformed(
                f"column {column_id} is not a column of board {self.config.board_id}", str(card_id)
            )
        return state

    # Cards

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

    async def card(self, card_id: int) -> Mapping[str, Any] | None:
        """The card as Kaiten answers it; None when it is gone (404)."""
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
            card = await self.card(card_id)
            if card is None:
                return None
            known[card_id] = await self.known_entry(card)
        card, state = known[card_id]
        done = as_int(card.get("state")) == CARD_DONE or (
            state is not None and normalize_state(state) in self._terminal
        )
        return BlockerRef(id=str(card_id), identifier=identifier(card_id), state=state), done

    async def known_entry(self, card: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
        """A card read as a blocker, with its state when it is on the configured board."""
        column_id = as_int(card.get("column_id"))
        state: str | None = None
        if as_int(card.get("board_id")) == self.config.board_id and column_id is not None:
            layout = await self.fresh_layout()
            state = layout.state_of(column_id, self.named)
        return card, state

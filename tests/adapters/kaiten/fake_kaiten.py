"""A small Kaiten REST server for end-to-end and contract tests (stdlib only).

It holds one company's boards, columns and cards in memory and speaks the endpoints the adapter
uses, under `/api/latest`: board columns, sub-columns, the card listing (board, condition,
column_ids, lane, space filters with offset/limit), one card, creating a card (`POST /cards`,
answered 200 as the published description has it), moving a card (`PATCH`), comments (list,
add, edit; each embeds its author's `User`), blockers (list, add) and external links (list,
add). Every request is recorded with the time it arrived. Like Kaiten, the fake counts arrivals
in a sliding one-second window: a request arriving while the last second already holds 5 is
answered 429 and recorded in `over_limit`, so a test can fail on any excess.
`limit_next()` makes the next answer a 429 carrying `X-RateLimit-Reset` on purpose.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.adapters import fake_http
from tests.adapters.kaiten import payloads

PREFIX = "/api/latest"


@dataclass
class FakeCard:
    id: int
    column_id: int
    board_id: int = payloads.BOARD
    lane_id: int | None = 7
    title: str | None = None
    condition: int = 1
    blocked: bool = False
    blocked_by: list[int] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    description: str | None = "Do the thing."
    comments: list[dict[str, Any]] = field(default_factory=list)
    """Kaiten comment objects, oldest first."""
    links: list[dict[str, Any]] = field(default_factory=list)
    """Kaiten external link objects, oldest first."""


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    at: float
    body: Any = None
    answer: Any = None


class FakeKaiten:
    def __init__(
        self,
        token: str,
        columns: list[dict[str, Any]] | None = None,
        *,
        board_lists_subcolumns: bool = True,
    ) -> None:
        self.token = token
        self.columns = payloads.columns() if columns is None else columns
        # Whether `GET /boards/{id}/columns` includes sub-columns or only `/subcolumns` does.
        self.board_lists_subcolumns = board_lists_subcolumns
        self.cards: dict[int, FakeCard] = {}
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.base = ""
        self._limited: float | None = None
        self.next_id = 1000
        self.user = payloads.user()
        """Whom the token belongs to: the author of the comments it adds."""
        self.default_lane = 7
        """The lane a card created without `lane_id` lands in."""
        self.window_s = 1.0
        self.window_limit = 5
        self._window: deque[float] = deque()
        self.over_limit: list[Request] = []
        """Requests that arrived when the sliding window was already full."""

    # Board edits (as a person in Kaiten's web app would make them)

    def add(self, card_id: int, column_id: int, **fields: Any) -> FakeCard:
        with self.lock:
            card = FakeCard(card_id, column_id, **fields)
            self.cards[card_id] = card
            return card

    def move(self, card_id: int, column_id: int) -> None:
        with self.lock:
            self.cards[card_id].column_id = column_id

    def column_of(self, card_id: int) -> int:
        with self.lock:
            return self.cards[card_id].column_id

    def limit_next(self, reset_in_s: float) -> float:
        """Answer the next request with 429; returns the reset epoch it announces."""
        reset = float(int(time.time() + reset_in_s) + 1)
        with self.lock:
            self._limited = reset
        return reset

    # Rendering

    def _type_of(self, column_id: int) -> int:
        column = next((c for c in self.columns if c["id"] == column_id), None)
        if column is None:
            return 1
        if column["column_id"] is not None:
            return self._type_of(column["column_id"])
        return int(column["type"])

    def body_of(self, card: FakeCard) -> dict[str, Any]:
        return payloads.card(
            card.id,
            card.column_id,
            title=card.title,
            state=self._type_of(card.column_id),
            board_id=card.board_id,
            lane_id=card.lane_id,
            tags=card.tags,
            blocked=card.blocked or bool(card.blocked_by),
            blocked_by=card.blocked_by,
            condition=card.condition,
            description=card.description,
        )

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        arrived = time.time()
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        with self.lock:
            limited, self._limited = self._limited, None
            while self._window and self._window[0] <= arrived - self.window_s:
                self._window.popleft()
            over = len(self._window) >= self.window_limit
            self._window.append(arrived)
        if over:
            status, out, answer = (
                429,
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(arrived) + 1)},
                {"message": "Too many requests"},
            )
        elif limited is not None:
            status, out, answer = (
                429,
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(limited))},
                {"message": "Too many requests"},
            )
        else:
            status, out, answer = self._route(method, parts.path, query, headers, body)
            out = {
                **out,
                "X-RateLimit-Remaining": "4",
                "X-RateLimit-Reset": str(int(time.time()) + 1),
            }
        request = Request(method, parts.path, query, status, arrived, body, answer)
        with self.lock:
            self.requests.append(request)
            if over:
                self.over_limit.append(request)
        return status, out, answer

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, dict[str, str], Any]:
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, "Invalid token"
        if not path.startswith(PREFIX):
            return 404, {}, {"message": "Not found"}
        rest = path[len(PREFIX) :]
        with self.lock:
            if match := re.fullmatch(r"/boards/(\d+)/columns", rest):
                board = int(match.group(1))
                listed = [c for c in self.columns if c["board_id"] == board]
                if not self.board_lists_subcolumns:
                    listed = [c for c in listed if c["column_id"] is None]
                return 200, {}, listed
            if match := re.fullmatch(r"/columns/(\d+)/subcolumns", rest):
                parent = int(match.group(1))
                return 200, {}, [c for c in self.columns if c["column_id"] == parent]
            if rest == "/cards" and method == "GET":
                return 200, {}, self._list(query)
            if rest == "/cards" and method == "POST":
                return self._create(body)
            match = re.fullmatch(r"/cards/(\d+)(?:/([a-z-]+)(?:/(\d+))?)?", rest)
            if match is None or int(match.group(1)) not in self.cards:
                return 404, {}, {"message": "Card not found"}
            card = self.cards[int(match.group(1))]
            tail, item = match.group(2) or "", match.group(3)
            if item is not None:
                if tail == "comments" and method == "PATCH":
                    return self._edit_comment(card, int(item), body)
                return 404, {}, {"message": "Not found"}
            if tail == "" and method == "GET":
                return 200, {}, self.body_of(card)
            if tail == "" and method == "PATCH":
                if not any(c["id"] == body.get("column_id") for c in self.columns):
                    return 400, {}, {"message": "Column not found"}
                card.column_id = body["column_id"]
                return 200, {}, self.body_of(card)
            if tail == "comments" and method == "GET":
                return 200, {}, [dict(c) for c in card.comments]
            if tail == "comments" and method == "POST":
                self.next_id += 1
                comment = payloads.comment(
                    self.next_id, card.id, body["text"], created=_stamp(), author=self.user
                )
                card.comments.append(comment)
                return 200, {}, dict(comment)
            if tail == "blockers" and method == "GET":
                return (
                    200,
                    {},
                    [
                        payloads.blocker(n, card.id, blocker)
                        for n, blocker in enumerate(card.blocked_by, 1)
                    ],
                )
            if tail == "blockers" and method == "POST":
                blocker = body.get("blocker_card_id")
                if blocker not in self.cards:
                    return 404, {}, {"message": "Blocker card not found"}
                if blocker not in card.blocked_by:
                    card.blocked_by.append(blocker)
                self.next_id += 1
                return 200, {}, payloads.blocker(self.next_id, card.id, blocker)
            if tail == "external-links" and method == "GET":
                return 200, {}, [dict(link) for link in card.links]
            if tail == "external-links" and method == "POST":
                self.next_id += 1
                link = payloads.external_link(
                    self.next_id, card.id, body["url"], body.get("description")
                )
                card.links.append(link)
                return 200, {}, dict(link)
        return 404, {}, {"message": "Not found"}

    def _create(self, body: Any) -> tuple[int, dict[str, str], Any]:
        """`POST /cards`: Kaiten requires `title` and `board_id`; the column must be the
        board's (the first queue column when none is named)."""
        if not isinstance(body, dict) or not body.get("title") or "board_id" not in body:
            return 400, {}, {"message": "title and board_id are required"}
        board = [c for c in self.columns if c["board_id"] == body["board_id"]]
        column_id = body.get("column_id", next((c["id"] for c in board), None))
        if not any(c["id"] == column_id for c in board):
            return 400, {}, {"message": "Column not found"}
        self.next_id += 1
        card = FakeCard(
            self.next_id,
            column_id,
            board_id=body["board_id"],
            lane_id=body.get("lane_id", self.default_lane),
            title=body["title"],
            description=body.get("description"),
        )
        self.cards[card.id] = card
        return 200, {}, self.body_of(card)

    def _edit_comment(
        self, card: FakeCard, comment_id: int, body: Any
    ) -> tuple[int, dict[str, str], Any]:
        for comment in card.comments:
            if comment["id"] == comment_id and not comment["deleted"]:
                comment.update(text=body["text"], edited=True, updated=_stamp())
                return 200, {}, dict(comment)
        return 404, {}, {"message": "Comment not found"}

    def _list(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        def number(name: str) -> int | None:
            values = query.get(name)
            return int(values[0]) if values else None

        columns = {int(x) for x in query.get("column_ids", [""])[0].split(",") if x}
        offset, limit = number("offset") or 0, min(number("limit") or 100, 100)
        matching = [
            card
            for card in sorted(self.cards.values(), key=lambda c: c.id)
            if (number("board_id") is None or card.board_id == number("board_id"))
            and (number("condition") is None or card.condition == number("condition"))
            and (not columns or card.column_id in columns)
            and (number("lane_id") is None or card.lane_id == number("lane_id"))
        ]
        return [self.body_of(card) for card in matching[offset : offset + limit]]


def _stamp() -> str:
    """Now, as Kaiten writes timestamps (UTC, milliseconds)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def serve(fake: FakeKaiten) -> AbstractContextManager[FakeKaiten]:
    """Run `fake` on 127.0.0.1 with an ephemeral port; `fake.base` is its URL."""
    return fake_http.serve(fake, PREFIX)

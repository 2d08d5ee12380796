"""The notification outbox in the store (`notifications`, schema 7).

`Store.save` queues deliveries in the transaction that saves what they tell, so a notice is
sent only about state that survives a restart, and a kill -9 before sending leaves it queued for
the next daemon. The sender marks each delivery sent or failed (with its next attempt) right
after trying it; a sent row stays as long as the outcome records (`state.keep_days`), so the
same notice (channel and key) is never queued twice. Delivery is at least once: a kill -9 in
the instant between a receiver's answer and the mark repeats that one message, which carries
the same delivery id (receivers can drop it).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from symphony.core.notifications import Delivery, Notice
from symphony.store.schema import NOTIFICATIONS


@dataclass(frozen=True, slots=True)
class ChannelStatus:
    """What the dashboard shows of one channel."""

    channel: str
    pending: int
    sent: int
    attempts: int
    """Failed attempts in a row of its oldest pending delivery (0: nothing failing)."""
    error: str | None
    last_sent_at: datetime | None


def _ts(at: datetime) -> float:
    return at.timestamp()


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class NotificationOutbox:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def queue(self, deliveries: Iterable[Delivery], wall: datetime) -> int:
        """Insert the deliveries not queued before (inside the caller's transaction); returns
        how many were new."""
        added = 0
        for d in deliveries:
            notice = json.dumps(d.notice.to_json(), sort_keys=True)
            values = {
                "channel": d.channel, "key": d.notice.key, "notice": notice,
                "created_at": _ts(wall), "due_at": _ts(d.due_at), "attempts": 0,
            }  # fmt: skip
            added += NOTIFICATIONS.insert(self._db, values, "INSERT OR IGNORE")
        return added

    def due(self, wall: datetime, limit: int = 200) -> list[Delivery]:
        """Deliveries not yet sent whose time has come, oldest first."""
        rows = list(
            NOTIFICATIONS.read(
                self._db,
                "WHERE sent_at IS NULL AND due_at <= ? ORDER BY created_at, key LIMIT ?",
                (_ts(wall), limit),
            )
        )
        deliveries = []
        for v in rows:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                notice = Notice.from_json(json.loads(v["notice"]))
                deliveries.append(
                    Delivery(v["channel"], notice, _at(v["due_at"]), v["attempts"], v["error"])
                )
        return deliveries

    def next_due(self) -> datetime | None:
        row = self._db.execute(
            "SELECT MIN(due_at) FROM notifications WHERE sent_at IS NULL"
        ).fetchone()
        return _at(row[0]) if row and row[0] is not None else None

    def sent(self, channel: str, keys: Sequence[str], wall: datetime) -> None:
        with self._transaction():
            self._db.executemany(
                "UPDATE notifications SET sent_at = ?, error = NULL WHERE channel = ? AND key = ?",
                [(_ts(wall), channel, key) for key in keys],
            )

    def failed(
        self, channel: str, keys: Sequence[str], error: str, attempts: int, retry: datetime
    ) -> None:
        with self._transaction():
            self._db.executemany(
                "UPDATE notifications SET attempts = ?, error = ?, due_at = ? "
                "WHERE channel = ? AND key = ?",
                [(attempts, error[:500], _ts(retry), channel, key) for key in keys],
            )

    def defer(self, channel: str, keys: Sequence[str], due: datetime) -> None:
        """Not tried, but not before `due` either (its channel just failed)."""
        with self._transaction():
            self._db.executemany(
                "UPDATE notifications SET due_at = MAX(due_at, ?) WHERE channel = ? AND key = ?",
                [(_ts(due), channel, key) for key in keys],
            )

    def drop(self, channel: str) -> int:
        """Forget the pending deliveries of a channel no longer configured."""
        with self._transaction():
            cursor = self._db.execute(
                "DELETE FROM notifications WHERE channel = ? AND sent_at IS NULL", (channel,)
            )
        return cursor.rowcount

    def forget_sent(self, before: datetime) -> None:
        """Drop what was sent before `before` (inside the caller's transaction)."""
        self._db.execute(
            "DELETE FROM notifications WHERE sent_at IS NOT NULL AND sent_at < ?", (_ts(before),)
        )

    def status(self) -> list[ChannelStatus]:
        statuses = []
        for channel, pending, sent, last_sent in self._db.execute(
            "SELECT channel, SUM(sent_at IS NULL), SUM(sent_at IS NOT NULL), MAX(sent_at) "
            "FROM notifications GROUP BY channel ORDER BY channel"
        ):
            oldest = self._db.execute(
                "SELECT attempts, error FROM notifications WHERE channel = ? AND sent_at IS NULL "
                "ORDER BY created_at LIMIT 1",
                (channel,),
            ).fetchone()
            attempts, error = oldest if oldest is not None else (0, None)
            statuses.append(
                ChannelStatus(channel, int(pending), int(sent), int(attempts), error,
                              _at(last_sent) if last_sent is not None else None)
            )  # fmt: skip
        return statuses

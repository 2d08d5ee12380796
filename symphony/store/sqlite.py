"""The durable store: what a restarted daemon needs to carry on, in one SQLite file.

The orchestrator's shell owns one connection. After every loop pass it hands the scheduling
state to `Store.save`, which writes only what changed since the last save, in one transaction,
so the agents' event stream never writes per message. The file is in WAL mode with
`synchronous=NORMAL`: a committed pass survives the daemon being killed (`kill -9`), and power
loss can cost at most the last passes, never consistency.

What is kept: running entries (agent process group, thread, stage, tokens), the retry queue with
wall-clock due times, stage progress, the outbox of stage transitions not yet confirmed on the
tracker, kept workspaces, completed ids, token and time totals per ticket and for the fleet, and
the instances of the daemon that used the file (how a restart finds an old daemon's agents).

A file that is not a readable database is moved aside and a fresh one started (the daemon then
behaves as the spec describes); a file written by a newer schema is refused.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.core.notifications import Delivery
from symphony.core.outcomes import OutcomeRecord
from symphony.core.state import Outbox, SchedulerState
from symphony.store.notifications import NotificationOutbox
from symphony.store.rows import (
    MIRRORED,
    Encoder,
    Mirror,
    Saved,
    meta_rows,
    outcome_from,
    outcome_values,
    read_saved,
    ticket_values,
)
from symphony.store.schema import (
    ACTIVITY,
    COMPLETED,
    INSTANCES,
    META,
    MIGRATIONS,
    OUTCOMES,
    RUNS,
    SCHEMA_VERSION,
    TICKET_TOTALS,
    Migration,
    Row,
    Table,
)

STORE_NEWER = ErrorCategory.STORE_NEWER_SCHEMA
STORE_UNUSABLE = ErrorCategory.STORE_UNUSABLE


class StoreError(SymphonyError):
    """The store cannot be used as it is (a newer schema, an unwritable folder)."""


class Store:
    """One SQLite file. Not thread-safe: the orchestrator's loop is its only user."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        # What the file holds now, per mirrored table: a save writes only the difference.
        self._written: dict[str, dict[str, Row]] = {}
        self._written_stale = False
        """A save failed midway: `_written` may claim rows the file does not have."""
        self._encoder = Encoder()
        self.writes = 0
        """Rows written or deleted since the store was opened (for benchmarks)."""
        self.notifications = NotificationOutbox(connection)
        self._read_only = False

    # Opening

    @classmethod
    def open(
        cls, path: Path, *, migrations: Sequence[Migration] = MIGRATIONS
    ) -> tuple[Store, str | None]:
        """The store at `path`, created or migrated as needed; and a message when a damaged
        file had to be moved aside (the caller says it loudly). Raises StoreError."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(STORE_UNUSABLE, f"cannot create {path.parent}: {exc}") from None
        try:
            return cls._open(path, migrations), None
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            moved = _move_aside(path)
            store = cls._open(path, migrations)
            return store, (
                f"the state file {path} could not be read ({exc}); it was moved to {moved} "
                "and the daemon starts with no saved state"
            )

    @classmethod
    def read_only(cls, path: Path) -> Store | None:
        """The store at `path` for reading beside a running daemon (`symphony report`), or None
        when there is none yet. Never creates, migrates or moves anything. Raises StoreError."""
        if not path.is_file():
            return None
        try:
            db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None
            )
            version = _user_version(db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(STORE_UNUSABLE, f"{path} cannot be read: {exc}") from None
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(
                STORE_NEWER, f"{path} was written by a newer symphony (schema {version})"
            )
        store = cls(db, path)
        store._read_only = True
        return store

    @classmethod
    def _open(cls, path: Path, migrations: Sequence[Migration]) -> Store:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            version = _user_version(db)
            newest = migrations[-1].version if migrations else 0
            if version > newest:
                raise StoreError(
                    STORE_NEWER,
                    f"{path} was written by a newer symphony (schema {version}; this one knows "
                    f"up to {newest}); upgrade symphony, or move the file away to start fresh",
                )
            for migration in migrations:
                if migration.version > version:
                    _migrate(db, migration)
            # A file that opens but is damaged inside fails here, not at the first save.
            (check,) = db.execute("PRAGMA quick_check").fetchone()
            if check != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
        except BaseException:
            db.close()
            raise
        return cls(db, path)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()

    # Instances

    def register_instance(self, instance_id: str, pid: int, at: datetime) -> list[str]:
        """Record this daemon; returns the instances before it (oldest first)."""
        previous = [v["id"] for v in INSTANCES.read(self._db, "ORDER BY rowid")]
        with self._transaction():
            values = {"id": instance_id, "pid": pid, "started_at": at.isoformat()}
            INSTANCES.insert(self._db, values)
            # The last few are enough to find what an old daemon left running.
            self._db.execute(
                "DELETE FROM instances WHERE rowid NOT IN "
                "(SELECT rowid FROM instances ORDER BY rowid DESC LIMIT 20)"
            )
        return previous

    def workflow_id(self) -> str | None:
        """What names this workflow's store across every daemon that uses it (made at the first
        ask, then kept); None from a read-only store that has none yet. Whatever the daemon
        leaves in the cluster beyond one daemon's life (a ticket's claim) carries it."""
        found = [v["value"] for v in META.read(self._db, "WHERE key = ?", ("workflow_id",))]
        if found or self._read_only:
            return found[0] if found else None
        made = uuid.uuid4().hex[:16]
        with self._transaction():
            META.insert(self._db, {"key": "workflow_id", "value": made}, "INSERT OR IGNORE")
        return self.workflow_id()

    def instances(self) -> list[str]:
        """The daemons that used this store, oldest first (the last may be running now)."""
        return [v["id"] for v in INSTANCES.read(self._db, "ORDER BY rowid")]

    # Loading

    def load(self, wall_now: datetime) -> Saved:
        saved = read_saved(self._db, wall_now)
        # What the file holds is what the next save compares against.
        self._written = self._rows_on_disk()
        return saved

    # Saving

    def save(
        self,
        state: SchedulerState,
        mono_now: float,
        wall_now: datetime,
        *,
        keep_runs: bool = False,
        deliveries: Sequence[Delivery] = (),
        outbox: Outbox | None = None,
        activity: Sequence[Mapping[str, Any]] = (),
        activity_kept: int = 200,
    ) -> None:
        """Write what changed since the last save, in one transaction. `keep_runs` leaves the
        saved runs as they are (a graceful stop, so the next daemon continues them);
        `deliveries` are queued in the same transaction (`symphony.store.notifications`), and
        the new `activity` rows (the dashboard's recent events) appended, the newest
        `activity_kept` of them kept.

        The core's outbox (outcome records, changed totals and ledgers) is taken from `state`,
        unless the caller took it already and passes it as `outbox`; if the save fails it goes
        back to `state`, so nothing of it is lost and the next save writes it."""
        taken = state.take_outbox() if outbox is None else outbox
        try:
            self._save(state, taken, mono_now, wall_now, keep_runs, deliveries)
            self._append_activity(activity, activity_kept)
        except BaseException:
            state.give_back(taken)
            raise

    def _save(
        self,
        state: SchedulerState,
        outbox: Outbox,
        mono_now: float,
        wall_now: datetime,
        keep_runs: bool,
        deliveries: Sequence[Delivery],
    ) -> None:
        # Only ever added to, and after weeks it is every ticket ever finished: its size says
        # whether anything changed.
        completed_changed = len(state.completed) != len(self._written.get(COMPLETED.name, ()))
        tables = self._encoder.mirror(
            state, outbox.changed_ledgers, mono_now, wall_now, with_completed=completed_changed
        )
        if keep_runs:
            del tables[RUNS]
        if self._written_stale:
            self._written = self._rows_on_disk()
            self._written_stale = False
        meta = meta_rows(state)
        if not (outbox.changed_totals or outbox.outcomes or deliveries) and self._unchanged(
            tables, meta
        ):
            return  # an idle daemon's pass: no transaction, no lock taken on the file
        with self._transaction():
            for table, rows in tables.items():
                self._sync(table, rows)
            for issue_id in outbox.changed_totals:
                totals = state.ticket_totals.get(issue_id)
                if totals is not None:
                    values = ticket_values(issue_id, totals, wall_now)
                    self.writes += TICKET_TOTALS.insert(self._db, values, "INSERT OR REPLACE")
            for record in outbox.outcomes:
                self.writes += OUTCOMES.insert(self._db, outcome_values(record))
            self.writes += self.notifications.queue(deliveries, wall_now)
            self._sync(META, meta, delete=False)

    def _unchanged(self, tables: Mirror, meta: Mapping[str, Row]) -> bool:
        """Whether the file already holds every row of `tables` (and no other) and `meta`."""
        written = self._written
        if any(written.get(table.name, {}) != rows for table, rows in tables.items()):
            return False
        saved_meta = written.get(META.name, {})
        return all(saved_meta.get(name) == row for name, row in meta.items())

    def _append_activity(self, rows: Sequence[Mapping[str, Any]], kept: int) -> None:
        """Recent events in a transaction of their own: losing them to a failing disk costs
        the dashboard a few lines, never the saved state (a failure here is not given back)."""
        if not rows:
            return
        with contextlib.suppress(sqlite3.Error), self._transaction():
            self._insert_activity(rows, kept)

    def _insert_activity(self, rows: Sequence[Mapping[str, Any]], kept: int) -> None:
        for row in rows:
            self.writes += ACTIVITY.insert(self._db, {k: row[k] for k in ACTIVITY.names[1:]})
        self._db.execute(
            "DELETE FROM activity WHERE seq <= (SELECT MAX(seq) FROM activity) - ?", (kept,)
        )

    def recent_activity(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` recent events, oldest first, as the dashboard shows them."""
        rows = ACTIVITY.read(self._db, "ORDER BY seq DESC LIMIT ?", (limit,))
        return [{k: v for k, v in row.items() if k != "seq"} for row in rows][::-1]

    def forget_before(self, cutoff: datetime) -> int:
        """Drop the totals of tickets not updated since `cutoff`, and outcome records older
        than it (the store stays bounded); returns how many tickets' totals went."""
        with self._transaction():
            cursor = self._db.execute(
                "DELETE FROM ticket_totals WHERE updated_at < ?", (cutoff.isoformat(),)
            )
            self._db.execute("DELETE FROM outcomes WHERE at < ?", (cutoff.isoformat(),))
            self.notifications.forget_sent(cutoff)
        return cursor.rowcount

    def ticket_costs(self, since: datetime, limit: int = 20) -> list[tuple[str, float | None, int]]:
        """(identifier, cost or None when unknown, tokens) of the tickets that used the agent
        since `since`, the costliest first."""
        try:
            rows = list(
                TICKET_TOTALS.read(
                    self._db,
                    "WHERE updated_at >= ? ORDER BY cost_usd DESC, total_tokens DESC LIMIT ?",
                    (since.isoformat(), limit),
                )
            )
        except sqlite3.OperationalError:
            return []
        return [
            (v["identifier"], None if v["unpriced_tokens"] else v["cost_usd"], v["total_tokens"])
            for v in rows
        ]

    def outcomes(self, since: datetime) -> list[OutcomeRecord]:
        """Outcome records from `since` on, oldest first (none in a store from before they
        were kept)."""
        try:
            rows = list(OUTCOMES.read(self._db, "WHERE at >= ? ORDER BY id", (since.isoformat(),)))
        except sqlite3.OperationalError:
            return []
        return [record for record in map(outcome_from, rows) if record is not None]

    def _sync(self, table: Table, rows: Mapping[str, Row], *, delete: bool = True) -> None:
        written = self._written.setdefault(table.name, {})
        for name, row in rows.items():
            if written.get(name) != row:
                self._db.execute(table.upsert, row)
                written[name] = row
                self.writes += 1
        if delete:
            for name in [n for n in written if n not in rows]:
                self._db.execute(f"DELETE FROM {table.name} WHERE {table.key} = ?", (name,))
                del written[name]
                self.writes += 1

    def _rows_on_disk(self) -> dict[str, dict[str, Row]]:
        return {
            table.name: {
                str(table.values(row)[table.key]): row for row in self._db.execute(table.select)
            }
            for table in MIRRORED
        }

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            # Nothing of it reached the file (a failed COMMIT may have rolled back already).
            self._written_stale = True
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise


def _user_version(db: sqlite3.Connection) -> int:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    return int(version)


def _migrate(db: sqlite3.Connection, migration: Migration) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _statements(migration.sql):
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {int(migration.version)}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _statements(sql: str) -> Iterable[str]:
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]


def _move_aside(path: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, Path(f"{target}{suffix}"))
    return target

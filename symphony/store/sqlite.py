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
import json
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from symphony.base.errors import SymphonyError
from symphony.base.issue import Issue
from symphony.base.times import parse_instant
from symphony.core.costs import Spend
from symphony.core.footprint import Footprint
from symphony.core.notifications import Delivery
from symphony.core.outcomes import OutcomeRecord
from symphony.core.stage_outcomes import TransitionPlan
from symphony.core.state import (
    PullRecord,
    ReviewRequest,
    RunLedger,
    SchedulerState,
    TicketTotals,
    Totals,
)
from symphony.store.codec import (
    Row,
    issue_from_json,
    issue_to_json,
    ledger_from_json,
    ledger_to_json,
    plan_from_json,
    plan_to_json,
    pull_from_json,
    pull_to_json,
    review_from_json,
    review_to_json,
    ticket_from_row,
    time_or,
)
from symphony.store.notifications import NotificationOutbox
from symphony.store.schema import MIGRATIONS, SCHEMA_VERSION, Migration

STORE_NEWER = "store_newer_schema"
STORE_UNUSABLE = "store_unusable"


class StoreError(SymphonyError):
    """The store cannot be used as it is (a newer schema, an unwritable folder)."""


@dataclass(frozen=True, slots=True)
class RunRow:
    issue_id: str
    identifier: str
    attempt: int | None
    stage: str | None
    pgid: int | None
    thread_id: str | None
    session_id: str | None
    started_at: datetime
    turn_count: int
    last_message: str | None
    tokens: tuple[int, int, int, int]
    """input, output, total, cached input."""
    issue: Issue
    model: str | None = None
    host: str = "local"
    remote_pgid: int | None = None


@dataclass(frozen=True, slots=True)
class RetryRow:
    issue_id: str
    identifier: str
    attempt: int
    due_at: datetime
    kind: str
    error: str | None
    url: str | None
    resume_thread_id: str | None
    last_message: str | None
    resume_tokens: tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class TransitionRow:
    issue_id: str
    key: str
    issue: Issue
    plan: TransitionPlan
    turns_used: int
    attempts: int
    due_at: datetime
    error: str | None


@dataclass(slots=True)
class Saved:
    """Everything the last daemon saved, as read back."""

    runs: list[RunRow] = field(default_factory=list)
    retries: list[RetryRow] = field(default_factory=list)
    stage_progress: dict[str, tuple[str, int, datetime | None]] = field(default_factory=dict)
    transitions: list[TransitionRow] = field(default_factory=list)
    kept_workspaces: dict[str, str] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)
    ticket_totals: dict[str, TicketTotals] = field(default_factory=dict)
    totals: Totals = field(default_factory=Totals)
    instances: list[str] = field(default_factory=list)
    transition_seq: int = 0
    handed_off: dict[str, tuple[str, ...]] = field(default_factory=dict)
    daily_costs: dict[str, Spend] = field(default_factory=dict)
    model_costs: dict[str, Spend] = field(default_factory=dict)
    footprints: dict[str, Footprint] = field(default_factory=dict)
    workspace_hosts: dict[str, str] = field(default_factory=dict)
    pull_requests: dict[str, PullRecord] = field(default_factory=dict)
    reviews: dict[str, ReviewRequest] = field(default_factory=dict)
    ledgers: dict[str, RunLedger] = field(default_factory=dict)
    held: dict[str, tuple[str, datetime | None]] = field(default_factory=dict)
    queued_moves: dict[str, tuple[Issue, TransitionPlan]] = field(default_factory=dict)


class Store:
    """One SQLite file. Not thread-safe: the orchestrator's loop is its only user."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        # What the file holds now, per table: a save writes only the difference.
        self._written: dict[str, dict[str, Row]] = {}
        self._written_stale = False
        """A save failed midway: `_written` may claim rows the file does not have."""
        self._walls: dict[float, str] = {}
        self._issues: dict[str, tuple[Issue, str]] = {}
        self._ledgers: dict[str, str] = {}
        self.writes = 0
        """Rows written or deleted since the store was opened (for benchmarks)."""
        self.notifications = NotificationOutbox(connection)

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
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise StoreError(STORE_UNUSABLE, f"{path} cannot be read: {exc}") from None
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(
                STORE_NEWER, f"{path} was written by a newer symphony (schema {version})"
            )
        return cls(db, path)

    @classmethod
    def _open(cls, path: Path, migrations: Sequence[Migration]) -> Store:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
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
            check = db.execute("PRAGMA quick_check").fetchone()[0]
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
        previous = [row[0] for row in self._db.execute("SELECT id FROM instances ORDER BY rowid")]
        with self._transaction():
            self._db.execute(
                "INSERT INTO instances (id, pid, started_at) VALUES (?, ?, ?)",
                (instance_id, pid, at.isoformat()),
            )
            # The last few are enough to find what an old daemon left running.
            self._db.execute(
                "DELETE FROM instances WHERE rowid NOT IN "
                "(SELECT rowid FROM instances ORDER BY rowid DESC LIMIT 20)"
            )
        return previous

    # Loading

    def load(self, wall_now: datetime) -> Saved:
        saved = Saved()
        db = self._db
        for row in db.execute("SELECT * FROM runs"):
            saved.runs.append(
                RunRow(
                    row[0], row[1], row[2], row[3], row[4], row[5], row[6],
                    time_or(row[7], wall_now), row[8], row[9],
                    (row[10], row[11], row[12], row[14]), issue_from_json(row[13]), row[15],
                    row[16], row[17],
                )
            )  # fmt: skip
        for row in db.execute("SELECT * FROM retries"):
            saved.retries.append(
                RetryRow(
                    row[0], row[1], row[2], time_or(row[3], wall_now), row[4], row[5], row[6],
                    row[7], row[8], (row[9], row[10], row[11], row[12]),
                )
            )  # fmt: skip
        for issue_id, stage, turns, entered in db.execute(
            "SELECT issue_id, stage, turns, entered_at FROM stage_progress"
        ):
            saved.stage_progress[issue_id] = (stage, turns, parse_instant(entered))
        for issue_id, states in db.execute("SELECT issue_id, states FROM handed_off"):
            with contextlib.suppress(ValueError, TypeError):
                saved.handed_off[issue_id] = tuple(str(s) for s in json.loads(states))
        for row in db.execute("SELECT * FROM transitions"):
            saved.transitions.append(
                TransitionRow(
                    row[0], row[1], issue_from_json(row[2]), plan_from_json(row[3]),
                    row[4], row[5], time_or(row[6], wall_now), row[7],
                )
            )  # fmt: skip
        saved.kept_workspaces = dict(db.execute("SELECT * FROM kept_workspaces"))
        saved.workspace_hosts = dict(db.execute("SELECT issue_id, host FROM workspace_hosts"))
        for issue_id, record in db.execute("SELECT issue_id, record FROM pull_requests"):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                saved.pull_requests[issue_id] = pull_from_json(record)
        for issue_id, request in db.execute("SELECT issue_id, request FROM reviews"):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                saved.reviews[issue_id] = review_from_json(request)
        for issue_id, identifier, ledger in db.execute(
            "SELECT issue_id, identifier, ledger FROM run_ledgers"
        ):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                saved.ledgers[issue_id] = ledger_from_json(identifier, ledger)
        for issue_id, state_name, updated in db.execute(
            "SELECT issue_id, state, updated_at FROM held"
        ):
            saved.held[issue_id] = (state_name, parse_instant(updated))
        for issue_id, issue, plan in db.execute("SELECT issue_id, issue, plan FROM queued_moves"):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                saved.queued_moves[issue_id] = (issue_from_json(issue), plan_from_json(plan))
        for issue_id, identifier, planned, changed in db.execute(
            "SELECT issue_id, identifier, planned, changed FROM footprints"
        ):
            with contextlib.suppress(ValueError, TypeError):
                saved.footprints[issue_id] = Footprint(
                    identifier, frozenset(json.loads(planned)), frozenset(json.loads(changed))
                )
        saved.completed = {row[0] for row in db.execute("SELECT issue_id FROM completed")}
        for row in db.execute(
            "SELECT issue_id, identifier, input_tokens, output_tokens, total_tokens, seconds, "
            "cached_input_tokens, cost_usd, unpriced_tokens, cost_by_stage, budget "
            "FROM ticket_totals"
        ):
            saved.ticket_totals[row[0]] = ticket_from_row(row)
        for table, into in (("daily_costs", saved.daily_costs), ("model_costs", saved.model_costs)):
            for key, spent, tokens, unpriced in db.execute(f"SELECT * FROM {table}"):
                into[key] = Spend(spent, tokens, unpriced)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        if "totals" in meta:
            saved.totals = Totals(**json.loads(meta["totals"]))
        saved.transition_seq = int(meta.get("transition_seq", "0"))
        saved.instances = [row[0] for row in db.execute("SELECT id FROM instances ORDER BY rowid")]
        # What the file holds is what the next save compares against.
        self._written = {table: rows for table, rows in self._rows_on_disk().items()}
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
    ) -> None:
        """Write what changed since the last save, in one transaction. `keep_runs` leaves the
        saved runs as they are (a graceful stop, so the next daemon continues them);
        `deliveries` are queued in the same transaction (`symphony.store.notifications`)."""

        def wall(at: float) -> str:
            # Computed once per due time: converting again each pass would jitter by
            # microseconds (the two clocks are read apart) and rewrite every row every pass.
            text = self._walls.get(at)
            if text is None:
                text = self._walls[at] = (wall_now + timedelta(seconds=at - mono_now)).isoformat()
            return text

        def ledger_json(issue_id: str, ledger: RunLedger) -> str:
            # Encoded again only when the core says it changed: there is one per ticket.
            text = self._ledgers.get(issue_id)
            if text is None or issue_id in state.changed_ledgers:
                text = self._ledgers[issue_id] = ledger_to_json(ledger)
            return text

        def issue_json(issue: Issue) -> str:
            # An entry keeps its issue object until a refresh replaces it: encode it once.
            known = self._issues.get(issue.id)
            if known is None or known[0] is not issue:
                known = self._issues[issue.id] = (issue, issue_to_json(issue))
            return known[1]

        tables: dict[str, dict[str, Row]] = {
            "runs": {
                issue_id: (
                    issue_id, e.identifier, e.attempt, e.stage, e.pid, e.thread_id,
                    e.session_id, e.started_at_wall.isoformat(), e.turn_count, e.last_message,
                    e.input_tokens, e.output_tokens, e.total_tokens, issue_json(e.issue),
                    e.cached_input_tokens, e.model, e.host, e.remote_pgid,
                )
                for issue_id, e in state.running.items()
            },
            "retries": {
                issue_id: (
                    issue_id, r.identifier, r.attempt, wall(r.due_at), r.kind.value, r.error,
                    r.url, r.resume_thread_id, r.last_message, *r.resume_tokens,
                )
                for issue_id, r in state.retry_attempts.items()
            },
            "stage_progress": {
                issue_id: (
                    issue_id, p.stage, p.turns,
                    p.entered_at.isoformat() if p.entered_at is not None else None,
                )
                for issue_id, p in state.stage_progress.items()
            },
            "handed_off": {
                issue_id: (issue_id, json.dumps(list(states)))
                for issue_id, states in state.handed_off.items()
            },
            "transitions": {
                issue_id: (
                    issue_id, t.key, issue_json(t.issue), plan_to_json(t.plan),
                    t.turns_used, t.attempts, wall(t.due_at), t.error,
                )
                for issue_id, t in state.transitions.items()
            },
            "kept_workspaces": {k: (k, v) for k, v in state.kept_workspaces.items()},
            "workspace_hosts": {k: (k, v) for k, v in state.workspace_hosts.items()},
            "pull_requests": {
                k: (k, pull_to_json(r)) for k, r in state.pull_requests.items()
            },
            "reviews": {k: (k, review_to_json(r)) for k, r in state.reviews.items()},
            "run_ledgers": {
                k: (k, ledger.identifier, ledger_json(k, ledger))
                for k, ledger in state.ledgers.items()
            },
            "held": {
                k: (k, where, updated.isoformat() if updated is not None else None)
                for k, (where, updated) in state.held.items()
            },
            "queued_moves": {
                k: (k, issue_to_json(issue), plan_to_json(plan))
                for k, (issue, plan) in state.queued_moves.items()
            },
            "footprints": {
                issue_id: (
                    issue_id, f.identifier, json.dumps(sorted(f.planned)),
                    json.dumps(sorted(f.changed)),
                )
                for issue_id, f in state.footprints.items()
            },
            "daily_costs": {
                day: (day, round(c.usd, 9), c.tokens, c.unpriced_tokens)
                for day, c in state.daily_costs.items()
            },
            "model_costs": {
                model: (model, round(c.usd, 9), c.tokens, c.unpriced_tokens)
                for model, c in state.model_costs.items()
            },
        }  # fmt: skip
        if len(state.completed) != len(self._written.get("completed", ())):
            # Only ever added to, and after weeks it is every ticket ever finished: its size
            # says whether anything changed.
            tables["completed"] = {k: (k,) for k in state.completed}
        due = {r.due_at for r in state.retry_attempts.values()}
        due.update(t.due_at for t in state.transitions.values())
        self._walls = {at: text for at, text in self._walls.items() if at in due}
        held = state.running.keys() | state.transitions.keys()
        self._issues = {k: v for k, v in self._issues.items() if k in held}
        self._ledgers = {k: v for k, v in self._ledgers.items() if k in state.ledgers}
        state.changed_ledgers.clear()
        changed_totals, outcomes = state.changed_totals, state.new_outcomes
        if keep_runs:
            del tables["runs"]
        if self._written_stale:
            self._written = self._rows_on_disk()
            self._written_stale = False
        with self._transaction():
            for table, rows in tables.items():
                self._sync(table, rows)
            for issue_id in changed_totals:
                totals = state.ticket_totals.get(issue_id)
                if totals is None:
                    continue
                self._db.execute(
                    "INSERT OR REPLACE INTO ticket_totals (issue_id, identifier, input_tokens, "
                    "output_tokens, total_tokens, seconds, updated_at, cached_input_tokens, "
                    "cost_usd, unpriced_tokens, cost_by_stage, budget) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        issue_id, totals.identifier, totals.input_tokens, totals.output_tokens,
                        totals.total_tokens, round(totals.seconds, 3), wall_now.isoformat(),
                        totals.cached_input_tokens, totals.cost_usd, totals.unpriced_tokens,
                        json.dumps(totals.cost_by_stage, sort_keys=True),
                        json.dumps(
                            {
                                "base_usd": totals.budget_base_usd,
                                "window": totals.budget_window,
                                "warned": totals.budget_warned,
                                "exceeded": totals.budget_exceeded,
                            }
                        ),
                    ),
                )  # fmt: skip
                self.writes += 1
            for record in outcomes:
                self._db.execute(
                    "INSERT INTO outcomes (at, kind, issue_id, identifier, data) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        record.at.isoformat(), record.kind, record.issue_id, record.identifier,
                        json.dumps(dict(record.data), sort_keys=True),
                    ),
                )  # fmt: skip
                self.writes += 1
            self.writes += self.notifications.queue(deliveries, wall_now)
            fleet = state.totals
            self._sync(
                "meta",
                {
                    "totals": (
                        "totals",
                        json.dumps(
                            {
                                "input_tokens": fleet.input_tokens,
                                "output_tokens": fleet.output_tokens,
                                "total_tokens": fleet.total_tokens,
                                "ended_seconds": round(fleet.ended_seconds, 3),
                            }
                        ),
                    ),
                    "transition_seq": ("transition_seq", str(state.transition_seq)),
                },
                delete=False,
            )
        changed_totals.clear()
        outcomes.clear()

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
            rows = self._db.execute(
                "SELECT identifier, cost_usd, unpriced_tokens, total_tokens FROM ticket_totals "
                "WHERE updated_at >= ? ORDER BY cost_usd DESC, total_tokens DESC LIMIT ?",
                (since.isoformat(), limit),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        return [(name, None if unpriced else cost, tokens) for name, cost, unpriced, tokens in rows]

    def outcomes(self, since: datetime) -> list[OutcomeRecord]:
        """Outcome records from `since` on, oldest first (none in a store from before they
        were kept)."""
        try:
            rows = self._db.execute(
                "SELECT at, kind, issue_id, identifier, data FROM outcomes WHERE at >= ? "
                "ORDER BY id",
                (since.isoformat(),),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        records = []
        for at, kind, issue_id, identifier, data in rows:
            moment = parse_instant(at)
            if moment is None:
                continue
            with contextlib.suppress(ValueError, TypeError):
                records.append(OutcomeRecord(moment, kind, issue_id, identifier, json.loads(data)))
        return records

    def _sync(self, table: str, rows: Mapping[str, Row], *, delete: bool = True) -> None:
        written = self._written.setdefault(table, {})
        key = _KEYS[table]
        for name, row in rows.items():
            if written.get(name) != row:
                marks = ", ".join("?" * len(row))
                self._db.execute(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", row)
                written[name] = row
                self.writes += 1
        if delete:
            for name in [n for n in written if n not in rows]:
                self._db.execute(f"DELETE FROM {table} WHERE {key} = ?", (name,))
                del written[name]
                self.writes += 1

    def _rows_on_disk(self) -> dict[str, dict[str, Row]]:
        rows: dict[str, dict[str, Row]] = {}
        for table in _KEYS:
            rows[table] = {
                str(row[0]): tuple(row) for row in self._db.execute(f"SELECT * FROM {table}")
            }
        return rows

    @contextlib.contextmanager
    def _transaction(self) -> Any:
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


_KEYS = {
    "runs": "issue_id",
    "retries": "issue_id",
    "stage_progress": "issue_id",
    "handed_off": "issue_id",
    "daily_costs": "day",
    "model_costs": "model",
    "transitions": "issue_id",
    "kept_workspaces": "issue_id",
    "footprints": "issue_id",
    "workspace_hosts": "issue_id",
    "pull_requests": "issue_id",
    "reviews": "issue_id",
    "run_ledgers": "issue_id",
    "held": "issue_id",
    "queued_moves": "issue_id",
    "completed": "issue_id",
    "meta": "key",
}


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


# Values as JSON

"""The store's tables, each declared once, and the migrations derived from them.

A `Table` names its columns in the order they are on disk; the SQL that creates it, the rows
the store writes and the values it reads back all come from that declaration, so adding a
column is one clause in its declaration, marked with the version that adds it.

`PRAGMA user_version` is the version a file is at; migration N creates the tables of version N
and adds the columns of version N to older tables, in one transaction (ALTER TABLE appends:
the on-disk order is the declared order). A file at a version above the newest here was written
by a newer symphony and is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Row = tuple[Any, ...]
"""One row as written, its values in the table's column order (made by `Table.row`)."""
Values = Mapping[str, Any]
"""One row as read, by column name."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table: its name, its SQL, and the version that added it."""

    name: str
    sql: str
    """Its type and constraints as SQLite takes them."""
    since: int | None = None
    """The version that added it to its table later (None: it came with the table). Such a
    column needs a DEFAULT when NOT NULL: the rows already there get it."""


@dataclass(frozen=True, slots=True, eq=False)
class Table:
    """One table. Its first column is the key a mirrored table's rows are found by. Compared
    by identity: each table is declared once."""

    name: str
    since: int
    columns: tuple[Column, ...]
    constraints: tuple[str, ...] = ()
    indexes: tuple[tuple[str, str], ...] = ()
    """(name, columns) of the indexes created with it."""
    names: tuple[str, ...] = field(init=False)
    upsert: str = field(init=False)
    """Writes one whole `row`, replacing the row with its key."""
    select: str = field(init=False)
    _named: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = tuple(c.name for c in self.columns)
        set_ = object.__setattr__  # frozen: the derived SQL is fixed at declaration
        set_(self, "names", names)
        set_(self, "upsert", _insert("INSERT OR REPLACE", self.name, names))
        set_(self, "select", f"SELECT {', '.join(names)} FROM {self.name}")
        set_(self, "_named", frozenset(names))

    @property
    def key(self) -> str:
        return self.names[0]

    def row(self, **values: Any) -> Row:
        """The row of `values`, which name every column and nothing else."""
        if values.keys() != self._named:
            raise ValueError(f"{self.name} has columns {self.names}, not {tuple(values)}")
        return tuple(values[name] for name in self.names)

    def values(self, row: Row) -> Values:
        return dict(zip(self.names, row, strict=True))

    def read(self, db: sqlite3.Connection, tail: str = "", args: Row = ()) -> Iterator[Values]:
        """Its rows by column name; `tail` filters and orders (`WHERE ... ORDER BY ...`)."""
        for row in db.execute(f"{self.select} {tail}", args):
            yield self.values(row)

    def insert(self, db: sqlite3.Connection, values: Values, verb: str = "INSERT") -> int:
        """Write one row of the columns `values` names (the rest take their defaults);
        returns how many rows it wrote."""
        unknown = values.keys() - self._named
        if unknown:
            raise ValueError(f"{self.name} has no columns {sorted(unknown)}")
        sql = _insert(verb, self.name, tuple(values))
        return db.execute(sql, tuple(values.values())).rowcount

    def migration(self, version: int) -> list[str]:
        """What migration `version` does to this table."""
        if version == self.since:
            parts = [f"{c.name} {c.sql}" for c in self.columns if _with_table(c, version)]
            body = ", ".join([*parts, *self.constraints])
            return [
                f"CREATE TABLE {self.name} ({body})",
                *(f"CREATE INDEX {n} ON {self.name} ({on})" for n, on in self.indexes),
            ]
        if version > self.since:
            return [
                f"ALTER TABLE {self.name} ADD COLUMN {c.name} {c.sql}"
                for c in self.columns
                if c.since == version
            ]
        return []


def _with_table(column: Column, version: int) -> bool:
    return column.since is None or column.since <= version


def _insert(verb: str, table: str, names: tuple[str, ...]) -> str:
    marks = ", ".join("?" * len(names))
    return f"{verb} INTO {table} ({', '.join(names)}) VALUES ({marks})"


def _columns(sql: str, since: int | None = None) -> tuple[Column, ...]:
    """Columns from `name TYPE ...` clauses separated by commas (no commas inside a clause)."""
    columns = []
    for clause in sql.split(","):
        name, _, kind = clause.strip().partition(" ")
        columns.append(Column(name, kind, since))
    return tuple(columns)


META = Table("meta", 1, _columns("key TEXT PRIMARY KEY, value TEXT NOT NULL"))
# Every daemon that used this store: how a restart finds the agents an old one left.
INSTANCES = Table(
    "instances", 1, _columns("id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at TEXT NOT NULL")
)
# What was running: the agent's process group, thread and stage, for the restart. Version 3
# adds money (cached input is priced apart; the model of the run); version 5 runs on SSH hosts
# (where, and the agent's process group there, so a restart stops what a killed daemon left).
RUNS = Table(
    "runs",
    1,
    _columns(
        "issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, attempt INTEGER, stage TEXT, "
        "pgid INTEGER, thread_id TEXT, session_id TEXT, started_at TEXT NOT NULL, "
        "turn_count INTEGER NOT NULL, last_message TEXT, input_tokens INTEGER NOT NULL, "
        "output_tokens INTEGER NOT NULL, total_tokens INTEGER NOT NULL, issue TEXT NOT NULL"
    )
    + _columns("cached_input_tokens INTEGER NOT NULL DEFAULT 0, model TEXT", since=3)
    + _columns("host TEXT NOT NULL DEFAULT 'local', remote_pgid INTEGER", since=5),
)
# The retry queue, with wall-clock due times: a restart keeps each backoff.
RETRIES = Table(
    "retries",
    1,
    _columns(
        "issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, attempt INTEGER NOT NULL, "
        "due_at TEXT NOT NULL, kind TEXT NOT NULL, error TEXT, url TEXT, "
        "resume_thread_id TEXT, last_message TEXT, resume_input INTEGER NOT NULL, "
        "resume_output INTEGER NOT NULL, resume_total INTEGER NOT NULL"
    )
    + _columns("resume_cached INTEGER NOT NULL DEFAULT 0", since=3),
)
# When a ticket entered its stage (version 2): the time from entry to hand-off.
STAGE_PROGRESS = Table(
    "stage_progress",
    1,
    _columns("issue_id TEXT PRIMARY KEY, stage TEXT NOT NULL, turns INTEGER NOT NULL")
    + _columns("entered_at TEXT", since=2),
)
# The outbox: stage transitions decided but not yet confirmed on the tracker.
TRANSITIONS = Table(
    "transitions",
    1,
    _columns(
        "issue_id TEXT PRIMARY KEY, key TEXT NOT NULL, issue TEXT NOT NULL, plan TEXT NOT NULL, "
        "turns_used INTEGER NOT NULL, attempts INTEGER NOT NULL, due_at TEXT NOT NULL, "
        "error TEXT"
    ),
)
KEPT_WORKSPACES = Table(
    "kept_workspaces", 1, _columns("issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL")
)
COMPLETED = Table("completed", 1, _columns("issue_id TEXT PRIMARY KEY"))
# Tokens and agent time per ticket across all its attempts and restarts; from version 3 its
# cost, with its budget window.
TICKET_TOTALS = Table(
    "ticket_totals",
    1,
    _columns(
        "issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, input_tokens INTEGER NOT NULL, "
        "output_tokens INTEGER NOT NULL, total_tokens INTEGER NOT NULL, seconds REAL NOT NULL, "
        "updated_at TEXT NOT NULL"
    )
    + _columns(
        "cached_input_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, "
        "unpriced_tokens INTEGER NOT NULL DEFAULT 0, cost_by_stage TEXT NOT NULL DEFAULT '{}', "
        "budget TEXT NOT NULL DEFAULT '{}'",
        since=3,
    ),
)
# The review states the daemon handed each ticket to (a JSON list), for rework.
HANDED_OFF = Table("handed_off", 2, _columns("issue_id TEXT PRIMARY KEY, states TEXT NOT NULL"))
# Outcome records (hand-offs, rework, escalations, gates, closed): the metrics.
OUTCOMES = Table(
    "outcomes",
    2,
    _columns(
        "id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, kind TEXT NOT NULL, "
        "issue_id TEXT NOT NULL, identifier TEXT NOT NULL, data TEXT NOT NULL"
    ),
    indexes=(("outcomes_at", "at"),),
)
# The fleet's spend per day and per model.
_SPEND = "usd REAL NOT NULL, tokens INTEGER NOT NULL, unpriced_tokens INTEGER NOT NULL"
DAILY_COSTS = Table("daily_costs", 3, _columns(f"day TEXT PRIMARY KEY, {_SPEND}"))
MODEL_COSTS = Table("model_costs", 3, _columns(f"model TEXT PRIMARY KEY, {_SPEND}"))
# The files each open ticket's plan names and its branch changed (JSON lists), so a restarted
# daemon still holds overlapping tickets apart (agent.overlap).
FOOTPRINTS = Table(
    "footprints",
    4,
    _columns(
        "issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, planned TEXT NOT NULL, "
        "changed TEXT NOT NULL"
    ),
)
# Which host each ticket's workspace is on, for its retries and its removal.
WORKSPACE_HOSTS = Table(
    "workspace_hosts", 5, _columns("issue_id TEXT PRIMARY KEY, host TEXT NOT NULL")
)
# The pull requests the daemon published and follows (JSON), and what each ticket's next run
# is asked to address (a review, failed checks, a conflict).
PULL_REQUESTS = Table(
    "pull_requests", 6, _columns("issue_id TEXT PRIMARY KEY, record TEXT NOT NULL")
)
REVIEWS = Table("reviews", 6, _columns("issue_id TEXT PRIMARY KEY, request TEXT NOT NULL"))
# The notification outbox: one row per channel and notice (event:ticket:revision), queued in
# the transaction that saved what it tells, sent after; a sent row stays a while so the same
# notice is never queued again. Times are Unix seconds.
NOTIFICATIONS = Table(
    "notifications",
    7,
    _columns(
        "channel TEXT NOT NULL, key TEXT NOT NULL, notice TEXT NOT NULL, "
        "created_at REAL NOT NULL, due_at REAL NOT NULL, attempts INTEGER NOT NULL, "
        "error TEXT, sent_at REAL"
    ),
    constraints=("PRIMARY KEY (channel, key)",),
    indexes=(("notifications_due", "sent_at, due_at"),),
)
# Every ticket's runs by kind, their recent starts and why the daemon stopped it (JSON): the
# caps and the runaway guard hold across restarts and kill -9.
RUN_LEDGERS = Table(
    "run_ledgers",
    8,
    _columns("issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, ledger TEXT NOT NULL"),
)
# Tickets a person stopped (their state and last update then), and a person's move that waits
# for the daemon's step under way: a restart never undoes a stop.
HELD = Table("held", 8, _columns("issue_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at TEXT"))
QUEUED_MOVES = Table(
    "queued_moves",
    8,
    _columns("issue_id TEXT PRIMARY KEY, issue TEXT NOT NULL, plan TEXT NOT NULL"),
)
# Agent kinds their provider paused until a reset (JSON): a restart keeps the pause and its time.
AGENT_PAUSES = Table(
    "agent_pauses", 9, _columns("agent_kind TEXT PRIMARY KEY, pause TEXT NOT NULL")
)
# The dashboard's recent events (version 10), newest last: a restart keeps what happened.
ACTIVITY = Table(
    "activity",
    10,
    _columns(
        "seq INTEGER PRIMARY KEY, at TEXT NOT NULL, event TEXT NOT NULL, message TEXT NOT NULL, "
        "issue_identifier TEXT, level TEXT NOT NULL"
    ),
)

TABLES: tuple[Table, ...] = (
    META, INSTANCES, RUNS, RETRIES, STAGE_PROGRESS, TRANSITIONS, KEPT_WORKSPACES, COMPLETED,
    TICKET_TOTALS, HANDED_OFF, OUTCOMES, DAILY_COSTS, MODEL_COSTS, FOOTPRINTS, WORKSPACE_HOSTS,
    PULL_REQUESTS, REVIEWS, NOTIFICATIONS, RUN_LEDGERS, HELD, QUEUED_MOVES, AGENT_PAUSES,
    ACTIVITY,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Migration:
    """The SQL that brings a store file from the version before `version` to it."""

    version: int
    sql: str


def _migrations(tables: tuple[Table, ...]) -> tuple[Migration, ...]:
    newest = max(
        max([t.since, *(c.since for c in t.columns if c.since is not None)]) for t in tables
    )
    return tuple(
        Migration(v, ";\n".join(s for t in tables for s in t.migration(v)))
        for v in range(1, newest + 1)
    )


MIGRATIONS: tuple[Migration, ...] = _migrations(TABLES)

SCHEMA_VERSION = MIGRATIONS[-1].version

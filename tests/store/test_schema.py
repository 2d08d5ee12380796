"""The tables' declarations: the migrations derived from them build the very files the
hand-written migrations of versions 1 to 8 built, a file of any older version migrates and
loads, and a row names exactly its table's columns."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from symphony.store import Store
from symphony.store.codec import issue_from_json, issue_to_json
from symphony.store.schema import MIGRATIONS, RUNS, SCHEMA_VERSION, Column, Migration, Table
from tests.factories import make_issue

# The migrations as they were written by hand before the tables were declared: files in use
# were built by these, so the derived migrations must build the same tables.
WRITTEN: tuple[Migration, ...] = (
    Migration(1, """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE instances (
            id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at TEXT NOT NULL
        );
        CREATE TABLE runs (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, attempt INTEGER,
            stage TEXT, pgid INTEGER, thread_id TEXT, session_id TEXT,
            started_at TEXT NOT NULL, turn_count INTEGER NOT NULL, last_message TEXT,
            input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
            total_tokens INTEGER NOT NULL, issue TEXT NOT NULL
        );
        CREATE TABLE retries (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, attempt INTEGER NOT NULL,
            due_at TEXT NOT NULL, kind TEXT NOT NULL, error TEXT, url TEXT,
            resume_thread_id TEXT, last_message TEXT, resume_input INTEGER NOT NULL,
            resume_output INTEGER NOT NULL, resume_total INTEGER NOT NULL
        );
        CREATE TABLE stage_progress (
            issue_id TEXT PRIMARY KEY, stage TEXT NOT NULL, turns INTEGER NOT NULL
        );
        CREATE TABLE transitions (
            issue_id TEXT PRIMARY KEY, key TEXT NOT NULL, issue TEXT NOT NULL,
            plan TEXT NOT NULL, turns_used INTEGER NOT NULL, attempts INTEGER NOT NULL,
            due_at TEXT NOT NULL, error TEXT
        );
        CREATE TABLE kept_workspaces (issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL);
        CREATE TABLE completed (issue_id TEXT PRIMARY KEY);
        CREATE TABLE ticket_totals (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL,
            input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
            total_tokens INTEGER NOT NULL, seconds REAL NOT NULL, updated_at TEXT NOT NULL
        );
    """),
    Migration(2, """
        ALTER TABLE stage_progress ADD COLUMN entered_at TEXT;
        CREATE TABLE handed_off (issue_id TEXT PRIMARY KEY, states TEXT NOT NULL);
        CREATE TABLE outcomes (
            id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, kind TEXT NOT NULL,
            issue_id TEXT NOT NULL, identifier TEXT NOT NULL, data TEXT NOT NULL
        );
        CREATE INDEX outcomes_at ON outcomes (at);
    """),
    Migration(3, """
        ALTER TABLE runs ADD COLUMN cached_input_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE runs ADD COLUMN model TEXT;
        ALTER TABLE retries ADD COLUMN resume_cached INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ticket_totals ADD COLUMN cached_input_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ticket_totals ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;
        ALTER TABLE ticket_totals ADD COLUMN unpriced_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ticket_totals ADD COLUMN cost_by_stage TEXT NOT NULL DEFAULT '{}';
        ALTER TABLE ticket_totals ADD COLUMN budget TEXT NOT NULL DEFAULT '{}';
        CREATE TABLE daily_costs (
            day TEXT PRIMARY KEY, usd REAL NOT NULL, tokens INTEGER NOT NULL,
            unpriced_tokens INTEGER NOT NULL
        );
        CREATE TABLE model_costs (
            model TEXT PRIMARY KEY, usd REAL NOT NULL, tokens INTEGER NOT NULL,
            unpriced_tokens INTEGER NOT NULL
        );
    """),
    Migration(4, """
        CREATE TABLE footprints (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, planned TEXT NOT NULL,
            changed TEXT NOT NULL
        );
    """),
    Migration(5, """
        ALTER TABLE runs ADD COLUMN host TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE runs ADD COLUMN remote_pgid INTEGER;
        CREATE TABLE workspace_hosts (issue_id TEXT PRIMARY KEY, host TEXT NOT NULL);
    """),
    Migration(6, """
        CREATE TABLE pull_requests (issue_id TEXT PRIMARY KEY, record TEXT NOT NULL);
        CREATE TABLE reviews (issue_id TEXT PRIMARY KEY, request TEXT NOT NULL);
    """),
    Migration(7, """
        CREATE TABLE notifications (
            channel TEXT NOT NULL, key TEXT NOT NULL, notice TEXT NOT NULL,
            created_at REAL NOT NULL, due_at REAL NOT NULL, attempts INTEGER NOT NULL,
            error TEXT, sent_at REAL, PRIMARY KEY (channel, key)
        );
        CREATE INDEX notifications_due ON notifications (sent_at, due_at);
    """),
    Migration(8, """
        CREATE TABLE run_ledgers (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, ledger TEXT NOT NULL
        );
        CREATE TABLE held (issue_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at TEXT);
        CREATE TABLE queued_moves (
            issue_id TEXT PRIMARY KEY, issue TEXT NOT NULL, plan TEXT NOT NULL
        );
    """),
)  # fmt: skip


def built(migrations: tuple[Migration, ...], up_to: int) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    for migration in migrations:
        if migration.version <= up_to:
            db.executescript(migration.sql)
    return db


def shape(db: sqlite3.Connection) -> dict[str, Any]:
    """Every table's columns (type, NOT NULL, default, key) and every index, as SQLite sees
    them: what a file holds apart from the text of its CREATE statements."""
    found: dict[str, Any] = {}
    for kind, name in db.execute("SELECT type, name FROM sqlite_master ORDER BY name"):
        pragma = "table_xinfo" if kind == "table" else "index_xinfo"
        found[name] = (kind, db.execute(f"PRAGMA {pragma}({name})").fetchall())
        if kind == "table":
            found[f"{name} indexes"] = db.execute(f"PRAGMA index_list({name})").fetchall()
    return found


@pytest.mark.parametrize("version", range(1, WRITTEN[-1].version + 1))
def test_derived_migrations_build_the_tables_the_written_ones_built(version: int) -> None:
    assert shape(built(MIGRATIONS, version)) == shape(built(WRITTEN, version))


@pytest.mark.parametrize("version", range(1, WRITTEN[-1].version + 1))
def test_a_file_of_any_earlier_version_migrates_to_the_current_tables_and_loads(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    for migration in WRITTEN[:version]:
        db.executescript(migration.sql)
    db.execute(
        "INSERT INTO runs (issue_id, identifier, started_at, turn_count, input_tokens, "
        "output_tokens, total_tokens, issue) VALUES ('id-A-1', 'A-1', 'bad', 1, 2, 3, 5, ?)",
        ('{"id": "id-A-1", "identifier": "A-1", "title": "t", "state": "Todo", '
         '"dispatchable": true}',),
    )  # fmt: skip
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    store, damage = Store.open(path)
    assert damage is None
    assert shape(store._db) == shape(built(MIGRATIONS, SCHEMA_VERSION))  # as a new file
    now = datetime(2026, 12, 1, tzinfo=UTC)
    (run,) = store.load(now).runs
    # Columns added later read as their defaults; a damaged time falls back to now.
    assert (run.identifier, run.tokens, run.host) == ("A-1", (2, 3, 5, 0), "local")
    assert run.model is None and run.started_at == now


def test_a_row_names_every_column_of_its_table_and_nothing_else() -> None:
    table = Table("t", 1, (Column("k", "TEXT PRIMARY KEY"), Column("v", "TEXT")))
    assert table.row(v="x", k="a") == ("a", "x")  # in the table's order, not the caller's
    with pytest.raises(ValueError, match="not"):
        table.row(k="a")
    with pytest.raises(ValueError, match="not"):
        table.row(k="a", v="x", w="y")
    with pytest.raises(ValueError, match="no columns"):
        table.insert(sqlite3.connect(":memory:"), {"k": "a", "w": "y"})
    assert "remote_pgid" in RUNS.names and RUNS.key == "issue_id"


def test_a_column_added_later_is_one_declaration_and_one_migration() -> None:
    table = Table(
        "t", 1, (Column("k", "TEXT PRIMARY KEY"), Column("n", "INTEGER NOT NULL DEFAULT 0", 2))
    )
    assert table.migration(1) == ["CREATE TABLE t (k TEXT PRIMARY KEY)"]
    assert table.migration(2) == ["ALTER TABLE t ADD COLUMN n INTEGER NOT NULL DEFAULT 0"]
    assert table.upsert == "INSERT OR REPLACE INTO t (k, n) VALUES (?, ?)"
    db = built(tuple(Migration(v, ";".join(table.migration(v))) for v in (1, 2)), 2)
    db.execute(table.upsert, table.row(k="a", n=3))
    assert list(table.read(db)) == [{"k": "a", "n": 3}]


def test_an_issue_kept_in_the_store_keeps_who_opened_it() -> None:
    issue = make_issue(description="Fix it.", author="alice")
    assert issue_from_json(issue_to_json(issue)) == issue
    assert issue_from_json(issue_to_json(make_issue())).author is None

"""The store's schema and its migrations, in order. `PRAGMA user_version` is the version a file
is at; each migration takes a file from the version before it to its own, in one transaction.
A file at a version above the newest here was written by a newer symphony and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        -- Every daemon that used this store: how a restart finds the agents an old one left.
        CREATE TABLE instances (
            id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at TEXT NOT NULL
        );
        -- What was running: the agent's process group, thread and stage, for the restart.
        CREATE TABLE runs (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, attempt INTEGER,
            stage TEXT, pgid INTEGER, thread_id TEXT, session_id TEXT,
            started_at TEXT NOT NULL, turn_count INTEGER NOT NULL, last_message TEXT,
            input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
            total_tokens INTEGER NOT NULL, issue TEXT NOT NULL
        );
        -- The retry queue, with wall-clock due times: a restart keeps each backoff.
        CREATE TABLE retries (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, attempt INTEGER NOT NULL,
            due_at TEXT NOT NULL, kind TEXT NOT NULL, error TEXT, url TEXT,
            resume_thread_id TEXT, last_message TEXT, resume_input INTEGER NOT NULL,
            resume_output INTEGER NOT NULL, resume_total INTEGER NOT NULL
        );
        CREATE TABLE stage_progress (
            issue_id TEXT PRIMARY KEY, stage TEXT NOT NULL, turns INTEGER NOT NULL
        );
        -- The outbox: stage transitions decided but not yet confirmed on the tracker.
        CREATE TABLE transitions (
            issue_id TEXT PRIMARY KEY, key TEXT NOT NULL, issue TEXT NOT NULL,
            plan TEXT NOT NULL, turns_used INTEGER NOT NULL, attempts INTEGER NOT NULL,
            due_at TEXT NOT NULL, error TEXT
        );
        CREATE TABLE kept_workspaces (issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL);
        CREATE TABLE completed (issue_id TEXT PRIMARY KEY);
        -- Tokens and agent time per ticket across all its attempts and restarts.
        CREATE TABLE ticket_totals (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL,
            input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
            total_tokens INTEGER NOT NULL, seconds REAL NOT NULL, updated_at TEXT NOT NULL
        );
        """,
    ),
    Migration(
        2,
        """
        -- When a ticket entered its stage: the time from entry to hand-off.
        ALTER TABLE stage_progress ADD COLUMN entered_at TEXT;
        -- The review states the daemon handed each ticket to (a JSON list), for rework.
        CREATE TABLE handed_off (issue_id TEXT PRIMARY KEY, states TEXT NOT NULL);
        -- Outcome records (hand-offs, rework, escalations, gates, closed): the metrics.
        CREATE TABLE outcomes (
            id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, kind TEXT NOT NULL,
            issue_id TEXT NOT NULL, identifier TEXT NOT NULL, data TEXT NOT NULL
        );
        CREATE INDEX outcomes_at ON outcomes (at);
        """,
    ),
    Migration(
        3,
        """
        -- Money: cached input (priced apart), the model of a run, cost per ticket with its
        -- budget window, and the fleet's spend per day and per model.
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
        """,
    ),
    Migration(
        4,
        """
        -- The files each open ticket's plan names and its branch changed (JSON lists), so a
        -- restarted daemon still holds overlapping tickets apart (agent.overlap).
        CREATE TABLE footprints (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, planned TEXT NOT NULL,
            changed TEXT NOT NULL
        );
        """,
    ),
    Migration(
        5,
        """
        -- Runs on SSH worker hosts: where, and the agent's process group there, so a restart
        -- stops what a killed daemon left running on a host; and which host each ticket's
        -- workspace is on, for its retries and its removal.
        ALTER TABLE runs ADD COLUMN host TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE runs ADD COLUMN remote_pgid INTEGER;
        CREATE TABLE workspace_hosts (issue_id TEXT PRIMARY KEY, host TEXT NOT NULL);
        """,
    ),
    Migration(
        6,
        """
        -- The pull requests the daemon published and follows (JSON), and what each ticket's
        -- next run is asked to address (a review, failed checks, a conflict).
        CREATE TABLE pull_requests (issue_id TEXT PRIMARY KEY, record TEXT NOT NULL);
        CREATE TABLE reviews (issue_id TEXT PRIMARY KEY, request TEXT NOT NULL);
        """,
    ),
    Migration(
        7,
        """
        -- The notification outbox: one row per channel and notice (event:ticket:revision),
        -- queued in the transaction that saved what it tells, sent after; a sent row stays a
        -- while so the same notice is never queued again. Times are Unix seconds.
        CREATE TABLE notifications (
            channel TEXT NOT NULL, key TEXT NOT NULL, notice TEXT NOT NULL,
            created_at REAL NOT NULL, due_at REAL NOT NULL, attempts INTEGER NOT NULL,
            error TEXT, sent_at REAL, PRIMARY KEY (channel, key)
        );
        CREATE INDEX notifications_due ON notifications (sent_at, due_at);
        """,
    ),
    Migration(
        8,
        """
        -- Every ticket's runs by kind, their recent starts and why the daemon stopped it
        -- (JSON): the caps and the runaway guard hold across restarts and kill -9.
        CREATE TABLE run_ledgers (
            issue_id TEXT PRIMARY KEY, identifier TEXT NOT NULL, ledger TEXT NOT NULL
        );
        -- Tickets a person stopped (their state and last update then), and a person's move
        -- that waits for the daemon's step under way: a restart never undoes a stop.
        CREATE TABLE held (issue_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at TEXT);
        CREATE TABLE queued_moves (
            issue_id TEXT PRIMARY KEY, issue TEXT NOT NULL, plan TEXT NOT NULL
        );
        """,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version

"""The durable store: what a save keeps, how little it writes, and damaged or newer files."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.base.limits import LimitKind
from symphony.config.stages import StageOutcome
from symphony.core.footprint import Footprint
from symphony.core.outcomes import HANDOFF, OutcomeRecord
from symphony.core.stage_outcomes import PlannedComment, TransitionPlan
from symphony.core.state import AgentPause
from symphony.store import STORE_NEWER, Store, StoreError
from symphony.store.schema import MIGRATIONS, Migration
from tests.factories import WALL, make_issue, make_settings

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def busy_state() -> core.SchedulerState:
    """Two running tickets (one with tokens), one retry, a pending move, kept and completed."""
    state = core.SchedulerState()
    settings = make_settings()
    core.select_dispatches(state, [make_issue("A-1"), make_issue("A-2")], settings, 100.0, WALL)
    usage = TokenUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    core.on_agent_event(
        state, "id-A-1", AgentEvent("turn_started", pid=4242, thread_id="thr-1"), 101.0, WALL
    )
    core.on_agent_event(state, "id-A-1", AgentEvent("token_usage", usage=usage), 102.0, WALL)
    state.retry_attempts["id-B-1"] = core.RetryEntry(
        "id-B-1", "B-1", 3, due_at=140.0, kind=core.RetryKind.FAILURE, error="boom"
    )
    plan = TransitionPlan(
        "plan",
        StageOutcome.DONE,
        "Plan Review",
        (PlannedComment("plan", "1. x", single=True), PlannedComment("evidence", "e", True)),
        evidence={"ticket": "C-1", "tokens": {"total": 3}},
        hands_off=True,
    )
    state.transitions["id-C-1"] = core.PendingTransition(
        make_issue("C-1", native_ref={"path": "C-1.md"}),
        plan,
        "plan-3",
        2,
        attempts=2,
        due_at=130.0,
    )
    state.stage_progress["id-C-1"] = core.StageProgress("plan", 2, WALL)
    state.handed_off["id-D-1"] = ("human review",)
    state.new_outcomes.append(OutcomeRecord(NOW, HANDOFF, "id-D-1", "D-1", {"seconds": 5.0}))
    state.kept_workspaces["id-D-1"] = "D-1"
    state.footprints["id-D-1"] = Footprint("D-1", frozenset({"a.py"}), frozenset({"b/c.py"}))
    state.completed.add("id-E-1")
    state.transition_seq = 3
    return state


def test_what_a_save_keeps_comes_back_with_wall_clock_due_times(tmp_path: Path) -> None:
    store, damage = Store.open(tmp_path / "state.db")
    assert damage is None
    state = busy_state()
    store.save(state, mono_now=120.0, wall_now=NOW)
    assert state.new_outcomes == []  # taken by the store
    store.close()
    reopened = Store.open(tmp_path / "state.db")[0]
    assert reopened.outcomes(NOW - timedelta(days=1)) == [
        OutcomeRecord(NOW, HANDOFF, "id-D-1", "D-1", {"seconds": 5.0})
    ]
    assert reopened.outcomes(NOW + timedelta(seconds=1)) == []
    saved = reopened.load(NOW)
    assert [(r.identifier, r.pgid, r.thread_id, r.tokens) for r in saved.runs] == [
        ("A-1", 4242, "thr-1", (10, 5, 15, 0)),
        ("A-2", None, None, (0, 0, 0, 0)),
    ]
    (retry,) = saved.retries
    assert (retry.identifier, retry.attempt, retry.error) == ("B-1", 3, "boom")
    assert retry.due_at == NOW + timedelta(seconds=20)  # due 20 s after the save
    (move,) = saved.transitions
    assert move.plan == busy_state().transitions["id-C-1"].plan
    assert move.plan.target == "Plan Review" and move.plan.comments[0].body == "1. x"
    assert move.issue.native_ref == {"path": "C-1.md"} and move.attempts == 2
    assert saved.stage_progress == {"id-C-1": ("plan", 2, WALL)}
    assert saved.handed_off == {"id-D-1": ("human review",)}
    assert saved.kept_workspaces == {"id-D-1": "D-1"} and saved.completed == {"id-E-1"}
    assert saved.footprints == busy_state().footprints
    assert saved.ticket_totals["id-A-1"].total_tokens == 15
    assert saved.totals.total_tokens == 15 and saved.transition_seq == 3


def test_a_save_with_nothing_to_write_leaves_the_file_alone(tmp_path: Path) -> None:
    """An idle daemon saves every pass: with nothing changed it takes no write lock (another
    writer holding the file does not make it wait), and a change still waits for it."""
    store, _ = Store.open(tmp_path / "state.db")
    state = busy_state()
    store.save(state, 120.0, NOW)
    other = sqlite3.connect(tmp_path / "state.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a writer elsewhere holds the file
    try:
        store.save(state, 121.0, NOW + timedelta(seconds=1))
        store._db.execute("PRAGMA busy_timeout = 0")  # fail fast rather than wait 5 s
        state.completed.add("id-E-2")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            store.save(state, 122.0, NOW + timedelta(seconds=2))
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.save(state, 123.0, NOW + timedelta(seconds=3))  # the change was given back
    assert Store.open(tmp_path / "state.db")[0].load(NOW).completed == {"id-E-1", "id-E-2"}


def test_a_save_writes_only_what_changed(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    state = busy_state()
    store.save(state, 120.0, NOW)
    first = store.writes
    store.save(state, 121.0, NOW + timedelta(seconds=1))
    assert store.writes == first  # nothing changed: nothing written (due times are absolute)
    core.on_agent_event(state, "id-A-2", AgentEvent("turn_started"), 122.0, WALL)
    store.save(state, 122.0, NOW + timedelta(seconds=2))
    assert store.writes == first + 1  # one run row
    del state.retry_attempts["id-B-1"]
    store.save(state, 123.0, NOW + timedelta(seconds=3))
    assert store.writes == first + 2  # one deletion
    state.completed.add("id-E-2")
    store.save(state, 124.0, NOW + timedelta(seconds=4))
    assert store.writes == first + 3  # one completed id
    saved = Store.open(tmp_path / "state.db")[0].load(NOW)
    assert saved.retries == [] and saved.completed == {"id-E-1", "id-E-2"}


class FailingCommit:
    """A connection whose next COMMIT fails, as on a full disk."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)


def test_a_save_that_failed_is_written_in_full_by_the_next_one(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    state = busy_state()
    store.save(state, 120.0, NOW)
    state.retry_attempts["id-F-1"] = core.RetryEntry(
        "id-F-1", "F-1", 1, due_at=150.0, kind=core.RetryKind.FAILURE
    )
    del state.retry_attempts["id-B-1"]
    db = store._db
    store._db = FailingCommit(db)  # type: ignore[assignment]
    with pytest.raises(sqlite3.OperationalError):
        store.save(state, 121.0, NOW)
    store._db = db
    store.save(state, 122.0, NOW)
    # Neither the new retry nor the removal was lost with the failed transaction.
    saved = Store.open(tmp_path / "state.db")[0].load(NOW)
    assert [r.identifier for r in saved.retries] == ["F-1"]


def test_a_failed_save_gives_the_outbox_back_for_the_next_one(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    state = busy_state()
    db = store._db
    store._db = FailingCommit(db)  # type: ignore[assignment]
    with pytest.raises(sqlite3.OperationalError):
        store.save(state, 120.0, NOW)
    store._db = db
    # The outcome record and the totals wait in the state, as if the save had not been tried.
    assert [r.identifier for r in state.new_outcomes] == ["D-1"]
    assert "id-A-1" in state.changed_totals
    store.save(state, 121.0, NOW)
    assert state.new_outcomes == [] and not state.changed_totals
    reopened = Store.open(tmp_path / "state.db")[0]
    assert [r.identifier for r in reopened.outcomes(NOW)] == ["D-1"]
    assert reopened.load(NOW).ticket_totals["id-A-1"].total_tokens == 15


def test_an_outbox_the_caller_took_is_the_one_saved(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    state = busy_state()
    outbox = state.take_outbox()
    store.save(state, 120.0, NOW, outbox=outbox)
    assert [r.identifier for r in store.outcomes(NOW)] == ["D-1"]
    assert store.load(NOW).ticket_totals["id-A-1"].total_tokens == 15


def test_a_file_that_is_not_a_database_is_moved_aside_and_a_fresh_store_started(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not sqlite" * 100)
    store, damage = Store.open(path)
    assert damage is not None and "could not be read" in damage and "moved to" in damage
    aside = list(tmp_path.glob("state.db.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not sqlite")
    store.save(busy_state(), 120.0, NOW)
    assert len(store.load(NOW).runs) == 2


def test_a_truncated_database_is_moved_aside_too(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store, _ = Store.open(path)
    for n in range(200):
        state = busy_state()
        state.kept_workspaces.update({f"id-{n}-{m}": "x" * 200 for m in range(20)})
        store.save(state, 120.0, NOW)
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    store, damage = Store.open(path)
    assert damage is not None
    assert store.load(NOW).runs == []


def test_a_store_written_by_a_newer_schema_is_refused_with_a_clear_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {MIGRATIONS[-1].version + 1}")
    db.close()
    with pytest.raises(StoreError) as err:
        Store.open(path)
    assert err.value.category == STORE_NEWER and "newer symphony" in err.value.message
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))  # never moved aside


def test_migrations_run_in_order_once_each(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path)[0].close()
    extra = (*MIGRATIONS, Migration(MIGRATIONS[-1].version + 1, "CREATE TABLE extra (x TEXT);"))
    Store.open(path, migrations=extra)[0].close()
    Store.open(path, migrations=extra)[0].close()  # already there: not applied twice
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == extra[-1].version
    assert db.execute("SELECT count(*) FROM extra").fetchone()[0] == 0


def test_old_ticket_totals_are_forgotten_so_the_store_stays_bounded(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    store.save(busy_state(), 120.0, NOW - timedelta(days=100))
    assert store.forget_before(NOW - timedelta(days=90)) == 1
    assert store.load(NOW).ticket_totals == {}


def test_instances_are_remembered_for_the_next_restart(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    assert store.register_instance("first", 10, NOW) == []
    assert store.register_instance("second", 11, NOW) == ["first"]


def test_a_persons_pending_move_comes_back_attributed_to_them(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    state = core.SchedulerState()
    plan = TransitionPlan(
        "plan", StageOutcome.APPROVED, "Ready", (PlannedComment("review_action", "ada approved"),),
        by="ada",
    )  # fmt: skip
    state.transitions["id-C-1"] = core.PendingTransition(
        make_issue("C-1", state="Plan Review"), plan, "plan-1", 0, attempts=1, due_at=0.0
    )
    store.save(state, mono_now=0.0, wall_now=NOW)
    store.close()
    (move,) = Store.open(tmp_path / "state.db")[0].load(NOW).transitions
    assert move.plan == plan and move.plan.by == "ada"


def test_an_agent_paused_by_its_provider_stays_paused_across_a_restart(tmp_path: Path) -> None:
    state = core.SchedulerState()
    reset = WALL + timedelta(hours=2)
    state.agent_pauses["codex"] = AgentPause(
        "codex", LimitKind.USAGE, "resets at 14:00", WALL, reset, True, 1
    )
    store, _ = Store.open(tmp_path / "state.db")
    store.save(state, 0.0, WALL)
    store.close()  # as after a kill -9: what was saved is all there is
    store, _ = Store.open(tmp_path / "state.db")
    saved = store.load(WALL)
    store.close()
    pause = saved.agent_pauses["codex"]
    assert pause.until == reset and pause.limit is LimitKind.USAGE and pause.named


def test_recent_events_are_kept_across_a_restart_and_bounded(tmp_path: Path) -> None:
    from symphony.observability.activity import Activity

    before = Activity(size=3)
    for n in range(4):
        before.add(WALL + timedelta(seconds=n), "dispatched", f"run {n}", issue_identifier="A-1")
    store, _ = Store.open(tmp_path / "state.db")
    store.save(core.SchedulerState(), 0.0, WALL, activity=before.take_unsaved(), activity_kept=3)
    assert before.take_unsaved() == []  # each row is written once
    store.close()

    store, _ = Store.open(tmp_path / "state.db")
    after = Activity(size=3)
    after.add(WALL + timedelta(minutes=1), "recovered", "restarted")
    after.restore(store.recent_activity(after.size))
    store.close()
    # The newest kept, oldest first in the store; the new daemon's own rows come after them.
    assert [row["message"] for row in after.newest()] == ["restarted", "run 3", "run 2"]
    assert after.newest()[1] == {
        "at": (WALL + timedelta(seconds=3)).isoformat(), "event": "dispatched",
        "message": "run 3", "issue_identifier": "A-1", "level": "info",
    }  # fmt: skip

"""The runtime snapshot built from scheduler state (spec §13.3, §17.4)."""

from __future__ import annotations

import json
from datetime import timedelta

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.observability.snapshot import build_issue_snapshot, build_snapshot
from tests.factories import WALL, make_issue, make_settings


def test_snapshot_has_running_rows_retry_rows_token_totals_and_rate_limits() -> None:
    state = core.SchedulerState()
    settings = make_settings()
    issues = [make_issue("A-1", url="https://t/A-1"), make_issue("A-2")]
    core.select_dispatches(state, issues, settings, 100.0, WALL)
    core.on_agent_event(
        state,
        "id-A-1",
        AgentEvent("turn_started", session_id="th-tu", message="A-1: go"),
        101.0,
        WALL + timedelta(seconds=1),
    )
    core.on_agent_event(
        state, "id-A-1", AgentEvent("token_usage", usage=TokenUsage(80, 20, 100)), 102.0, WALL
    )
    core.on_agent_event(
        state, "id-A-1", AgentEvent("rate_limits", rate_limits={"primary": None}), 102.0, WALL
    )
    core.on_worker_exit(
        state, "id-A-2", core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 110.0
    )

    snapshot = build_snapshot(state, 115.0, WALL + timedelta(seconds=15), {"workflow_error": None})
    json.dumps(snapshot)  # JSON-safe throughout

    (row,) = snapshot["running"]
    assert row["issue_identifier"] == "A-1" and row["url"] == "https://t/A-1"
    assert row["turn_count"] == 1 and row["session_id"] == "th-tu"
    assert row["tokens"] == {
        "input_tokens": 80,
        "output_tokens": 20,
        "total_tokens": 100,
        "cached_input_tokens": 0,
    }
    # No model was named and nothing priced it: the cost is unknown, not zero.
    assert row["model"] is None and row["cost_usd"] is None
    assert row["runtime_seconds"] == 15.0
    assert "recent_events" not in row  # only the one-issue view carries them
    (retry,) = snapshot["retrying"]
    assert retry["issue_identifier"] == "A-2" and retry["attempt"] == 1
    assert retry["error"] == "turn 1: boom" and retry["due_in_seconds"] == 5.0
    assert retry["due_at"] == (WALL + timedelta(seconds=20)).isoformat()
    totals = snapshot["agent_totals"]
    assert totals["total_tokens"] == 100
    assert totals["seconds_running"] == 25.0  # A-2 ran 10 s and ended; A-1 has run 15 s
    assert snapshot["rate_limits"] == {"primary": None}
    assert snapshot["counts"] == {"running": 1, "retrying": 1}


def test_issue_snapshot_finds_by_identifier_or_id_and_carries_recent_events() -> None:
    state, settings = core.SchedulerState(), make_settings()
    core.select_dispatches(state, [make_issue("A-1"), make_issue("A-2")], settings, 100.0, WALL)
    event = AgentEvent("turn_started", session_id="th-tu", message="A-1: go")
    core.on_agent_event(state, "id-A-1", event, 101.0, WALL + timedelta(seconds=1))
    core.on_worker_exit(
        state, "id-A-2", core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 110.0
    )

    by_identifier = build_issue_snapshot(state, "A-1", 115.0, WALL)
    assert by_identifier is not None and by_identifier == build_issue_snapshot(
        state, "id-A-1", 115.0, WALL
    )
    assert by_identifier["status"] == "running" and by_identifier["retry"] is None
    (recent,) = by_identifier["running"]["recent_events"]
    assert recent == {
        "at": (WALL + timedelta(seconds=1)).isoformat(),
        "event": "turn_started",
        "message": "A-1: go",
    }
    retrying = build_issue_snapshot(state, "A-2", 115.0, WALL)
    assert retrying is not None and retrying["status"] == "retrying"
    assert retrying["running"] is None and retrying["retry"]["error"] == "turn 1: boom"
    assert build_issue_snapshot(state, "A-3", 115.0, WALL) is None

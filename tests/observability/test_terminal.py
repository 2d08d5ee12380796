"""The live terminal table: drawn from the snapshot only, with logs printed above it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from rich.console import Console

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.base.secrets import SecretMasker
from symphony.observability import terminal
from symphony.observability.snapshot import build_snapshot
from symphony.observability.terminal import (
    ConsoleLogStream,
    FleetMember,
    TerminalStatus,
    render_fleet,
    render_status,
)
from tests.factories import WALL, make_issue, make_settings


def snapshot_with_one_run_and_one_retry(health: dict[str, Any]) -> dict[str, Any]:
    state = core.SchedulerState()
    settings = make_settings()
    core.select_dispatches(state, [make_issue("ABC-1"), make_issue("ABC-2")], settings, 0.0, WALL)
    event = AgentEvent("notification", message="item/completed commandExecution: pytest -q")
    core.on_agent_event(state, "id-ABC-1", event, 5.0, WALL + timedelta(seconds=5))
    usage = AgentEvent("token_usage", usage=TokenUsage(1200, 34, 1234))
    core.on_agent_event(state, "id-ABC-1", usage, 5.0, WALL + timedelta(seconds=5))
    core.on_worker_exit(
        state,
        "id-ABC-2",
        core.WorkerExit(False, core.Failure("turn 1", "the turn failed", "turn_failed")),
        settings,
        6,
    )
    return build_snapshot(state, 65.0, WALL + timedelta(seconds=65), health)


def text_of(renderable: Any) -> str:
    console = Console(record=True, width=140)
    console.print(renderable)
    return console.export_text()


def test_table_shows_running_tickets_retries_and_totals() -> None:
    text = text_of(render_status(snapshot_with_one_run_and_one_retry({}), SecretMasker()))
    assert "ABC-1" in text and "pytest -q" in text and "1,234" in text
    assert "1m00s" in text  # the age of the last event
    assert "ABC-2" in text and "turn_failed" in text  # the retry queue
    assert "1 running, 1 retrying" in text


def test_a_rejected_workflow_or_failing_tracker_shows_as_a_banner() -> None:
    health = {"workflow_error": "workflow_parse_error: bad YAML", "tracker_error": None}
    text = text_of(render_status(snapshot_with_one_run_and_one_retry(health), SecretMasker()))
    assert "WORKFLOW.md rejected: workflow_parse_error: bad YAML" in text
    assert "tracker:" not in text


def test_tracker_secrets_are_masked_in_the_table() -> None:
    health = {"tracker_error": "tracker_status: token tok_s3cret_abc rejected"}
    snapshot = snapshot_with_one_run_and_one_retry(health)
    masker = SecretMasker()
    masker.set(["tok_s3cret_abc"])
    text = text_of(render_status(snapshot, masker))
    assert "tracker: tracker_status: token [redacted] rejected" in text
    assert "s3cret" not in text


def test_log_lines_are_printed_once_each_above_the_display() -> None:
    console = Console(record=True, width=200)
    stream = ConsoleLogStream(console)
    print("level=info event=one", file=stream)  # type: ignore[arg-type]
    print("level=info event=two", file=stream)  # type: ignore[arg-type]
    assert console.export_text().splitlines() == ["level=info event=one", "level=info event=two"]


async def test_status_redraws_from_the_snapshot_until_cancelled(monkeypatch: Any) -> None:
    monkeypatch.setattr(terminal, "REFRESH_S", 0.01)
    calls = 0

    def snapshot() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return snapshot_with_one_run_and_one_retry({})

    def render() -> Any:
        return render_status(snapshot(), SecretMasker())

    task = asyncio.create_task(TerminalStatus(render, Console(width=100)).run())
    while calls < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    await task
    assert calls >= 3


def test_the_fleet_table_shows_each_workflow_its_share_its_agents_and_the_pool() -> None:
    masker = SecretMasker()
    masker.set(["tok_s3cret_abc"])
    members = [
        FleetMember("api", 2, snapshot_with_one_run_and_one_retry({})),
        FleetMember(
            "web",
            1,
            snapshot_with_one_run_and_one_retry(
                {"tracker_error": "tracker_status: token tok_s3cret_abc rejected"}
            ),
        ),
        FleetMember("broken", 1, None, "workflow_parse_error: bad YAML"),
    ]
    fleet = {"max_concurrent_agents": 10, "running": 2, "shares": {"api": 6, "web": 4},
             "daily_budget_usd": 50.0, "budget_spent": False}  # fmt: skip
    text = text_of(render_fleet(members, fleet, masker))
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines()]
    assert ["api", "2", "6", "1", "1", "ok"] in rows
    assert ["web", "1", "4", "1", "1", "tracker_status: token [redacted] rejected"] in rows
    assert "s3cret" not in text
    assert ["broken", "1", "", "", "", "not running: workflow_parse_error: bad YAML"] in rows
    # Every running session, with the workflow it belongs to.
    sessions = [row for row in rows if "item/completed commandExecution: pytest -q" in row]
    assert sorted(row[0] for row in sessions) == ["api", "web"]
    assert "fleet: 2 of 10 agent slots · daily budget $50.00" in text

"""Money end to end: the scripted agent (a real subprocess) reports cumulative usage for a
model, the daemon prices it, keeps it across attempts and a restart in a real store, holds
tickets to their budget through the tracker (the local board), and holds the fleet to its
daily budget."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from symphony.config.load import load_settings
from symphony.config.pricing import Price
from symphony.daemon.orchestrator import Orchestrator
from symphony.store import Store
from tests.harness import Board, Running, scenario_env

pytestmark = pytest.mark.slow

PRICE = Price(input=1.25, output=10.0, cached_input=0.125)
PRICING = {"fake-model": {"input": 1.25, "cached_input": 0.125, "output": 10.0}}
# Each report of the scripted agent adds 100,000 input tokens (a quarter of them cached) and
# 10,000 output tokens to its thread: $0.196875 at the price above.
PER_REPORT = PRICE.cost_usd(100_000, 25_000, 10_000)
REPORT_TOKENS = 110_000


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


def start(board: Board, env: dict[str, str], store: Store | None = None) -> Running:
    settings = load_settings(board.workflow, env)
    return Running(Orchestrator(settings, environ=env, watch=False, store=store), timeout=30)


def set_state(board: Board, identifier: str, state: str) -> None:
    """A person moves the ticket, keeping everything else in its file (comments included)."""
    path = board.tickets / f"{identifier}.md"
    path.write_text(re.sub(r"(?m)^state: .*$", f"state: {state}", path.read_text(), count=1))


def comments(board: Board, identifier: str, kind: str) -> list[str]:
    text = (board.tickets / f"{identifier}.md").read_text()
    return re.findall(rf"— symphony · {kind} · (\S+)", text)


def fake_records(path: Path, kind: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [row for row in rows if row.get("_fake") == kind]


async def test_a_tickets_cost_is_its_priced_usage_over_attempts_and_a_restart(
    board: Board, tmp_path: Path
) -> None:
    board.ticket("ABC-1")
    board.write_workflow(agent={"max_turns": 1, "max_retry_backoff_ms": 1000}, pricing=PRICING)
    record = tmp_path / "agent.jsonl"
    env = scenario_env(
        "spend",
        FAKE_AGENT_SPEND_REPORTS="2",
        FAKE_AGENT_SPEND_MS="10",
        FAKE_AGENT_RECORD=str(record),
    )
    store, _ = Store.open(tmp_path / "state.db")
    run = start(board, env, store)
    state = run.orchestrator.state
    try:
        # Two attempts, each a new thread of two reports; between runs a person pauses it.
        await run.until(
            lambda: (
                "ABC-1" in state.ticket_totals
                and state.ticket_totals["ABC-1"].total_tokens >= 4 * REPORT_TOKENS
                and not state.running
            )
        )
        set_state(board, "ABC-1", "Paused")
        run.orchestrator.request_refresh()
        await run.until(lambda: not state.claimed and not state.running)
    finally:
        await run.stop()
    before = state.ticket_totals["ABC-1"].known_cost_usd
    # A restart: the cost comes back from the store, and one more attempt adds its own.
    set_state(board, "ABC-1", "Todo")
    run = start(board, env, store)
    state = run.orchestrator.state
    try:
        await run.until(lambda: state.ticket_totals["ABC-1"].known_cost_usd != before)
        await run.until(lambda: not state.running)
        set_state(board, "ABC-1", "Done")
        run.orchestrator.request_refresh()
        await run.until(lambda: not state.claimed and not state.running)
        detail = run.orchestrator.view.issue_snapshot("ABC-1")
        costs = run.orchestrator.snapshot()["costs"]
    finally:
        await run.stop()
    # What the agent reported, every report of every thread, counted once and priced.
    reports = len(fake_records(record, "usage"))
    assert reports >= 6 and fake_records(record, "interrupted") == []
    totals = state.ticket_totals["ABC-1"]
    assert totals.total_tokens == reports * REPORT_TOKENS
    assert totals.known_cost_usd == pytest.approx(reports * PER_REPORT)
    assert detail is not None and detail["cost_usd"] == pytest.approx(reports * PER_REPORT)
    assert costs["today"]["known_usd"] == pytest.approx(reports * PER_REPORT)
    assert costs["by_model"]["fake-model"]["tokens"] == reports * REPORT_TOKENS


async def test_the_budget_warns_once_stops_the_turn_at_the_limit_and_a_person_renews_it(
    board: Board, tmp_path: Path
) -> None:
    board.ticket("ABC-1")
    board.write_workflow(
        agent={"max_retry_backoff_ms": 1000},
        pricing=PRICING,
        budget={"per_ticket_usd": 1.0, "warn_at": 0.5, "on_exceeded": "Over Budget"},
    )
    record = tmp_path / "agent.jsonl"
    env = scenario_env("spend", FAKE_AGENT_SPEND_MS="250", FAKE_AGENT_RECORD=str(record))
    run = start(board, env)
    try:
        await run.until(lambda: board.state_of("ABC-1") == "Over Budget")
        # $1.00 is crossed by the 6th report ($1.18): the turn is interrupted before a 7th.
        assert [r["after_report"] for r in fake_records(record, "interrupted")] == [6]
        assert comments(board, "ABC-1", "budget_warning") == ["window-1"]
        assert len(comments(board, "ABC-1", "budget_exceeded")) == 1
        text = (board.tickets / "ABC-1.md").read_text()
        assert "spent $1.18 of its $1.00 budget" in text and "By stage: run $1.18" in text
        # Moving it back grants one more $1.00: it runs, is warned and stopped once more.
        set_state(board, "ABC-1", "Todo")
        run.orchestrator.request_refresh()
        await run.until(lambda: len(comments(board, "ABC-1", "budget_exceeded")) == 2)
        await run.until(lambda: board.state_of("ABC-1") == "Over Budget")
    finally:
        await run.stop()
    assert comments(board, "ABC-1", "budget_warning") == ["window-1", "window-2"]
    assert [r["after_report"] for r in fake_records(record, "interrupted")] == [6, 6]
    totals = run.orchestrator.state.ticket_totals["ABC-1"]
    assert (totals.budget_window, totals.known_cost_usd) == (2, pytest.approx(12 * PER_REPORT))


async def test_an_unknown_model_counts_tokens_and_its_cost_shows_as_unknown(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(agent={"max_turns": 1}, pricing=PRICING)
    env = scenario_env(
        "spend",
        FAKE_AGENT_SPEND_REPORTS="2",
        FAKE_AGENT_SPEND_MS="10",
        FAKE_AGENT_MODEL="other-model",
    )
    run = start(board, env)
    state = run.orchestrator.state
    try:
        await run.until(
            lambda: (
                "ABC-1" in state.ticket_totals
                and state.ticket_totals["ABC-1"].total_tokens >= 2 * REPORT_TOKENS
            )
        )
        snapshot = run.orchestrator.snapshot()
    finally:
        await run.stop()
    (ticket,) = [t for t in snapshot["tickets"] if t["issue_identifier"] == "ABC-1"]
    assert ticket["cost_usd"] is None and ticket["unpriced_tokens"] >= 2 * REPORT_TOKENS
    assert snapshot["costs"]["by_model"]["other-model"]["known_usd"] is None
    warned = [r for r in run.orchestrator.activity.newest(200) if r["event"] == "unpriced_model"]
    assert len(warned) == 1 and "no price for model other-model" in warned[0]["message"]


async def test_the_daily_budget_holds_new_tickets_until_the_day_rolls_over(board: Board) -> None:
    board.ticket("ABC-1", priority=1)
    board.ticket("ABC-2", priority=2)
    board.write_workflow(
        agent={"max_concurrent_agents": 1, "max_turns": 1, "max_retry_backoff_ms": 1000},
        pricing=PRICING,
        budget={"per_day_usd": 0.5},
        polling_ms=200,
    )
    # Three reports ($0.59) spend the day's $0.50.
    env = scenario_env("spend", FAKE_AGENT_SPEND_REPORTS="3", FAKE_AGENT_SPEND_MS="10")
    run = start(board, env)
    try:
        await run.until(lambda: "ABC-1" in run.dispatched and not run.orchestrator.state.running)
        await run.until(
            lambda: _reason(run, "ABC-2") is not None and "tomorrow" in _reason(run, "ABC-2")
        )  # type: ignore[operator]
        snapshot = run.orchestrator.snapshot()
    finally:
        await run.stop()
    assert "ABC-2" not in run.dispatched
    assert _reason(run, "ABC-2") == (
        "waits for tomorrow (UTC): the fleet spent its $0.50 for today (budget.per_day_usd)"
    )
    assert snapshot["costs"]["budget"]["daily_spent"] is True
    assert snapshot["costs"]["today"]["known_usd"] == pytest.approx(3 * PER_REPORT)


def _reason(run: Running, identifier: str) -> str | None:
    rows = run.orchestrator.snapshot()["board"]["rows"]
    return next((r["reason"] for r in rows if r["issue_identifier"] == identifier), None)

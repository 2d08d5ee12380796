"""Money in the pure core: prices, the cost of a ticket across attempts and restarts, unknown
models, the fleet's spend per day and model, and the budgets (a warning once, a stop at the
limit, a new window when a person moves the ticket back, the daily pause)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from symphony import core
from symphony.base.events import RESUMED, AgentEvent, TokenUsage
from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.pricing import DEFAULT_PRICES, Price, Pricing, parse_pricing
from symphony.config.sections import BudgetSettings, Settings
from symphony.config.stages import StageOutcome
from symphony.core.budgets import check_budgets
from symphony.core.costs import usd
from symphony.store import Store
from symphony.store.recovery import restore
from tests.factories import WALL, make_issue, make_settings

GPT = Price(input=1.25, output=10.0, cached_input=0.125)
PRICING = Pricing((("fake-model", GPT),))


def with_budget(**budget: object) -> Settings:
    settings = make_settings(active=("Todo", "In Progress"))
    return dataclasses.replace(
        settings,
        pricing=PRICING,
        budget=BudgetSettings(**budget),  # type: ignore[arg-type]
    )


def dispatch(state: core.SchedulerState, settings: Settings, now: float = 0.0) -> str:
    (start,) = core.select_dispatches(state, [make_issue("A-1")], settings, now, WALL)
    assert isinstance(start, core.StartWorker)
    return start.issue.id


def report(
    state: core.SchedulerState, issue_id: str, usage: TokenUsage, *, model: str | None = None
) -> None:
    if model is not None:
        started = AgentEvent("session_started", thread_id=f"thr-{model}", model=model)
        core.on_agent_event(state, issue_id, started, 1.0, WALL, PRICING)
    core.on_agent_event(state, issue_id, AgentEvent("token_usage", usage=usage), 2.0, WALL)


def test_amounts_read_in_cents_and_below_a_cent_are_not_shown_as_nothing() -> None:
    assert (usd(4.0249), usd(1234.5), usd(0.0017), usd(0.0), usd(None)) == (
        "$4.02",
        "$1,234.50",
        "$0.0017",
        "$0.00",
        "unknown",
    )


def test_cached_input_is_priced_as_cached_and_not_again_as_input() -> None:
    # 1M input of which 400k cached, 100k output, at 1.25 / 0.125 / 10 USD per 1M.
    assert GPT.cost_usd(1_000_000, 400_000, 100_000) == pytest.approx(0.75 + 0.05 + 1.0)
    # A price without a cached rate charges cached input as input.
    assert Price(2.0, 8.0).cost_usd(1_000_000, 1_000_000, 0) == pytest.approx(2.0)


def test_the_most_specific_price_wins_and_the_workflow_comes_before_the_bundled_table() -> None:
    pricing = parse_pricing(
        {"gpt-5*": {"input": 9, "output": 9}, "my-model": {"input": 1, "output": 2}}
    )
    assert pricing.price_for("my-model") == Price(1.0, 2.0)
    assert pricing.price_for("gpt-5") == DEFAULT_PRICES["gpt-5"]  # exact beats a glob
    assert pricing.price_for("gpt-5-preview") == Price(9.0, 9.0)  # ours, listed first
    assert pricing.price_for("claude-sonnet-4-5-20250929") == DEFAULT_PRICES["claude-sonnet-4*"]
    assert pricing.price_for("claude-opus-4-5-x") == DEFAULT_PRICES["claude-opus-4-5*"]
    assert pricing.price_for("llama-3") is None and pricing.price_for(None) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "pricing must be a map"),
        ({"m": {"input": 1}}, "pricing.m.output is required"),
        ({"m": {"input": -1, "output": 1}}, "pricing.m.input must be a number"),
        ({"m": {"input": 1, "output": 1, "cache_read": 1}}, "unknown key(s) cache_read"),
    ],
)
def test_a_price_that_cannot_be_used_is_a_clear_config_error(raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_pricing(raw)
    assert message in err.value.message


def test_a_tickets_cost_adds_up_over_attempts_and_a_resumed_thread_without_double_counting(
    tmp_path: Path,
) -> None:
    settings = with_budget()
    state = core.SchedulerState()
    issue_id = dispatch(state, settings)
    report(state, issue_id, TokenUsage(1_000_000, 100_000, 1_100_000, 400_000), model="fake-model")
    first = GPT.cost_usd(1_000_000, 400_000, 100_000)
    assert state.running[issue_id].cost_usd == pytest.approx(first)
    core.on_worker_exit(
        state, issue_id, core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 3.0
    )
    # Attempt 2, a new thread counting from zero.
    retry = state.retry_attempts[issue_id]
    core.on_retries_refreshed(state, [retry], [make_issue("A-1")], settings, 20.0, WALL)
    report(state, issue_id, TokenUsage(200_000, 20_000, 220_000, 0), model="fake-model")
    second = GPT.cost_usd(200_000, 0, 20_000)
    # Saved and restarted mid-run: the thread resumes and reports its totals from there on.
    store, _ = Store.open(tmp_path / "state.db")
    store.save(state, 21.0, WALL)
    state = core.SchedulerState()
    restore(state, store.load(WALL), 0.0, WALL)
    (start,) = core.on_retries_refreshed(
        state, [state.retry_attempts[issue_id]], [make_issue("A-1")], settings, 0.0, WALL
    )
    assert isinstance(start, core.StartWorker) and start.resume_thread_id == "thr-fake-model"
    resumed = AgentEvent("session_started", message=RESUMED, model="fake-model")
    core.on_agent_event(state, issue_id, resumed, 1.0, WALL, PRICING)
    report(state, issue_id, TokenUsage(300_000, 30_000, 330_000, 50_000))
    third = GPT.cost_usd(100_000, 50_000, 10_000)
    totals = state.ticket_totals[issue_id]
    assert totals.known_cost_usd == pytest.approx(first + second + third)
    assert state.daily_costs[WALL.date().isoformat()].usd == pytest.approx(first + second + third)
    assert state.model_costs["fake-model"].tokens == 1_100_000 + 220_000 + 110_000


def test_an_unknown_model_counts_tokens_and_shows_its_cost_as_unknown() -> None:
    settings = with_budget(per_ticket_usd=0.01)
    state = core.SchedulerState()
    issue_id = dispatch(state, settings)
    report(state, issue_id, TokenUsage(9_000_000, 0, 9_000_000), model="mystery-1")
    totals = state.ticket_totals[issue_id]
    assert totals.total_tokens == 9_000_000 and totals.known_cost_usd is None
    assert (
        state.running[issue_id].price is None and state.model_costs["mystery-1"].known_usd is None
    )
    # A cost that is unknown is never held to a budget.
    assert check_budgets(state, settings) == []


def test_the_budget_warns_once_then_stops_the_run_and_moves_the_ticket_with_the_breakdown() -> None:
    settings = with_budget(per_ticket_usd=2.0, warn_at=0.5, on_exceeded="Budget Exceeded")
    state = core.SchedulerState()
    issue_id = dispatch(state, settings)
    report(state, issue_id, TokenUsage(1_000_000, 0, 1_000_000), model="fake-model")  # $1.25
    (warning,) = check_budgets(state, settings)
    assert isinstance(warning, core.PostComment) and warning.key == "window-1"
    assert "used $1.25 of its $2.00 budget (62%" in warning.body and "run $1.25" in warning.body
    assert check_budgets(state, settings) == []  # once
    report(state, issue_id, TokenUsage(1_000_000, 100_000, 1_100_000))  # +$1.00: over
    (stop,) = check_budgets(state, settings)
    assert isinstance(stop, core.StopWorker) and stop.reason is core.StopReason.BUDGET
    assert stop.detail == "spent $2.25 of its $2.00 budget"
    (perform,) = core.on_worker_exit(
        state, issue_id, core.WorkerExit(False, core.Failure("worker", "stopped")), settings, 5.0
    )
    assert isinstance(perform, core.PerformTransition) and perform.target == "Budget Exceeded"
    plan = state.transitions[issue_id].plan
    assert plan.outcome is StageOutcome.BUDGET_EXCEEDED
    assert "spent $2.25 of its $2.00 budget" in plan.comments[0].body
    # A person moves it back: one more window of $2.00 from what it has spent.
    core.on_transition_confirmed(state, issue_id, moved=True, wall=WALL)
    dispatch(state, settings, now=10.0)
    totals = state.ticket_totals[issue_id]
    assert (totals.budget_window, totals.budget_base_usd) == (2, pytest.approx(2.25))
    report(state, issue_id, TokenUsage(100_000, 0, 100_000), model="fake-model")
    assert check_budgets(state, settings) == []


def test_a_window_spent_by_a_runs_last_report_stops_the_next_run() -> None:
    settings = with_budget(per_ticket_usd=1.0)
    state = core.SchedulerState()
    issue_id = dispatch(state, settings)
    report(state, issue_id, TokenUsage(1_000_000, 0, 1_000_000), model="fake-model")  # $1.25
    # The run ended before a loop pass could check: no stop, a continuation instead.
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, "done"), settings, 3.0)
    assert not state.ticket_totals[issue_id].budget_exceeded
    state.retry_attempts.pop(issue_id)
    state.claimed.discard(issue_id)
    dispatch(state, settings, now=4.0)
    (stop,) = check_budgets(state, settings)  # the window stays spent: no new one for free
    assert isinstance(stop, core.StopWorker) and stop.reason is core.StopReason.BUDGET


def test_the_daily_budget_holds_new_work_and_retries_until_the_next_utc_day() -> None:
    settings = with_budget(per_day_usd=1.0)
    state = core.SchedulerState()
    issue_id = dispatch(state, settings)
    report(state, issue_id, TokenUsage(1_000_000, 0, 1_000_000), model="fake-model")
    core.on_worker_exit(
        state, issue_id, core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 3.0
    )
    other = make_issue("B-1")
    assert core.select_dispatches(state, [other], settings, 4.0, WALL) == []
    (why,) = core.explain_dispatch(state, [other], settings, WALL)
    assert why[1] == (
        "waits for tomorrow (UTC): the fleet spent its $1.00 for today (budget.per_day_usd)"
    )
    (requeued,) = core.on_retries_refreshed(
        state, [state.retry_attempts[issue_id]], [make_issue("A-1")], settings, 30.0, WALL
    )
    assert isinstance(requeued, core.RetryScheduled)
    assert requeued.entry.error == "the daily budget is spent"
    tomorrow = WALL + timedelta(days=1)
    assert core.select_dispatches(state, [other], settings, 40.0, tomorrow) != []


def test_budget_settings_are_validated(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    head = "---\ntracker:\n  kind: local\n  provider:\n    path: board\n"
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"{head}budget:\n  per_ticket_usd: 5\n---\nx\n")
    budget = load_settings(path, {}).budget
    assert (budget.per_ticket_usd, budget.warn_at, budget.on_exceeded) == (
        5.0,
        0.8,
        "Needs Attention",
    )
    for bad, message in (
        ("per_ticket_usd: 0", "budget.per_ticket_usd must be a positive amount"),
        ("warn_at: 1.5", "budget.warn_at must be a share"),
        ("on_exceeded: Todo", "an active state"),
    ):
        path.write_text(f"{head}budget:\n  {bad}\n---\nx\n")
        with pytest.raises(ConfigError) as err:
            load_settings(path, {})
        assert message in err.value.message

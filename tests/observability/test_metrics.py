"""Tracker read statistics and the Prometheus text rendering of a snapshot."""

from __future__ import annotations

from typing import Any

from symphony.observability.health import TrackerRequests
from symphony.observability.metrics import render_metrics


def _snapshot(**health: Any) -> dict[str, Any]:
    return {
        "counts": {"running": 0, "retrying": 0},
        "agent_totals": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        "health": {"dispatched": 0, "failures": {}, "last_tick_ms": 1.5, **health},
    }


def _samples(text: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


def test_tracker_reads_are_counted_with_cumulative_latency_buckets_and_error_categories() -> None:
    requests = TrackerRequests()
    requests.record("candidates", 0.02)
    requests.record("candidates", 0.3)
    requests.record("candidates", 45.0, "tracker_status")
    requests.record("reconcile", 0.1, "tracker_rate_limited")

    stats = requests.as_json()
    candidates = stats["candidates"]
    assert candidates["count"] == 3
    assert candidates["errors"] == {"tracker_status": 1}
    assert candidates["seconds_sum"] == 45.32 and candidates["last_seconds"] == 45.0
    assert candidates["buckets"]["0.05"] == 1
    assert candidates["buckets"]["0.25"] == 1 and candidates["buckets"]["0.5"] == 2
    assert candidates["buckets"]["30.0"] == 2 and candidates["buckets"]["+Inf"] == 3
    # A bound is inclusive ("le"): a read of exactly 0.1 s is in the 0.1 bucket.
    assert stats["reconcile"]["buckets"]["0.05"] == 0 and stats["reconcile"]["buckets"]["0.1"] == 1


def test_tracker_reads_render_as_a_prometheus_histogram_and_error_counter() -> None:
    requests = TrackerRequests()
    requests.record("candidates", 0.2)
    requests.record("candidates", 2.0, "tracker_status")
    text = render_metrics(_snapshot(tracker_requests=requests.as_json()))

    assert "# TYPE symphony_tracker_request_seconds histogram\n" in text
    assert "# TYPE symphony_tracker_errors_total counter\n" in text
    samples = _samples(text)
    bucket = "symphony_tracker_request_seconds_bucket"
    assert samples[f'{bucket}{{operation="candidates",le="0.25"}}'] == "1"
    assert samples[f'{bucket}{{operation="candidates",le="+Inf"}}'] == "2"
    assert samples['symphony_tracker_request_seconds_count{operation="candidates"}'] == "2"
    assert samples['symphony_tracker_request_seconds_sum{operation="candidates"}'] == "2.2"
    errors = 'symphony_tracker_errors_total{operation="candidates",category="tracker_status"}'
    assert samples[errors] == "1"


def test_metrics_label_values_are_escaped_and_missing_tick_is_nan() -> None:
    text = render_metrics(_snapshot(failures={'turn "1"\\x\n': 2}, last_tick_ms=None))
    assert 'symphony_failures_total{reason="turn \\"1\\"\\\\x\\n"} 2\n' in text
    assert "symphony_tick_duration_ms NaN\n" in text


def test_the_review_queue_and_outcome_figures_are_exported() -> None:
    from datetime import UTC, datetime, timedelta

    from symphony.core.outcomes import CLOSED, GATE, HANDOFF, OutcomeRecord, outcome_report

    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    records = [
        OutcomeRecord(now, HANDOFF, "1", "A-1", {"seconds": 600.0}),
        OutcomeRecord(now, HANDOFF, "2", "A-2", {"seconds": 1200.0}),
        OutcomeRecord(now, CLOSED, "1", "A-1", {"first_pass": True, "tokens": 5000}),
        OutcomeRecord(now, GATE, "1", "A-1", {"gate": "tests", "passed": False}),
        OutcomeRecord(now, GATE, "1", "A-1", {"gate": "tests", "passed": True}),
        # Older than the 7-day window: in the plots' range, not in the figures.
        OutcomeRecord(now - timedelta(days=9), HANDOFF, "3", "A-3", {"seconds": 1.0}),
    ]
    snapshot = {
        **_snapshot(),
        "review": {"waiting": 2, "limit": 2, "held": 3},
        "outcomes": outcome_report(records, end=now, window_days=7, plot_days=14),
    }
    samples = _samples(render_metrics(snapshot))
    assert samples["symphony_review_queue"] == "2" and samples["symphony_held_for_review"] == "3"
    assert samples["symphony_outcome_handoffs"] == "2"
    assert samples["symphony_outcome_first_pass_ratio"] == "1"
    assert samples["symphony_outcome_handoff_seconds_median"] == "900"
    assert samples["symphony_outcome_tokens_per_accepted"] == "5000"
    assert samples['symphony_gate_pass_ratio{gate="tests"}'] == "0.5"
    assert samples["symphony_outcome_rework_ratio"] == "0"
    daily = snapshot["outcomes"]["daily"]
    assert len(daily) == 14 and daily[-1]["handoffs"] == 2 and daily[4]["handoffs"] == 1
    # Without a review limit or a store, neither family appears.
    assert "symphony_review_queue" not in render_metrics(_snapshot())


def test_spend_is_exported_per_model_with_unknown_cost_as_nan_never_zero() -> None:
    from datetime import UTC, datetime

    from symphony import core
    from symphony.config.sections import BudgetSettings
    from symphony.core.costs import Spend
    from symphony.observability.snapshot import build_costs

    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    state = core.SchedulerState()
    state.model_costs = {"gpt-5": Spend(3.25, 1000, 0), "mystery": Spend(0.0, 500, 500)}
    state.daily_costs = {"2026-12-01": Spend(3.25, 1500, 500)}
    costs = build_costs(state, now, BudgetSettings(per_day_usd=3.0))
    samples = _samples(render_metrics({**_snapshot(), "costs": costs}))
    assert samples['symphony_cost_usd_total{model="gpt-5"}'] == "3.25"
    assert samples['symphony_unpriced_tokens_total{model="mystery"}'] == "500"
    assert samples["symphony_cost_usd_today"] == "NaN"  # part of today has no price
    assert samples["symphony_daily_budget_spent"] == "1"
    assert costs["daily"][-1]["day"] == "2026-12-01" and len(costs["daily"]) == 14

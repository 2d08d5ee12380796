"""The Prometheus text rendering of a snapshot (`render_metrics`), for `/metrics`; the
counters it shows are kept in `symphony.observability.health`. Loaded with the HTTP server.
"""

from __future__ import annotations

import math
from typing import Any

# Prometheus text exposition format 0.0.4


def render_metrics(snapshot: dict[str, Any]) -> str:
    """The snapshot in Prometheus text exposition format 0.0.4."""
    out = _Exposition()
    health = snapshot.get("health", {})
    _queue_metrics(out, snapshot)
    _pull_request_metrics(out, snapshot.get("pull_requests", []))
    _run_metrics(out, health, snapshot["agent_totals"])
    _tracker_metrics(out, health.get("tracker_requests", {}))
    review = snapshot.get("review") or {}
    if review.get("limit") is not None:
        _review_metrics(out, review)
    hosts = snapshot.get("hosts") or []
    if hosts:
        _host_metrics(out, hosts)
    outcomes = snapshot.get("outcomes")
    if outcomes is not None:
        _outcome_metrics(out, outcomes)
    costs = snapshot.get("costs")
    if costs is not None:
        _cost_metrics(out, costs)
    return out.text()


class _Exposition:
    """The lines of one rendering, appended family by family in the order they are shown."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self, name: str, kind: str, help_text: str, samples: list[tuple[str, float]]
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        self.lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _queue_metrics(out: _Exposition, snapshot: dict[str, Any]) -> None:
    counts = snapshot["counts"]
    out.metric(
        "symphony_running",
        "gauge",
        "Issues with a live agent run.",
        [("", counts["running"])],
    )
    out.metric(
        "symphony_retrying",
        "gauge",
        "Issues waiting in the retry queue.",
        [("", counts["retrying"])],
    )


def _pull_request_metrics(out: _Exposition, pulls: list[dict[str, Any]]) -> None:
    out.metric(
        "symphony_pull_requests",
        "gauge",
        "Pull requests the daemon published, by state (open, merged, closed).",
        [
            (f'{{state="{state}"}}', sum(p["state"] == state for p in pulls))
            for state in ("open", "merged", "closed")
        ],
    )
    out.metric(
        "symphony_check_fixes",
        "gauge",
        "Fix runs started for failed checks, over the pull requests the daemon follows.",
        [("", sum(p["check_fixes"] for p in pulls))],
    )


def _run_metrics(out: _Exposition, health: dict[str, Any], totals: dict[str, Any]) -> None:
    out.metric(
        "symphony_dispatches_total",
        "counter",
        "Agent runs started.",
        [("", health.get("dispatched", 0))],
    )
    out.metric(
        "symphony_failures_total",
        "counter",
        "Failed agent runs by failing step.",
        [
            (_labels(reason=reason), count)
            for reason, count in sorted(health.get("failures", {}).items())
        ],
    )
    out.metric(
        "symphony_tokens_total",
        "counter",
        "Agent tokens used, by kind.",
        [(_labels(kind=kind), totals[f"{kind}_tokens"]) for kind in ("input", "output", "total")],
    )
    tick_ms = health.get("last_tick_ms")
    out.metric(
        "symphony_tick_duration_ms",
        "gauge",
        "Duration of the last poll tick in milliseconds (NaN before the first).",
        [("", math.nan if tick_ms is None else tick_ms)],
    )


def _tracker_metrics(out: _Exposition, tracker: dict[str, Any]) -> None:
    # A histogram's samples carry suffixes and raw counts, so it is written out by hand.
    out.lines.append("# HELP symphony_tracker_request_seconds Tracker read latency, by purpose.")
    out.lines.append("# TYPE symphony_tracker_request_seconds histogram")
    for operation, stats in tracker.items():
        by_operation = _labels(operation=operation)
        out.lines.extend(
            f"symphony_tracker_request_seconds_bucket{_labels(operation=operation, le=le)} {count}"
            for le, count in stats["buckets"].items()
        )
        out.lines.append(
            f"symphony_tracker_request_seconds_sum{by_operation} {_number(stats['seconds_sum'])}"
        )
        out.lines.append(f"symphony_tracker_request_seconds_count{by_operation} {stats['count']}")
    out.metric(
        "symphony_tracker_errors_total",
        "counter",
        "Failed tracker reads, by purpose and error category.",
        [
            (_labels(operation=operation, category=category), count)
            for operation, stats in tracker.items()
            for category, count in sorted(stats["errors"].items())
        ],
    )


def _review_metrics(out: _Exposition, review: dict[str, Any]) -> None:
    out.metric(
        "symphony_review_queue",
        "gauge",
        "Tickets waiting for a person's review (Plan Review, Human Review, ...).",
        [("", review.get("waiting", 0))],
    )
    out.metric(
        "symphony_review_queue_limit",
        "gauge",
        "agent.max_in_review: new tickets wait while the review queue is this long.",
        [("", review["limit"])],
    )
    out.metric(
        "symphony_held_for_review",
        "gauge",
        "Tickets that would be dispatched but wait for the review queue to shrink.",
        [("", review.get("held", 0))],
    )


def _host_metrics(out: _Exposition, hosts: list[dict[str, Any]]) -> None:
    out.metric(
        "symphony_host_up",
        "gauge",
        "1 while a worker host takes new work (an SSH host not marked down; the cluster "
        'host="kubernetes" while kubectl last reached it), else 0.',
        [(_labels(host=h["host"]), 1 if h["status"] == "up" else 0) for h in hosts],
    )
    out.metric(
        "symphony_host_running",
        "gauge",
        'Agents running on each SSH worker host; pods Ready for a run on host="kubernetes".',
        [(_labels(host=h["host"]), h["running"]) for h in hosts],
    )
    out.metric(
        "symphony_host_capacity",
        "gauge",
        'How many agents each SSH worker host takes at once; host="kubernetes": max_pods '
        "(else agent.max_concurrent_agents).",
        [(_labels(host=h["host"]), h["capacity"]) for h in hosts],
    )
    clusters = [h for h in hosts if h.get("kind") == "kubernetes"]
    if clusters:
        out.metric(
            "symphony_pods_pending",
            "gauge",
            "This workflow's pods the cluster's scheduler has no room for yet.",
            [(_labels(host=h["host"]), h["pending"]) for h in clusters],
        )


def _cost_metrics(out: _Exposition, costs: dict[str, Any]) -> None:
    by_model = costs["by_model"]
    out.metric(
        "symphony_cost_usd_total",
        "counter",
        "Cost of agent usage by model, in USD, of the tokens that had a price.",
        [(_labels(model=model), spend["usd"]) for model, spend in by_model.items()],
    )
    out.metric(
        "symphony_unpriced_tokens_total",
        "counter",
        "Tokens of models without a price (their cost is unknown), by model.",
        [(_labels(model=model), spend["unpriced_tokens"]) for model, spend in by_model.items()],
    )
    today = costs["today"]
    out.metric(
        "symphony_cost_usd_today",
        "gauge",
        "The fleet's spend so far today (UTC), in USD (NaN while some of it is unpriced).",
        [("", math.nan if today["known_usd"] is None else today["known_usd"])],
    )
    budget = costs["budget"]
    if budget["per_day_usd"] is not None:
        out.metric(
            "symphony_daily_budget_usd",
            "gauge",
            "budget.per_day_usd: no new work starts today once it is spent.",
            [("", budget["per_day_usd"])],
        )
        out.metric(
            "symphony_daily_budget_spent",
            "gauge",
            "1 while today's budget is spent and new dispatch is held, else 0.",
            [("", 1 if budget["daily_spent"] else 0)],
        )


def _outcome_metrics(out: _Exposition, outcomes: dict[str, Any]) -> None:
    days = outcomes["window_days"]
    summary = outcomes["summary"]
    window = f"over the last {days} days"

    def figure(value: float | None) -> float:
        return math.nan if value is None else value

    for name, key, what in (
        ("handoffs", "handoffs", "Hand-offs to review"),
        ("reworks", "reworks", "Rework rounds"),
        ("escalations", "escalations", "Tickets escalated (blocked, stuck, verification failed)"),
        ("accepted", "closed", "Tickets closed after review"),
    ):
        out.metric(f"symphony_outcome_{name}", "gauge", f"{what} {window}.", [("", summary[key])])
    for name, key, what in (
        ("first_pass_ratio", "first_pass_rate", "Closed tickets that needed no rework round"),
        ("rework_ratio", "rework_rate", "Rework rounds per hand-off"),
        ("handoff_seconds_median", "median_handoff_s", "Median time from stage entry to hand-off"),
        (
            "tokens_per_accepted",
            "tokens_per_accepted",
            "Mean tokens of a ticket closed after review",
        ),
        (
            "cost_per_accepted_usd",
            "cost_per_accepted_usd",
            "Mean cost of a ticket closed after review",
        ),
    ):
        out.metric(
            f"symphony_outcome_{name}",
            "gauge",
            f"{what} {window} (NaN without data).",
            [("", figure(summary[key]))],
        )
    out.metric(
        "symphony_gate_pass_ratio",
        "gauge",
        f"Share of verification rounds in which each gate passed, {window}.",
        [(_labels(gate=gate), figure(g["rate"])) for gate, g in summary["gates"].items()],
    )


def _number(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and not value.is_integer():
        return repr(round(value, 6))
    return str(int(value))


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

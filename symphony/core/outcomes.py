"""Outcome metrics: the figures a team steers its fleet by, from the daemon's own records.

The scheduling core notes what happens to tickets as `OutcomeRecord`s (hand-offs to review,
rework rounds, escalations, gate results, tickets closed after review); the store keeps them;
`summarize` turns a window of them into the figures `/metrics`, the dashboard and
`symphony report` show:

- handed to review: hand-offs into a review state (Plan Review, Human Review);
- first-pass acceptance: of the tickets closed after review, the share with no rework round;
- rework rate: rework rounds per hand-off;
- verify pass rate, per gate: rounds in which the gate passed;
- median time from a ticket's entry into a stage to its hand-off;
- tokens and cost per accepted ticket: over all its attempts, when it closed (a cost is
  unknown when a model had no price).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

HANDOFF = "handoff"
REWORK = "rework"
ESCALATED = "escalated"
GATE = "gate"
CLOSED = "closed"
MERGED = "merged"
CHECK_FIX = "check_fix"
"""A fix run started for failed checks."""
CHECK_FIXED = "check_fixed"
"""The checks were green on the head a check fix pushed."""
LIMITED = "limited"
"""An agent kind paused by its provider's limit (`core.limits`); `data`: agent, limit, until."""
RESUMED = "resumed"
"""An agent kind's pause lifted; `data`: agent, seconds (how long it was paused)."""


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """One thing that happened to a ticket that the outcome figures count (`kind`: a hand-off, a
    rework round, an escalation, a gate's result, a merge, ...), its details in `data`."""

    at: datetime
    kind: str
    issue_id: str
    identifier: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GateRate:
    """How often one gate passed in a window: the rounds it ran in, and those it passed."""

    runs: int
    passed: int

    @property
    def rate(self) -> float | None:
        return self.passed / self.runs if self.runs else None


@dataclass(frozen=True, slots=True)
class OutcomeSummary:
    """The outcome figures of a window of records (`summarize`), as `/metrics`, the dashboard and
    `symphony report` show them."""

    handoffs: int = 0
    reworks: int = 0
    escalations: int = 0
    closed: int = 0
    closed_first_pass: int = 0
    median_handoff_s: float | None = None
    tokens_per_accepted: float | None = None
    gates: Mapping[str, GateRate] = field(default_factory=dict)
    cost_per_accepted_usd: float | None = None
    """Mean cost of a ticket closed after review; None when any of them cost an unknown
    amount (a model without a price) or none closed."""
    merged: int = 0
    merged_without_rework: int = 0
    median_merge_s: float | None = None
    """Median time from the pull request's publishing to its merge."""
    check_fixes: int = 0
    checks_fixed: int = 0
    limited_s: float = 0.0
    """Time agents spent paused by their providers' limits (the pauses that lifted)."""

    @property
    def merged_without_rework_rate(self) -> float | None:
        return self.merged_without_rework / self.merged if self.merged else None

    @property
    def check_fix_rate(self) -> float | None:
        return self.checks_fixed / self.check_fixes if self.check_fixes else None

    @property
    def first_pass_rate(self) -> float | None:
        return self.closed_first_pass / self.closed if self.closed else None

    @property
    def rework_rate(self) -> float | None:
        return self.reworks / self.handoffs if self.handoffs else None

    def to_json(self) -> dict[str, Any]:
        return {
            "handoffs": self.handoffs,
            "reworks": self.reworks,
            "escalations": self.escalations,
            "closed": self.closed,
            "closed_first_pass": self.closed_first_pass,
            "first_pass_rate": self.first_pass_rate,
            "rework_rate": self.rework_rate,
            "median_handoff_s": self.median_handoff_s,
            "tokens_per_accepted": self.tokens_per_accepted,
            "cost_per_accepted_usd": self.cost_per_accepted_usd,
            "merged": self.merged,
            "merged_without_rework_rate": self.merged_without_rework_rate,
            "median_merge_s": self.median_merge_s,
            "check_fixes": self.check_fixes,
            "check_fix_rate": self.check_fix_rate,
            "gates": {
                name: {"runs": g.runs, "passed": g.passed, "rate": g.rate}
                for name, g in sorted(self.gates.items())
            },
        }


def summarize(records: Iterable[OutcomeRecord]) -> OutcomeSummary:
    handoffs = reworks = escalations = closed = first_pass = 0
    durations: list[float] = []
    tokens: list[int] = []
    costs: list[float | None] = []
    gates: dict[str, list[int]] = {}
    merges: list[OutcomeRecord] = []
    fixes = fixed = 0
    limited_s = 0.0
    for record in records:
        data = record.data
        if record.kind == HANDOFF:
            handoffs += 1
            seconds = data.get("seconds")
            if isinstance(seconds, int | float):
                durations.append(float(seconds))
        elif record.kind == REWORK:
            reworks += 1
        elif record.kind == ESCALATED:
            escalations += 1
        elif record.kind == CLOSED:
            closed += 1
            first_pass += 1 if data.get("first_pass") else 0
            if isinstance(data.get("tokens"), int):
                tokens.append(data["tokens"])
            cost = data.get("cost_usd")
            costs.append(float(cost) if isinstance(cost, int | float) else None)
        elif record.kind == GATE:
            counts = gates.setdefault(str(data.get("gate")), [0, 0])
            counts[0] += 1
            counts[1] += 1 if data.get("passed") else 0
        elif record.kind == MERGED:
            merges.append(record)
        elif record.kind == CHECK_FIX:
            fixes += 1
        elif record.kind == CHECK_FIXED:
            fixed += 1
        elif record.kind == RESUMED and isinstance(data.get("seconds"), int | float):
            limited_s += float(data["seconds"])
    merge_times = [
        float(m.data["seconds"]) for m in merges if isinstance(m.data.get("seconds"), int | float)
    ]
    return OutcomeSummary(
        handoffs,
        reworks,
        escalations,
        closed,
        first_pass,
        _median(durations),
        math.fsum(tokens) / len(tokens) if tokens else None,
        {name: GateRate(runs, passed) for name, (runs, passed) in gates.items()},
        _mean_known(costs),
        merged=len(merges),
        merged_without_rework=sum(not m.data.get("rework") for m in merges),
        median_merge_s=_median(merge_times),
        check_fixes=fixes,
        checks_fixed=fixed,
        limited_s=limited_s,
    )


def _mean_known(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return math.fsum(known := [v for v in values if v is not None]) / len(known)


def daily(
    records: Iterable[OutcomeRecord], *, end: datetime, days: int
) -> list[tuple[str, OutcomeSummary]]:
    """One summary per UTC day, oldest first, for the `days` days up to `end` (the plots)."""
    first = (end - timedelta(days=days - 1)).date()
    buckets: dict[str, list[OutcomeRecord]] = {
        (first + timedelta(days=n)).isoformat(): [] for n in range(days)
    }
    for record in records:
        key = record.at.date().isoformat()
        if key in buckets:
            buckets[key].append(record)
    return [(day, summarize(rows)) for day, rows in buckets.items()]


def _median(values: Sequence[float]) -> float | None:
    """The middle value, or the mean of the middle two; None for none (as `statistics.median`,
    whose module and its imports a daemon summarizing at start-up need not load)."""
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def outcome_report(
    records: Iterable[OutcomeRecord], *, end: datetime, window_days: int, plot_days: int
) -> dict[str, Any]:
    """The figures of the last `window_days`, and one set per day for `plot_days` (JSON)."""
    rows = list(records)
    start = end - timedelta(days=window_days)
    return {
        "window_days": window_days,
        "summary": summarize(r for r in rows if r.at >= start).to_json(),
        "daily": [
            {"day": day, **summary.to_json()}
            for day, summary in daily(rows, end=end, days=plot_days)
        ],
    }

"""The daemon's health: what it keeps while it runs, and what a supervisor asks of it.

Kept: its problems and counts (`Health`), and the timings of its tracker reads
(`TrackerRequests`, by what each read is for: candidates, reconcile, ...; failures counted by
error category). Plain data the orchestrator owns, shown by the snapshot and `/metrics`, which
load only with a surface that asks.

Asked (systemd's watchdog, Kubernetes' probes): is the loop turning (`/livez`), and can the
daemon do its work (`/readyz`)? Live is answered by the event loop itself: a handler that runs
proves it turns. Ready needs a first poll done, the store saving and the tracker answering at
its last read; a WORKFLOW.md rejected on reload is reported but leaves the daemon ready, since
it runs on its last good settings and a restart would not help.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds of the tracker latency histogram; a poll read takes tens of ms to seconds."""


@dataclass(slots=True)
class RequestStats:
    """The timings of one kind of tracker read: counts, seconds, a histogram, errors by category."""

    count: int = 0
    seconds_sum: float = 0.0
    last_seconds: float = 0.0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    """Per-bucket (not cumulative) counts; the last one is above every bound."""
    errors: dict[str, int] = field(default_factory=dict)


class TrackerRequests:
    def __init__(self) -> None:
        self.by_operation: dict[str, RequestStats] = {}

    def record(self, operation: str, seconds: float, error_category: str | None = None) -> None:
        stats = self.by_operation.setdefault(operation, RequestStats())
        stats.count += 1
        stats.seconds_sum += seconds
        stats.last_seconds = seconds
        stats.bucket_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        if error_category is not None:
            stats.errors[error_category] = stats.errors.get(error_category, 0) + 1

    def as_json(self) -> dict[str, Any]:
        """Per operation: count, errors by category, total and last seconds, cumulative buckets."""
        result: dict[str, Any] = {}
        for operation, stats in sorted(self.by_operation.items()):
            bounds = [repr(bound) for bound in LATENCY_BUCKETS_S] + ["+Inf"]
            cumulative = dict(zip(bounds, itertools.accumulate(stats.bucket_counts), strict=True))
            result[operation] = {
                "count": stats.count,
                "errors": dict(stats.errors),
                "seconds_sum": round(stats.seconds_sum, 6),
                "last_seconds": round(stats.last_seconds, 6),
                "buckets": cumulative,
            }
        return result


@dataclass(slots=True)
class Health:
    """Operator-visible problems (each None while things are fine) and counts; the daemon
    updates it, the snapshot shows it."""

    workflow_error: str | None = None
    workflow_error_fingerprint: str | None = None
    workflow_error_since: datetime | None = None
    """Since when the daemon runs on its last good settings (the first rejection)."""
    store_error: str | None = None
    tracker_error: str | None = None
    last_tick_at: datetime | None = None
    last_tick_ms: float | None = None
    dispatched: int = 0
    failures: dict[str, int] = field(default_factory=dict)

    def failed(self, category: enum.Enum | None) -> None:
        """Count a run that ended in failure, by its category (None: it did not fail)."""
        if category is not None:
            self.failures[category.value] = self.failures.get(category.value, 0) + 1


def unready(snapshot: Mapping[str, Any]) -> list[str]:
    """Why a workflow's daemon is not ready, in words; empty when it is."""
    health = snapshot.get("health") or {}
    reasons = []
    if health.get("last_tick_at") is None:
        reasons.append("its first poll has not finished")
    if health.get("store_error"):
        reasons.append(f"its state cannot be saved: {health['store_error']}")
    if health.get("tracker_error"):
        reasons.append(f"its tracker did not answer at the last read: {health['tracker_error']}")
    return reasons


def notes(snapshot: Mapping[str, Any]) -> list[str]:
    """What is wrong without making it unready."""
    health = snapshot.get("health") or {}
    found = []
    if health.get("workflow_error"):
        where = health.get("workflow_error_path") or "WORKFLOW.md"
        since = health.get("workflow_error_since")
        when = f" at {since}" if since else ""
        found.append(
            f"{where} was rejected{when}; the daemon runs on its last good settings until it "
            f"is fixed: {health['workflow_error']}"
        )
    for limit in snapshot.get("limits") or []:
        found.append(f"{limit['says']}: no run starts on it until then")
    return found

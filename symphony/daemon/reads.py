"""Tracker reads as the loop makes them.

Each read is timed per operation (`/metrics`); an adapter's bug becomes a tracker error that costs
one poll, never the daemon; a failing tracker is reported once per distinct error and shown in
the health until a read works again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar

import structlog

from symphony.daemon.events import Clock
from symphony.observability.activity import Activity
from symphony.observability.health import Health, TrackerRequests
from symphony.tracker.contract import TRACKER_INTERNAL, TrackerError

log = structlog.get_logger("symphony.orchestrator")

T = TypeVar("T")


class TrackerReads:
    def __init__(
        self, requests: TrackerRequests, health: Health, activity: Activity, clock: Clock
    ) -> None:
        self.requests = requests
        self._health = health
        self._activity = activity
        self._clock = clock

    async def read(self, operation: str, request: Awaitable[T]) -> T:
        """The answer to `request`, its time recorded under `operation`."""
        started = time.perf_counter()
        try:
            result = await request
        except TrackerError as exc:
            self.requests.record(operation, time.perf_counter() - started, exc.category)
            raise
        except Exception as exc:
            self.requests.record(operation, time.perf_counter() - started, TRACKER_INTERNAL)
            log.exception("tracker adapter failed unexpectedly")
            raise TrackerError(TRACKER_INTERNAL, f"adapter failed: {exc!r}") from exc
        self.requests.record(operation, time.perf_counter() - started)
        return result

    def failed(self, exc: TrackerError, consequence: str) -> None:
        """Say what a failed read costs, once per distinct error."""
        if self._health.tracker_error != str(exc):
            log.error(consequence, reason=str(exc))
            self._activity.add(self._clock.wall(), "tracker_failed", str(exc), level="error")
        self._health.tracker_error = str(exc)

    def worked(self) -> None:
        """A read that tells whether the tracker works (the candidates) succeeded."""
        if self._health.tracker_error is not None:
            log.info("tracker recovered")
            self._activity.add(self._clock.wall(), "tracker_recovered", "tracker reads work again")
            self._health.tracker_error = None

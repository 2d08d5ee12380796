"""A clock that moves only when the test moves it, for the orchestrator's timers (retries,
stalls, polls): `advance` and then wake the loop (`request_refresh`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    def __init__(self, start: float = 1_000.0, wall: datetime | None = None) -> None:
        self.now = start
        self._start = start
        self._wall = wall or datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return self._wall + timedelta(seconds=self.now - self._start)

    def advance(self, seconds: float) -> None:
        self.now += seconds

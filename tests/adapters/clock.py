"""A fake wall clock with a sleep that advances it, for the adapters' HTTP clients and limiters."""

from __future__ import annotations


class FakeClock:
    """`clock()` reads the time; `await clock.sleep(s)` records `s` and moves the time on."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds

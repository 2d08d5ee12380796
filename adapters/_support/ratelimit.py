"""A sliding-window request limiter that holds as the provider counts: by arrival time.

A provider that allows N requests per window (Kaiten: 5 per second) counts requests when they
arrive, not when they were sent. Spacing sends evenly is not enough: a request that also opens
the connection arrives late, the ones behind it arrive on time, and N + 1 can land inside one
window. The limiter therefore reasons about what it knows for certain: a request arrives after
it was sent and before its answer comes back. A request occupies the window from the moment it
is sent until `window + margin` after its answer arrived (until then it may still be counted),
and a new request is sent only while fewer than N requests occupy it. For any N + 1 requests,
the last one sent left only after the first one's answer came back plus a whole window, so
their arrivals are always more than a window apart, whatever the network did.

One limiter serves every request of one credential: `shared_limiter` returns the same instance
for the same key (and clock), so a tracker rebuilt by a workflow reload and the sessions still
running with the old one draw on one budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Request:
    """A request in the window: held from its send until `window + margin` after its answer."""

    sent_at: float
    answered_at: float | None = None


class SlidingWindowLimiter:
    """At most `limit` requests in any `window_s` seconds of their arrival at the provider."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        margin_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError("a limiter needs limit >= 1 and window_s > 0")
        self.limit = limit
        self.window_s = window_s
        self.margin_s = margin_s
        self.clock = clock
        self.sleep = sleep
        self._requests: deque[_Request] = deque()
        # Made in the loop that first uses them: a tracker is often built before the loop runs.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turn = asyncio.Lock()  # waiters are served in the order they asked
        self._answered = asyncio.Event()
        self.waited_s = 0.0
        """Total time callers spent waiting for a slot (for benchmarks and logs)."""

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for room, then hold it while the request is sent and answered."""
        request = await self._acquire()
        try:
            yield
        finally:
            request.answered_at = self.clock()
            self._answered.set()

    def occupied(self) -> int:
        """Requests that may still count in the current window (sent and not yet expired)."""
        self._expire(self.clock())
        return len(self._requests)

    async def _acquire(self) -> _Request:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._turn, self._answered = loop, asyncio.Lock(), asyncio.Event()
        async with self._turn:
            while True:
                now = self.clock()
                self._expire(now)
                if len(self._requests) < self.limit:
                    request = _Request(now)
                    self._requests.append(request)
                    return request
                expiries = [
                    r.answered_at + self.window_s + self.margin_s
                    for r in self._requests
                    if r.answered_at is not None
                ]
                started = now
                if expiries:
                    await self.sleep(max(min(expiries) - now, 0.0))
                else:
                    # Every slot is held by a request still in flight: its answer starts the
                    # countdown, so wait for one.
                    self._answered.clear()
                    await self._answered.wait()
                self.waited_s += max(self.clock() - started, 0.0)

    def _expire(self, now: float) -> None:
        hold = self.window_s + self.margin_s
        self._requests = deque(
            r for r in self._requests if r.answered_at is None or r.answered_at + hold > now
        )


_shared: weakref.WeakValueDictionary[tuple[str, object], SlidingWindowLimiter] = (
    weakref.WeakValueDictionary()
)


def shared_limiter(
    provider: str,
    credential: str,
    limit: int,
    window_s: float,
    *,
    margin_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> SlidingWindowLimiter:
    """The one limiter of `credential` at `provider` (a name plus the API root), created on
    first use. Limiters on other clocks (tests) are kept apart."""
    digest = hashlib.sha256(f"{provider}\0{credential}".encode()).hexdigest()
    key = (digest, clock)
    limiter = _shared.get(key)
    if limiter is None or limiter.sleep != sleep:
        limiter = SlidingWindowLimiter(limit, window_s, margin_s=margin_s, clock=clock, sleep=sleep)
        _shared[key] = limiter
    return limiter

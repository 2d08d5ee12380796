"""The sliding-window limiter: at most N requests in any window of their *arrival*, whatever the
network does between send and answer; one limiter per credential; every retry counted."""

from __future__ import annotations

import asyncio
import random

import httpx
import respx

from symphony_adapters._support.http import HttpClient
from symphony_adapters._support.ratelimit import SlidingWindowLimiter, shared_limiter
from tests.adapters.clock import FakeClock

BASE = "https://api.example.test"


def limiter(clock: FakeClock, margin: float = 0.0) -> SlidingWindowLimiter:
    return SlidingWindowLimiter(5, 1.0, margin_s=margin, clock=clock, sleep=clock.sleep)


def max_in_any_window(times: list[float], window: float = 1.0) -> int:
    ordered = sorted(times)
    return max(sum(1 for t in ordered[i:] if t < start + window) for i, start in enumerate(ordered))


async def test_a_burst_goes_at_once_up_to_the_limit_then_waits_a_window() -> None:
    clock = FakeClock()
    limit = limiter(clock, margin=0.1)
    start = clock.now
    sent: list[float] = []
    for _ in range(11):
        async with limit.slot():
            sent.append(clock.now - start)
    assert [round(t, 6) for t in sent] == [0.0] * 5 + [1.1] * 5 + [2.2]


async def test_arrivals_never_exceed_the_limit_whatever_the_latency() -> None:
    # Each request arrives somewhere between its send and its answer: a first request that
    # opens a connection arrives late, the ones behind it early. Seeded, so repeatable.
    rng = random.Random(7)
    clock = FakeClock()
    limit = limiter(clock)
    arrivals: list[float] = []
    for n in range(300):
        async with limit.slot():
            latency = rng.choice([0.0, 0.01, 0.05, 0.3, 0.9]) if n % 7 else 1.5
            sent = clock.now
            await clock.sleep(latency)
            arrivals.append(sent + latency * rng.choice([0.0, 0.5, 1.0]))
    assert max_in_any_window(arrivals) <= 5


async def test_requests_still_in_flight_hold_their_place_until_answered() -> None:
    clock = FakeClock()
    limit = limiter(clock)
    release = asyncio.Event()
    holding = 0

    async def slow_request() -> None:
        nonlocal holding
        async with limit.slot():
            holding += 1
            await release.wait()

    tasks = [asyncio.create_task(slow_request()) for _ in range(5)]
    while holding < 5:
        await asyncio.sleep(0)
    sixth_sent: list[float] = []

    async def sixth() -> None:
        async with limit.slot():
            sixth_sent.append(clock.now)

    waiter = asyncio.create_task(sixth())
    for _ in range(20):
        await asyncio.sleep(0)
    assert sixth_sent == [] and limit.occupied() == 5
    clock.now += 30  # however long they took, the window starts at their answer
    answered_at = clock.now
    release.set()
    await asyncio.gather(*tasks, waiter)
    assert sixth_sent == [answered_at + 1.0]


async def test_concurrent_callers_are_served_in_order_within_the_limit() -> None:
    clock = FakeClock()
    limit = limiter(clock)
    order: list[tuple[int, float]] = []

    async def request(n: int) -> None:
        async with limit.slot():
            order.append((n, clock.now))

    await asyncio.gather(*(request(n) for n in range(12)))
    assert [n for n, _ in order] == list(range(12))
    assert max_in_any_window([t for _, t in order]) <= 5


def test_one_limiter_per_credential_and_clock() -> None:
    clock = FakeClock()
    first = shared_limiter("https://a", "token-1", 5, 1.0, clock=clock, sleep=clock.sleep)
    again = shared_limiter("https://a", "token-1", 5, 1.0, clock=clock, sleep=clock.sleep)
    other = shared_limiter("https://a", "token-2", 5, 1.0, clock=clock, sleep=clock.sleep)
    elsewhere = shared_limiter("https://b", "token-1", 5, 1.0, clock=clock, sleep=clock.sleep)
    assert first is again
    assert other is not first and elsewhere is not first


@respx.mock
async def test_every_request_and_retry_of_a_client_goes_through_its_limiter() -> None:
    clock = FakeClock()
    sent: list[float] = []
    answers = iter([httpx.Response(503)] + [httpx.Response(200, json={})] * 10)

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now)
        return next(answers)

    respx.get(f"{BASE}/x").mock(side_effect=answer)
    http = HttpClient(
        provider="Example",
        base_url=BASE,
        headers={},
        clock=clock,
        sleep=clock.sleep,
        backoff_s=0.0,
        limiter=limiter(clock),
    )
    for _ in range(6):
        await http.request("GET", "/x")
    assert len(sent) == 7  # six requests, one of them retried
    assert max_in_any_window(sent) <= 5

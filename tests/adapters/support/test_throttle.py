"""The shared client's optional request throttle (`min_interval_s`): requests are spaced at
least that far apart across every caller, on the client's own clock; off by default."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import respx

from adapters._support.http import HttpClient

BASE = "https://api.example.test"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def client(clock: FakeClock, interval: float = 0.0) -> HttpClient:
    return HttpClient(
        provider="Example",
        base_url=BASE,
        headers={},
        clock=clock,
        sleep=clock.sleep,
        min_interval_s=interval,
        backoff_s=0.0,
    )


def record_times(clock: FakeClock, route: respx.Route) -> list[float]:
    sent: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now)
        return httpx.Response(200, json={})

    route.mock(side_effect=answer)
    return sent


@respx.mock
async def test_without_an_interval_requests_go_at_once() -> None:
    clock = FakeClock()
    sent = record_times(clock, respx.get(f"{BASE}/x"))
    http = client(clock)
    for _ in range(3):
        await http.request("GET", "/x")
    assert clock.slept == []
    assert sent == [clock.now] * 3


@respx.mock
async def test_sequential_requests_are_spaced_by_the_interval() -> None:
    clock = FakeClock()
    start = clock.now
    sent = record_times(clock, respx.get(f"{BASE}/x"))
    http = client(clock, 0.2)
    for _ in range(4):
        await http.request("GET", "/x")
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(sent)]
    assert sent[0] == start  # the first request does not wait
    assert gaps == [0.2, 0.2, 0.2]


@respx.mock
async def test_time_already_passed_counts_towards_the_interval() -> None:
    clock = FakeClock()
    record_times(clock, respx.get(f"{BASE}/x"))
    http = client(clock, 0.2)
    await http.request("GET", "/x")
    clock.now += 0.15
    await http.request("GET", "/x")
    clock.now += 1.0
    await http.request("GET", "/x")
    assert clock.slept == [0.05]


@respx.mock
async def test_concurrent_callers_queue_one_interval_apart() -> None:
    clock = FakeClock()
    start = clock.now
    sent = record_times(clock, respx.get(f"{BASE}/x"))
    http = client(clock, 0.2)
    await asyncio.gather(*(http.request("GET", "/x") for _ in range(3)))
    # Each caller reserved the next free slot before sleeping, so none went early.
    assert [round(t - start, 6) for t in sorted(sent)] == [0.0, 0.2, 0.4]


@respx.mock
async def test_retries_are_throttled_too() -> None:
    clock = FakeClock()
    sent: list[float] = []
    responses = iter([httpx.Response(503), httpx.Response(200, json={})])

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now)
        return next(responses)

    respx.get(f"{BASE}/x").mock(side_effect=answer)
    await client(clock, 0.2).request("GET", "/x")
    assert len(sent) == 2 and round(sent[1] - sent[0], 6) >= 0.2

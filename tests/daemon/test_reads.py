"""Tracker reads as the loop makes them: timed by operation, an adapter's bug turned into a
tracker error, and a failing tracker reported once per distinct error until it works again."""

from __future__ import annotations

import pytest

from symphony.daemon.reads import TrackerReads
from symphony.observability.activity import Activity
from symphony.observability.health import Health, TrackerRequests
from symphony.tracker.contract import TRACKER_INTERNAL, TRACKER_STATUS, TrackerError
from tests.fakes.clock import FakeClock


def reads() -> tuple[TrackerReads, Health, Activity]:
    health, activity = Health(), Activity()
    return TrackerReads(TrackerRequests(), health, activity, FakeClock()), health, activity


async def answer(value: int) -> int:
    return value


async def fail(exc: Exception) -> int:
    raise exc


async def test_a_read_is_counted_under_its_operation() -> None:
    reader, _, _ = reads()
    assert await reader.read("candidates", answer(3)) == 3
    stats = reader.requests.as_json()["candidates"]
    assert stats["count"] == 1 and stats["errors"] == {}


async def test_a_tracker_error_is_counted_by_its_category_and_raised() -> None:
    reader, _, _ = reads()
    with pytest.raises(TrackerError):
        await reader.read("reconcile", fail(TrackerError(TRACKER_STATUS, "502")))
    assert reader.requests.as_json()["reconcile"]["errors"] == {TRACKER_STATUS: 1}


async def test_an_adapter_bug_becomes_an_internal_tracker_error() -> None:
    reader, _, _ = reads()
    with pytest.raises(TrackerError) as raised:
        await reader.read("candidates", fail(KeyError("labels")))
    assert raised.value.category == TRACKER_INTERNAL
    assert "KeyError" in str(raised.value)
    assert reader.requests.as_json()["candidates"]["errors"] == {TRACKER_INTERNAL: 1}


def test_a_failing_tracker_is_told_once_per_error_and_once_when_it_recovers() -> None:
    reader, health, activity = reads()
    down = TrackerError(TRACKER_STATUS, "GitHub answered 502")
    reader.failed(down, "candidate fetch failed")
    reader.failed(down, "candidate fetch failed")
    assert health.tracker_error is not None and "502" in health.tracker_error
    reader.failed(TrackerError(TRACKER_STATUS, "GitHub answered 503"), "candidate fetch failed")
    reader.worked()
    reader.worked()
    events = [row["event"] for row in reversed(activity.newest())]
    assert events == ["tracker_failed", "tracker_failed", "tracker_recovered"]
    assert health.tracker_error is None

"""Notify benchmark: what telling a person adds to the daemon, per event.

Three costs are measured on this machine, each as the median over many events:

- deciding: an outcome record becoming a notice and its deliveries (`core.notifications`),
  the work the orchestrator adds to a save;
- queueing: the save of a pass that carries one delivery, against the same save without it
  (a real SQLite file in WAL mode, the store's own transaction);
- sending: the notifier taking one due delivery from the store, composing it, posting it to a
  webhook receiver on 127.0.0.1 (a real HTTP server in this process's threads, answering 200
  at once) and marking it sent; mostly the HTTP round trip.

Target: under 1 ms of the loop's time per event (deciding and queueing; sending runs in its
own task, off the loop's path). Run from the repository root: `python bench/notify.py`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import logging

import httpx
import structlog

from symphony.base.secrets import SecretMasker
from symphony.config.notify import Channel, ChannelKind, NotifySettings
from symphony.core import notifications
from symphony.core.outcomes import HANDOFF, OutcomeRecord
from symphony.core.state import SchedulerState
from symphony.daemon.notify import Notifier
from symphony.observability.activity import Activity
from symphony.store import Store
from tests.fakes.clock import FakeClock
from tests.fakes.receivers import hook_receiver

EVENTS = 500
TARGET_MS = 1.0


def record(n: int, at: datetime) -> OutcomeRecord:
    return OutcomeRecord(at, HANDOFF, f"id-{n}", f"DEMO-{n}",
                         {"stage": "implement", "state": "Human Review"})  # fmt: skip


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    wall = datetime(2026, 12, 4, tzinfo=UTC)
    with hook_receiver() as receiver, tempfile.TemporaryDirectory() as folder:
        settings = NotifySettings((Channel("team", ChannelKind.WEBHOOK, url=receiver.url),))
        deciding = []
        for n in range(EVENTS):
            started = time.perf_counter()
            notifications.route(notifications.from_outcomes([record(n, wall)]), settings)
            deciding.append(time.perf_counter() - started)

        store, _ = Store.open(Path(folder) / "state.db")
        state = SchedulerState()
        plain, carrying = [], []
        for n in range(EVENTS):
            at = wall + timedelta(seconds=n)
            started = time.perf_counter()
            store.save(state, float(n), at)
            plain.append(time.perf_counter() - started)
            deliveries = notifications.route(notifications.from_outcomes([record(n, at)]), settings)
            started = time.perf_counter()
            store.save(state, float(n), at, deliveries=deliveries)
            carrying.append(time.perf_counter() - started)

        clock = FakeClock(wall=wall + timedelta(days=1))
        notifier = Notifier(store, lambda: settings, lambda: "http://127.0.0.1:8080", clock,
                            Activity(), SecretMasker())  # fmt: skip
        sending = []
        async with httpx.AsyncClient() as client:
            while await notifier.deliver_due(client):  # the backlog; the connection stays open
                pass
            for n in range(EVENTS):
                at = clock.wall()
                store.save(state, float(n), at, deliveries=notifications.route(
                    notifications.from_outcomes([record(EVENTS + n, at)]), settings))  # fmt: skip
                started = time.perf_counter()
                assert await notifier.deliver_due(client) == 1
                sending.append(time.perf_counter() - started)
                clock.advance(1)
        store.close()
        assert len(receiver.taken()) == 2 * EVENTS

    decide_ms = median_ms(deciding)
    queue_ms = median_ms(carrying) - median_ms(plain)
    print(f"events measured           {EVENTS} each")
    print(f"deciding (notice, route)  {decide_ms * 1000:8.1f} µs per event")
    print(f"save without a delivery   {median_ms(plain):8.3f} ms")
    print(f"save with one delivery    {median_ms(carrying):8.3f} ms  (+{queue_ms:.3f} ms)")
    print(f"sending (read, POST, mark){median_ms(sending):8.3f} ms per event, in its own task")
    loop_ms = decide_ms + queue_ms
    print(f"added to the loop         {loop_ms:8.3f} ms per event "
          f"(target < {TARGET_MS} ms: {'met' if loop_ms < TARGET_MS else 'MISSED'})")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())

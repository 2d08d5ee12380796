"""The notifier over a real store and real receivers: every notice arrives once, through a
receiver that fails and recovers, across a restart and a kill -9, and digests batch. Time is a
fake clock: the backoff is stepped through, never slept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from symphony.base.secrets import SecretMasker
from symphony.config.notify import Channel, ChannelKind, NoticeEvent, NotifySettings
from symphony.core import notifications
from symphony.core.notifications import Notice
from symphony.core.state import SchedulerState
from symphony.daemon.notify import Notifier
from symphony.observability.activity import Activity
from symphony.store import Store
from tests.fakes.clock import FakeClock
from tests.fakes.receivers import HookReceiver, hook_receiver


@pytest.fixture
def receiver() -> Iterator[HookReceiver]:
    with hook_receiver() as running:
        yield running


def settings_for(url: str, *, digest: int = 0) -> NotifySettings:
    return NotifySettings((Channel("team", ChannelKind.WEBHOOK, digest_minutes=digest, url=url),))


def notice(n: int, clock: FakeClock) -> Notice:
    return Notice(
        f"review_waiting:id-{n}:{clock.wall().isoformat()}", NoticeEvent.REVIEW_WAITING,
        clock.wall(), f"ABC-{n}: its plan waits for your review in Plan Review",
        identifier=f"ABC-{n}",
    )  # fmt: skip


def queue(store: Store, settings: NotifySettings, clock: FakeClock, *notices: Notice) -> None:
    """What the orchestrator's save does: the pass's state and its deliveries together."""
    deliveries = notifications.route(list(notices), settings)
    store.save(SchedulerState(), clock.monotonic(), clock.wall(), deliveries=deliveries)


def notifier(store: Store | None, settings: NotifySettings, clock: FakeClock) -> Notifier:
    activity = Activity()
    return Notifier(
        store, lambda: settings, lambda: "http://127.0.0.1:8080", clock, activity, SecretMasker()
    )


def keys(receiver: HookReceiver) -> list[str]:
    return [n["key"] for got in receiver.taken() for n in got.json()["notices"]]


async def test_a_receiver_that_fails_three_times_then_recovers_gets_each_notice_once(
    tmp_path: Path, receiver: HookReceiver
) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    clock, settings = FakeClock(), settings_for(receiver.url)
    first, second = notice(1, clock), notice(2, clock)
    queue(store, settings, clock, first, second)
    sender = notifier(store, settings, clock)
    receiver.fail = 3
    async with httpx.AsyncClient() as client:
        for attempt in range(1, 4):
            assert await sender.deliver_due(client) == 0
            (status,) = sender.status()
            assert status["attempts"] == attempt and status["pending"] == 2
            assert "answered 500" in status["error"]
            # Not due again before its backoff: a round in between tries nothing.
            assert await sender.deliver_due(client) == 0
            clock.advance((notifications.retry_at(clock.wall(), attempt) - clock.wall()).seconds)
        assert sender.status()[0]["failing"] is True
        assert await sender.deliver_due(client) == 2
        assert await sender.deliver_due(client) == 0
    assert keys(receiver) == [first.key, second.key]
    assert receiver.attempts == 5  # three refused, then one each
    (status,) = sender.status()
    assert (status["pending"], status["sent"], status["failing"]) == (0, 2, False)
    messages = [row["message"] for row in sender._activity.newest()]
    assert any("keeps failing (3 attempts)" in m for m in messages)
    assert any("sends again" in m for m in messages)
    store.close()


async def test_a_restart_sends_nothing_twice_and_a_notice_is_queued_once(
    tmp_path: Path, receiver: HookReceiver
) -> None:
    clock, settings = FakeClock(), settings_for(receiver.url)
    store, _ = Store.open(tmp_path / "state.db")
    waiting = notice(1, clock)
    queue(store, settings, clock, waiting)
    async with httpx.AsyncClient() as client:
        assert await notifier(store, settings, clock).deliver_due(client) == 1
        store.close()
        store, _ = Store.open(tmp_path / "state.db")
        queue(store, settings, clock, waiting)  # the same record saved again: ignored
        assert await notifier(store, settings, clock).deliver_due(client) == 0
    assert keys(receiver) == [waiting.key]
    store.close()


async def test_a_digest_waits_for_its_window_and_sends_one_message(
    tmp_path: Path, receiver: HookReceiver
) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    clock, settings = FakeClock(), settings_for(receiver.url, digest=15)  # 12:00 sharp
    sender = notifier(store, settings, clock)
    async with httpx.AsyncClient() as client:
        for n in range(3):
            queue(store, settings, clock, notice(n, clock))
            clock.advance(240)
            assert await sender.deliver_due(client) == 0
        clock.advance(180)  # 12:15: the window closes
        assert await sender.deliver_due(client) == 1
    (message,) = receiver.taken()
    assert message.json()["digest"] is True and len(message.json()["notices"]) == 3
    assert message.headers["x-symphony-event"] == "digest"
    store.close()


async def test_without_a_store_notices_are_sent_from_memory(receiver: HookReceiver) -> None:
    clock, settings = FakeClock(), settings_for(receiver.url)
    sender = notifier(None, settings, clock)
    sender.hold(notifications.route([notice(1, clock)], settings))
    async with httpx.AsyncClient() as client:
        assert await sender.deliver_due(client) == 1
    assert sender.status()[0]["sent"] == 1 and len(receiver.taken()) == 1


async def test_a_removed_channel_drops_what_it_had_pending(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    clock = FakeClock()
    old = settings_for("http://127.0.0.1:9/hook")
    queue(store, old, clock, notice(1, clock))
    async with httpx.AsyncClient() as client:
        assert await notifier(store, NotifySettings(), clock).deliver_due(client) == 0
    assert store.notifications.due(clock.wall()) == []
    store.close()


KILLED_SENDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import httpx
    from tests.daemon.test_notify import notice, notifier, queue, settings_for
    from tests.fakes.clock import FakeClock
    from symphony.store import Store

    async def main():
        store, _ = Store.open(Path(sys.argv[1]))
        clock, settings = FakeClock(), settings_for(sys.argv[2])
        queue(store, settings, clock, notice(1, clock))
        print("queued", flush=True)
        async with httpx.AsyncClient() as client:
            await notifier(store, settings, clock).deliver_due(client)  # hangs: killed here

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_a_kill_9_between_queueing_and_sending_loses_nothing_and_repeats_nothing(
    tmp_path: Path, receiver: HookReceiver
) -> None:
    import threading

    receiver.hang = threading.Event()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "HOME": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SENDER, str(tmp_path / "state.db"), receiver.url],
        stdout=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "queued"
    deadline = time.monotonic() + 20
    while receiver.attempts == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert receiver.attempts == 1  # the request is in flight, unanswered
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    receiver.hang.set()
    receiver.hang = None
    store, _ = Store.open(tmp_path / "state.db")
    clock = FakeClock()
    clock.advance(timedelta(hours=1).total_seconds())
    async with httpx.AsyncClient() as client:
        sender = notifier(store, settings_for(receiver.url), clock)
        assert await sender.deliver_due(client) == 1
        assert await sender.deliver_due(client) == 0
    assert keys(receiver) == [notice(1, FakeClock()).key]
    store.close()

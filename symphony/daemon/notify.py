"""The notifier: sends what the outbox holds when it is due, one task beside the loop.

The orchestrator queues deliveries in the store with the pass that saved what they tell
(`Store.save(deliveries=...)`) and wakes the notifier; it reads what is due, sends each batch
(`symphony.core.notifications.batches`) through its channel's sender, and marks it sent, or
failed with its next attempt (`retry_at`). Channels are tried side by side, so one slow
receiver does not hold up the others. Without a store (or for the store's own failure, which
the store cannot hold) deliveries wait in memory instead. A channel that keeps failing is said
once in the log and the activity feed and shows on the dashboard until it recovers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from symphony.base.secrets import SecretMasker
from symphony.config.notify import Channel, NotifySettings
from symphony.core.notifications import FAILING_AFTER, Delivery, batches, retry_at
from symphony.daemon.events import Clock
from symphony.notify import NotifyError
from symphony.notify.message import Message, compose
from symphony.observability.activity import Activity
from symphony.store import Store

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger("symphony.notify")

Sender = Callable[[Channel, Message, "httpx.AsyncClient"], Awaitable[None]]

IDLE_WAIT_S = 3600.0
"""How long the notifier sleeps with nothing due (a wake-up comes with every queued notice)."""


async def send_by_channel(channel: Channel, message: Message, client: httpx.AsyncClient) -> None:
    """The channel's own sender (`symphony.notify.channels`), loaded with the first message
    due: a daemon that has nothing to send never loads the senders."""
    from symphony.notify.channels import send

    await send(channel, message, client)


class Notifier:
    def __init__(
        self,
        store: Store | None,
        settings: Callable[[], NotifySettings],
        review_url: Callable[[], str | None],
        clock: Clock,
        activity: Activity,
        masker: SecretMasker,
        *,
        sender: Sender | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._review_url = review_url
        self._clock = clock
        self._activity = activity
        self._masker = masker
        self._send = sender or send_by_channel
        self._memory: dict[tuple[str, str], Delivery] = {}
        self._memory_sent: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._failing: set[str] = set()
        self._status: list[dict[str, Any]] | None = None

    def wake(self) -> None:
        """Something was queued: look again now."""
        self._status = None
        self._wake.set()

    def hold(self, deliveries: Sequence[Delivery]) -> None:
        """Deliveries the store cannot keep: sent from memory (lost by a restart)."""
        for d in deliveries:
            self._memory.setdefault((d.channel, d.notice.key), d)
        if deliveries:
            self.wake()

    async def run(self) -> None:
        # The HTTP client (and httpx) comes with the first message due: a daemon that has
        # nothing to send never loads them.
        client: httpx.AsyncClient | None = None
        try:
            while True:
                self._wake.clear()
                try:
                    if client is None and self._due(self._clock.wall()):
                        import httpx

                        client = httpx.AsyncClient()
                    if client is not None:
                        await self.deliver_due(client)
                except Exception as exc:  # a store that fails here fails the save too
                    log.warning("notifications not sent this round", reason=str(exc))
                wait = self._seconds_to_next()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
        finally:
            if client is not None:
                await client.aclose()

    def _seconds_to_next(self) -> float:
        due = [d.due_at for d in self._memory.values()]
        if self._store is not None:
            stored = self._store.notifications.next_due()
            if stored is not None:
                due.append(stored)
        if not due:
            return IDLE_WAIT_S
        return max((min(due) - self._clock.wall()).total_seconds(), 0.05)

    async def deliver_due(self, client: httpx.AsyncClient) -> int:
        """Send everything due now; returns how many messages were taken."""
        settings = self._settings()
        due = self._due(self._clock.wall())
        if not due:
            return 0
        self._forget_removed(due, settings)
        by_channel: dict[str, list[list[Delivery]]] = {}
        for name, batch in batches(due, settings):
            by_channel.setdefault(name, []).append(batch)
        results = await asyncio.gather(
            *(self._channel_round(settings, name, round_, client)
              for name, round_ in by_channel.items())
        )  # fmt: skip
        self._status = None
        return sum(results)

    def _due(self, wall: datetime) -> list[Delivery]:
        due = [d for d in self._memory.values() if d.due_at <= wall]
        if self._store is not None:
            due.extend(self._store.notifications.due(wall))
        return due

    async def _channel_round(
        self,
        settings: NotifySettings,
        name: str,
        messages: list[list[Delivery]],
        client: httpx.AsyncClient,
    ) -> int:
        channel = settings.channel(name)
        assert channel is not None
        taken = 0
        for index, batch in enumerate(messages):
            message = compose(name, batch, self._review_url(), self._masker.mask)
            try:
                await self._send(channel, message, client)
            except NotifyError as exc:
                again = self._failed(channel, batch, self._masker.mask(exc.message))
                # The rest wait with it: a receiver that is down is not asked again sooner.
                self._defer([d for rest in messages[index + 1 :] for d in rest], again)
                return taken
            taken += 1
            self._sent(channel, batch)
        return taken

    def _sent(self, channel: Channel, batch: list[Delivery]) -> None:
        wall = self._clock.wall()
        stored = [d.notice.key for d in batch if self._memory.pop((d.channel, d.notice.key), None)
                  is None]  # fmt: skip
        self._memory_sent[channel.name] = (
            self._memory_sent.get(channel.name, 0) + len(batch) - len(stored)
        )
        if stored and self._store is not None:
            self._store.notifications.sent(channel.name, stored, wall)
        log.info("notified", channel=channel.name, notices=[d.notice.key for d in batch])
        if channel.name in self._failing:
            self._failing.discard(channel.name)
            self._activity.add(
                wall, "notify_recovered", f"notification channel {channel.name} sends again"
            )

    def _defer(self, deliveries: list[Delivery], due: datetime) -> None:
        stored: dict[str, list[str]] = {}
        for d in deliveries:
            key = (d.channel, d.notice.key)
            if key in self._memory:
                self._memory[key] = replace(d, due_at=due)
            else:
                stored.setdefault(d.channel, []).append(d.notice.key)
        if self._store is not None:
            for channel, keys in stored.items():
                self._store.notifications.defer(channel, keys, due)

    def _failed(self, channel: Channel, batch: list[Delivery], error: str) -> datetime:
        wall = self._clock.wall()
        attempts = max(d.attempts for d in batch) + 1
        again = retry_at(wall, attempts)
        stored = []
        for d in batch:
            key = (d.channel, d.notice.key)
            if key in self._memory:
                self._memory[key] = replace(d, attempts=attempts, error=error, due_at=again)
            else:
                stored.append(d.notice.key)
        if stored and self._store is not None:
            self._store.notifications.failed(channel.name, stored, error, attempts, again)
        log.warning(
            "notification not taken; trying again later", channel=channel.name,
            attempts=attempts, retry_at=again.isoformat(), reason=error,
        )  # fmt: skip
        if attempts >= FAILING_AFTER and channel.name not in self._failing:
            self._failing.add(channel.name)
            self._activity.add(
                wall, "notify_failing",
                f"notification channel {channel.name} keeps failing ({attempts} attempts): "
                f"{error}", level="warning",
            )  # fmt: skip
        return again

    def _forget_removed(self, due: list[Delivery], settings: NotifySettings) -> None:
        """Pending deliveries of a channel WORKFLOW.md no longer has are dropped, with a word."""
        for name in {d.channel for d in due} - {c.name for c in settings.channels}:
            dropped = self._store.notifications.drop(name) if self._store is not None else 0
            for key in [key for key in self._memory if key[0] == name]:
                del self._memory[key]
                dropped += 1
            log.info("dropped the notices of a removed channel", channel=name, notices=dropped)

    def status(self) -> list[dict[str, Any]]:
        """Each configured channel's deliveries, for the snapshot (cached until a change)."""
        if self._status is not None:
            return self._status
        stored = (
            {s.channel: s for s in self._store.notifications.status()}
            if self._store is not None
            else {}
        )
        rows = []
        for channel in self._settings().channels:
            s = stored.get(channel.name)
            memory = [d for d in self._memory.values() if d.channel == channel.name]
            attempts = max([s.attempts if s else 0, *(d.attempts for d in memory)])
            error = (s.error if s else None) or next((d.error for d in memory if d.error), None)
            last_sent = s.last_sent_at if s is not None else None
            rows.append({
                "name": channel.name,
                "kind": channel.kind.value,
                "describe": channel.describe(),
                "pending": (s.pending if s else 0) + len(memory),
                "sent": (s.sent if s else 0) + self._memory_sent.get(channel.name, 0),
                "attempts": attempts,
                "failing": attempts >= FAILING_AFTER,
                "error": error if attempts else None,
                "last_sent_at": last_sent.isoformat() if last_sent is not None else None,
            })  # fmt: skip
        self._status = rows
        return rows

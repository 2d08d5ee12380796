"""Saving the orchestrator's state to the store, and the notices that ride along.

The loop marks what a restart would need (`mark`) and calls `save_pass` at the end of each
pass: a change is saved at once, an agent's streaming progress at most every
`PROGRESS_SAVE_S`. Each save turns the pass's outcomes into notices, routes them to the
notification channels and writes them in the same transaction as the state, so a notice is
sent only for what was saved. A failing disk is reported (health, a notice sent from memory),
never fatal: what was not saved waits for the next save.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import structlog

from symphony.config.sections import Settings
from symphony.core import notifications
from symphony.core.state import SchedulerState
from symphony.daemon.events import Clock
from symphony.daemon.notify import Notifier
from symphony.observability.activity import Activity
from symphony.observability.figures import OutcomeFigures
from symphony.observability.health import Health
from symphony.store import Store

log = structlog.get_logger("symphony.orchestrator")

PROGRESS_SAVE_S = 1.0
"""How stale the store may let an agent's progress (tokens, turns, last message) get. A kill -9
loses at most this much of it, and a continued thread's usage catches up on its first report."""
RECENT_NOTICES = 50
"""How many of the newest notices the snapshot carries (the dashboard's browser notices)."""


class Saver:
    def __init__(
        self,
        store: Store | None,
        state: SchedulerState,
        settings: Callable[[], Settings],
        clock: Clock,
        health: Health,
        outcomes: OutcomeFigures,
        notifier: Notifier,
        activity: Activity,
    ) -> None:
        self._store, self._state, self._settings = store, state, settings
        self._clock, self._health, self._outcomes = clock, health, outcomes
        self._notifier = notifier
        self._activity = activity
        self._unsaved = False
        self.progress_unsaved = False
        """An agent reported progress since the last save (saved within PROGRESS_SAVE_S)."""
        self._saved_at = float("-inf")
        self._unsaved_deliveries: list[notifications.Delivery] = []
        self._recent: dict[str, notifications.Notice] = {}
        """Health notices of past passes not yet in the store (it was failing)."""
        self._unhealthy = notifications.Unhealthy()

    def mark(self) -> None:
        """Something a restart needs changed: the end of this pass saves it."""
        self._unsaved = True

    def save_pass(self) -> float | None:
        """Save at the end of a loop pass: at once when something a restart needs changed (a
        dispatch, an exit, a retry, a move, a new thread), else at most every
        `PROGRESS_SAVE_S` (a streaming agent's tokens and messages wake the loop hundreds of
        times a second, and a save per wake-up would double the daemon's CPU). Returns in how
        many seconds a pass must come to save unsaved progress, if one must."""
        now = self._clock.monotonic()
        if self._unsaved or now - self._saved_at >= PROGRESS_SAVE_S:
            self.save()
        elif self.progress_unsaved:
            # An agent's last progress is saved on time even if nothing wakes the loop again.
            return PROGRESS_SAVE_S - (now - self._saved_at)
        return None

    def save(self, *, keep_runs: bool = False) -> None:
        """Write this pass's changes to the store, with the notices they carry."""
        self._unsaved, self._saved_at = False, self._clock.monotonic()
        self.progress_unsaved = False
        settings = self._settings()
        outbox = self._state.take_outbox()
        notices = notifications.from_outcomes(outbox.outcomes, settings.machine)
        self._remember(notices)
        deliveries = [
            *notifications.route(notices, settings.notify),
            *self._unsaved_deliveries,
        ]
        activity = self._activity.take_unsaved()
        if self._store is None:  # only a store keeps outcome records
            self._unsaved_deliveries.clear()
            self._notifier.hold(deliveries)
            return
        try:
            self._store.save(
                self._state, self._clock.monotonic(), self._clock.wall(), keep_runs=keep_runs,
                deliveries=deliveries, outbox=outbox, activity=activity,
                activity_kept=self._activity.size,
            )  # fmt: skip
        except Exception as exc:
            if self._health.store_error != str(exc):
                log.error("saving state failed; a restart would lose this pass", reason=str(exc))
            self._health.store_error = str(exc)
        else:
            self._health.store_error = None
            self._outcomes.add(outbox.outcomes)  # new figures at the next poll
            self._unsaved_deliveries.clear()
            if deliveries:
                self._notifier.wake()

    def observe_health(self) -> None:
        """Notices of the daemon's own trouble: the tracker unreachable for a while, the store
        failing (sent from memory: the store cannot hold it), WORKFLOW.md rejected."""
        notify, health = self._settings().notify, self._health
        said = self._unhealthy.observe(
            {"tracker": health.tracker_error, "store": health.store_error,
             "workflow": health.workflow_error},
            self._clock.wall(),
            after={"tracker": timedelta(minutes=notify.unhealthy_after_minutes)},
        )  # fmt: skip
        if not said:
            return
        self._remember(said)
        for delivery in notifications.route(said, notify):
            if delivery.notice.key.startswith("unhealthy:store:"):
                self._notifier.hold([delivery])
            else:
                self._unsaved_deliveries.append(delivery)
        self._unsaved = True

    def recent_notices(self) -> list[dict[str, Any]]:
        """The newest notices, for the open dashboard's browser notifications."""
        return [notice.to_json() for notice in self._recent.values()]

    def _remember(self, notices: Sequence[notifications.Notice]) -> None:
        for notice in notices:
            self._recent[notice.key] = notice
        while len(self._recent) > RECENT_NOTICES:
            del self._recent[next(iter(self._recent))]

"""The fleet's recent activity: what the orchestrator decided, in words a person reads.

A bounded list of dispatches, stops, retries, releases and health changes that the dashboard
shows as "recent events". Per-session agent events live on each running entry instead; this
list outlives the sessions, so a ticket that finished or was stopped still shows what happened.
With a store it outlives the daemon too: the rows added since the last save are written with
it (`take_unsaved`), and a restart starts from the saved ones (`restore`).
"""

from __future__ import annotations

import itertools
from collections import deque
from datetime import datetime
from typing import Any, Literal

from symphony import core

Level = Literal["info", "warning", "error"]
ACTIVITY_SIZE = 200
"""How many decisions are kept; one ticket's view filters all of them."""
SNAPSHOT_ACTIVITY = 50
"""How many of the newest the fleet snapshot carries: a screenful, and a small snapshot."""


class Activity:
    """Entries are stored as their JSON rows: they never change, and snapshots read them often."""

    def __init__(self, size: int = ACTIVITY_SIZE) -> None:
        self.size = size
        self._rows: deque[dict[str, Any]] = deque(maxlen=size)
        self._unsaved: deque[dict[str, Any]] = deque(maxlen=size)

    def add(
        self,
        at: datetime,
        event: str,
        message: str,
        *,
        issue_identifier: str | None = None,
        level: Level = "info",
    ) -> None:
        row = {
            "at": at.isoformat(),
            "event": event,
            "message": message,
            "issue_identifier": issue_identifier,
            "level": level,
        }
        self._rows.append(row)
        self._unsaved.append(row)

    def take_unsaved(self) -> list[dict[str, Any]]:
        """The rows added since the last take, oldest first, for the store."""
        rows = list(self._unsaved)
        self._unsaved.clear()
        return rows

    def restore(self, saved: list[dict[str, Any]]) -> None:
        """Put `saved` (oldest first, as the store kept them) before the rows added since
        this daemon started."""
        fresh = list(self._rows)
        self._rows.clear()
        self._rows.extend([*saved, *fresh])

    def add_effect(self, at: datetime, effect: core.Effect) -> None:
        """Record a scheduling decision; workspace removals are not worth a line."""
        described = describe(effect)
        if described is not None:
            event, identifier, message, level = described
            self.add(at, event, message, issue_identifier=identifier, level=level)

    def newest(self, count: int = SNAPSHOT_ACTIVITY) -> list[dict[str, Any]]:
        """The newest `count` rows, newest first (shared rows: callers must not change them)."""
        return list(itertools.islice(reversed(self._rows), count))

    def for_issue(self, issue_identifier: str) -> list[dict[str, Any]]:
        """Every kept row about one ticket, newest first."""
        return [row for row in reversed(self._rows) if row["issue_identifier"] == issue_identifier]


def describe(effect: core.Effect) -> tuple[str, str | None, str, Level] | None:
    """(event, issue identifier or None, message, level) for a decision worth showing."""
    if isinstance(effect, core.StartWorker):
        where = (
            effect.issue.state
            if effect.stage is None
            else f"{effect.issue.state}, stage {effect.stage}"
        )
        return "dispatched", effect.issue.identifier, f"{effect.label} ({where})", "info"
    if isinstance(effect, core.AgentLimited):
        return "limited", effect.identifier or None, effect.pause.describe(), "warning"
    if isinstance(effect, core.AgentResumed):
        message = f"{effect.agent_kind} resumed after {effect.paused_s:.0f} s limited"
        return "resumed", None, message, "info"
    if isinstance(effect, core.PerformTransition):
        return None  # the outcome (moved, or retrying) is what is worth a line
    if isinstance(effect, core.TransitionDone):
        if effect.confirmed:
            message = f"daemon moved it to {effect.target} ({effect.from_stage}: {effect.outcome})"
            level: Level = "warning" if effect.outcome != "done" else "info"
            return "moved", effect.identifier, message, level
        return (
            "move_abandoned",
            effect.identifier,
            f"not moved to {effect.target}: a person moved it first",
            "info",
        )
    if isinstance(effect, core.TransitionRetry):
        message = (
            f"moving to {effect.target} failed ({effect.error}); try {effect.attempt} "
            f"in {effect.delay_s:.0f} s"
        )
        return "move_retrying", effect.identifier, message, "warning"
    if isinstance(effect, core.PostComment):
        return effect.kind, effect.issue.identifier, effect.body, "warning"
    if isinstance(effect, core.StopWorker):
        level = (
            "warning"
            if effect.reason in (core.StopReason.STALLED, core.StopReason.BUDGET)
            else "info"
        )
        return "stopping", effect.identifier, f"{effect.reason.value}: {effect.detail}", level
    if isinstance(effect, core.RetryScheduled):
        entry = effect.entry
        delay = f"in {effect.delay_s:.0f} s"
        if entry.kind is core.RetryKind.CONTINUATION:
            return "continuing", entry.identifier, f"next turn {delay}", "info"
        message = f"attempt {entry.attempt} {delay}: {entry.error or 'failed'}"
        return "retrying", entry.identifier, message, "warning"
    if isinstance(effect, core.Released):
        return "released", effect.identifier, effect.reason, "info"
    if isinstance(effect, core.HostMarkedDown):
        message = (
            f"{effect.host} failed to connect {effect.failures} times in a row; no new "
            f"work there for {effect.cooloff_s:.0f} s ({effect.error})"
        )
        return "host_down", None, message, "info"
    return None

"""The fleet's recent activity: what the orchestrator decided, in words a person reads.

A bounded list of dispatches, stops, retries, releases and health changes that the dashboard
shows as "recent events". Per-session agent events live on each running entry instead; this
list outlives the sessions, so a ticket that finished or was stopped still shows what happened.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from symphony import scheduling as core

Level = Literal["info", "warning", "error"]
ACTIVITY_SIZE = 200


@dataclass(frozen=True, slots=True)
class FleetEvent:
    at: datetime
    event: str
    message: str
    issue_identifier: str | None = None
    level: Level = "info"

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "event": self.event,
            "message": self.message,
            "issue_identifier": self.issue_identifier,
            "level": self.level,
        }


class Activity:
    def __init__(self, size: int = ACTIVITY_SIZE) -> None:
        self._events: deque[FleetEvent] = deque(maxlen=size)

    def add(
        self,
        at: datetime,
        event: str,
        message: str,
        *,
        issue_identifier: str | None = None,
        level: Level = "info",
    ) -> None:
        self._events.append(FleetEvent(at, event, message, issue_identifier, level))

    def add_effect(self, at: datetime, effect: core.Effect) -> None:
        """Record a scheduling decision; workspace removals are not worth a line."""
        described = describe(effect)
        if described is not None:
            event, identifier, message, level = described
            self.add(at, event, message, issue_identifier=identifier, level=level)

    def as_json(self, issue_identifier: str | None = None) -> list[dict[str, Any]]:
        """Newest first; only one ticket's when `issue_identifier` is given."""
        return [
            event.as_json()
            for event in reversed(self._events)
            if issue_identifier is None or event.issue_identifier == issue_identifier
        ]


def describe(effect: core.Effect) -> tuple[str, str, str, Level] | None:
    """(event, issue identifier, message, level) for a decision worth showing."""
    if isinstance(effect, core.StartWorker):
        attempt = "first run" if effect.attempt is None else f"attempt {effect.attempt}"
        return "dispatched", effect.issue.identifier, f"{attempt} ({effect.issue.state})", "info"
    if isinstance(effect, core.StopWorker):
        level: Level = "warning" if effect.reason is core.StopReason.STALLED else "info"
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
    return None

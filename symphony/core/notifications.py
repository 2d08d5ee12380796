"""What a person is told, on which channel, and when: pure decisions over the daemon's records.

A `Notice` comes from an outcome record the core already keeps (a hand-off to review, an
escalation, a merge) or from the daemon's health (`Unhealthy`). Its `key` (event, ticket,
revision) is what makes delivery idempotent: the store queues one delivery per channel and key,
so a record read twice or a restart never queues it again. `route` turns notices into
deliveries for the channels that want them, due at once or at the end of the channel's digest
window; `retry_at` is the backoff of a failed delivery; `batches` groups what is due into the
messages to send.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from symphony.config.notify import NoticeEvent, NotifySettings
from symphony.config.stages import StageMachine
from symphony.core.outcomes import ESCALATED, HANDOFF, LIMITED, MERGED, RESUMED, OutcomeRecord

ESCALATING_OUTCOMES = frozenset(
    {"blocked", "stuck", "verify_failed", "budget_exceeded", "publish_failed", "checks_failed",
     "conflict"}
)  # fmt: skip
"""Outcomes that send a ticket to a person because the daemon cannot go on; the others
(merged, closed, a person's own move) are no escalation."""

RETRY_FIRST_S = 10.0
RETRY_MAX_S = 900.0
FAILING_AFTER = 3
"""Failed attempts in a row after which a channel shows as failing on the dashboard."""


@dataclass(frozen=True, slots=True)
class Notice:
    """One thing a person is told once (a hand-off, an escalation, a merge, an unhealthy daemon, an
    agent limited or resumed), whichever channels it goes to."""

    key: str
    """event:ticket:revision, unique per thing worth saying once."""
    event: NoticeEvent
    at: datetime
    title: str
    detail: str = ""
    identifier: str | None = None
    state: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "event": self.event.value, "at": self.at.isoformat(),
            "title": self.title, "detail": self.detail, "identifier": self.identifier,
            "state": self.state,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Notice:
        return cls(
            str(data["key"]), NoticeEvent(data["event"]), datetime.fromisoformat(data["at"]),
            str(data["title"]), str(data.get("detail") or ""), data.get("identifier"),
            data.get("state"),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Delivery:
    """One notice on its way to one channel."""

    channel: str
    notice: Notice
    due_at: datetime
    attempts: int = 0
    error: str | None = None


def from_outcomes(
    records: Iterable[OutcomeRecord], machine: StageMachine | None = None
) -> list[Notice]:
    """The notices a pass's outcome records carry: hand-offs, escalations, merges. A hand-off
    is of a plan or of changes as the review queue tells them apart: a stage with evidence
    hands over changes."""
    notices = []
    for record in records:
        data, who = record.data, record.identifier
        revision = record.at.isoformat()
        state = str(data.get("state") or "") or None
        if record.kind == HANDOFF:
            stage = machine.stage_named(str(data.get("stage"))) if machine is not None else None
            what = "its changes wait" if stage is None or stage.evidence else "its plan waits"
            notices.append(
                Notice(
                    f"review_waiting:{record.issue_id}:{revision}", NoticeEvent.REVIEW_WAITING,
                    record.at, f"{who}: {what} for your review in {state}",
                    "sent back after changes were asked for" if data.get("rework") else "",
                    who, state,
                )
            )  # fmt: skip
        elif record.kind == ESCALATED and data.get("outcome") in ESCALATING_OUTCOMES:
            outcome = str(data["outcome"]).replace("_", " ")
            notices.append(
                Notice(
                    f"escalated:{record.issue_id}:{revision}", NoticeEvent.ESCALATED, record.at,
                    f"{who} needs a person: {outcome} in stage {data.get('stage')}",
                    str(data.get("reason") or ""), who, state,
                )
            )  # fmt: skip
        elif record.kind in (LIMITED, RESUMED):
            notices.append(_limit_notice(record))
        elif record.kind == MERGED:
            number = data.get("number")
            notices.append(
                Notice(
                    f"merged:{record.issue_id}:{revision}", NoticeEvent.MERGED, record.at,
                    f"{who}: pull request #{number} merged", "", who, state,
                )
            )  # fmt: skip
    return notices


@dataclass(slots=True)
class Unhealthy:
    """Since when each of the daemon's problems has lasted, and whether it was said: one
    notice per episode (a problem that clears and comes back is a new one)."""

    since: dict[str, datetime] = field(default_factory=dict)
    said: set[str] = field(default_factory=set)

    def observe(
        self,
        problems: Mapping[str, str | None],
        wall: datetime,
        *,
        after: Mapping[str, timedelta],
    ) -> list[Notice]:
        """`problems`: each condition's message, None while it is fine; `after`: how long a
        condition must last before it is said (absent: at once)."""
        notices = []
        for condition, message in problems.items():
            if message is None:
                self.since.pop(condition, None)
                self.said.discard(condition)
                continue
            began = self.since.setdefault(condition, wall)
            if condition in self.said or wall - began < after.get(condition, timedelta(0)):
                continue
            self.said.add(condition)
            notices.append(
                Notice(
                    f"unhealthy:{condition}:{began.isoformat()}", NoticeEvent.UNHEALTHY, wall,
                    f"symphony is unhealthy: {_CONDITIONS.get(condition, condition)}",
                    message,
                )
            )  # fmt: skip
        return notices


_CONDITIONS = {
    "tracker": "the tracker cannot be reached",
    "store": "its state cannot be saved",
    "workflow": "WORKFLOW.md was rejected; the last good settings stay in force",
}


def _limit_notice(record: OutcomeRecord) -> Notice:
    """An agent limited or resumed: said once per pause (its key is the pause's start)."""
    data, agent = record.data, str(record.data.get("agent"))
    key = f"{record.kind}:{agent}:{record.at.isoformat()}"
    if record.kind == RESUMED:
        minutes = float(data.get("seconds") or 0) / 60
        title = f"{agent} resumed after {minutes:.0f} min limited by its provider"
        return Notice(key, NoticeEvent.RESUMED, record.at, title)
    until = datetime.fromisoformat(str(data["until"]))
    title = f"{agent} limited until {until:%H:%M} UTC ({data.get('limit')})"
    detail = str(data.get("detail") or "")
    return Notice(key, NoticeEvent.LIMITED, record.at, title, detail, record.identifier or None)


def route(notices: Sequence[Notice], settings: NotifySettings) -> list[Delivery]:
    """One delivery per notice and channel that wants its event."""
    return [
        Delivery(channel.name, notice, digest_due(notice.at, channel.digest_minutes))
        for notice in notices
        for channel in settings.channels
        if notice.event in channel.events
    ]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def digest_due(at: datetime, minutes: int) -> datetime:
    """When a notice at `at` goes out: at once, or at the end of its digest window (windows
    are aligned to the clock, so every notice of one window leaves together)."""
    if minutes <= 0:
        return at
    window = minutes * 60
    elapsed = (at - _EPOCH).total_seconds()
    return _EPOCH + timedelta(seconds=math.floor(elapsed / window) * window + window)


def retry_at(wall: datetime, attempts: int) -> datetime:
    """When a delivery that failed `attempts` times in a row is tried again."""
    delay = min(RETRY_FIRST_S * 2 ** max(attempts - 1, 0), RETRY_MAX_S)
    return wall + timedelta(seconds=delay)


def batches(due: Sequence[Delivery], settings: NotifySettings) -> list[tuple[str, list[Delivery]]]:
    """The messages to send now: a digest channel's due deliveries in one, the others one
    each, oldest first; deliveries of channels no longer configured are left out."""
    by_channel: dict[str, list[Delivery]] = {}
    for delivery in sorted(due, key=lambda d: (d.notice.at, d.notice.key)):
        by_channel.setdefault(delivery.channel, []).append(delivery)
    messages: list[tuple[str, list[Delivery]]] = []
    for name, deliveries in by_channel.items():
        channel = settings.channel(name)
        if channel is None:
            continue
        if channel.digest_minutes > 0:
            messages.append((name, deliveries))
        else:
            messages.extend((name, [d]) for d in deliveries)
    return messages

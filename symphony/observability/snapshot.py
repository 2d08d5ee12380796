"""The runtime snapshot: a JSON-safe view of orchestrator state for status surfaces.

Built synchronously from the state the orchestrator owns; reading it never changes scheduling.
Monotonic times are turned into wall-clock instants and ages at the moment of the snapshot.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from symphony.scheduling import RetryEntry, RunningEntry, SchedulerState

# Formatting an aware datetime costs microseconds, and each running row has two that rarely
# change between snapshots; remembering the recent ones makes a 100-row snapshot a third cheaper.
_iso = functools.lru_cache(maxsize=4096)(datetime.isoformat)


def build_snapshot(
    state: SchedulerState,
    now: float,
    wall: datetime,
    health: dict[str, Any] | None = None,
    activity: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    live_seconds = sum(max(now - entry.started_at, 0.0) for entry in state.running.values())
    totals = state.totals
    return {
        "generated_at": wall.isoformat(),
        "counts": {"running": len(state.running), "retrying": len(state.retry_attempts)},
        "running": [
            _running_row(issue_id, entry, now, wall)
            for issue_id, entry in sorted(state.running.items(), key=lambda kv: kv[1].identifier)
        ],
        "retrying": [
            _retry_row(entry, now, wall)
            for entry in sorted(state.retry_attempts.values(), key=lambda e: e.due_at)
        ],
        "codex_totals": {
            "input_tokens": totals.input_tokens,
            "output_tokens": totals.output_tokens,
            "total_tokens": totals.total_tokens,
            "seconds_running": round(totals.ended_seconds + live_seconds, 3),
        },
        "rate_limits": dict(state.rate_limits) if state.rate_limits is not None else None,
        "tickets": _ticket_rows(state),
        "health": health or {},
        "activity": activity or [],
    }


TICKET_ROWS = 50
"""The tickets with the most tokens, across all their attempts and restarts, in the snapshot."""


def _ticket_rows(state: SchedulerState) -> list[dict[str, Any]]:
    ranked = sorted(
        state.ticket_totals.items(), key=lambda kv: (-kv[1].total_tokens, kv[1].identifier)
    )
    return [
        {
            "issue_id": issue_id,
            "issue_identifier": totals.identifier,
            "input_tokens": totals.input_tokens,
            "output_tokens": totals.output_tokens,
            "total_tokens": totals.total_tokens,
            "seconds": round(totals.seconds, 1),
        }
        for issue_id, totals in ranked[:TICKET_ROWS]
    ]


def build_issue_snapshot(
    state: SchedulerState, wanted: str, now: float, wall: datetime
) -> dict[str, Any] | None:
    """One issue, by identifier or id, with its session's recent events; None when unknown.

    Kept out of the fleet snapshot: recent events are most of its size, and only a view of one
    ticket needs them.
    """
    found = next(
        ((key, e) for key, e in state.running.items() if wanted in (key, e.identifier)), None
    )
    retry = next(
        (r for r in state.retry_attempts.values() if wanted in (r.issue_id, r.identifier)), None
    )
    running = None
    if found is not None:
        issue_id, entry = found
        running = _running_row(issue_id, entry, now, wall)
        running["recent_events"] = [
            {"at": event.at_wall.isoformat(), "event": event.kind, "message": event.message}
            for event in entry.recent_events
        ]
    retry_row = _retry_row(retry, now, wall) if retry is not None else None
    row = running or retry_row
    if row is None:
        return None
    return {
        "issue_identifier": row["issue_identifier"],
        "issue_id": row["issue_id"],
        "status": "running" if running is not None else "retrying",
        "running": running,
        "retry": retry_row,
    }


def _running_row(issue_id: str, entry: RunningEntry, now: float, wall: datetime) -> dict[str, Any]:
    issue = entry.issue
    return {
        "issue_id": issue_id,
        "issue_identifier": issue.identifier,
        "title": issue.title,
        "state": issue.state,
        "url": issue.url,
        "attempt": entry.attempt,
        "session_id": entry.session_id,
        "pid": entry.pid,
        "turn_count": entry.turn_count,
        "started_at": _iso(entry.started_at_wall),
        "runtime_seconds": round(max(now - entry.started_at, 0.0), 3),
        "last_event": entry.last_event,
        "last_event_at": _iso(entry.last_event_at_wall) if entry.last_event_at_wall else None,
        "last_message": entry.last_message,
        "stopping": entry.stop_reason.value if entry.stop_reason is not None else None,
        "tokens": {
            "input_tokens": entry.input_tokens,
            "output_tokens": entry.output_tokens,
            "total_tokens": entry.total_tokens,
        },
    }


def _retry_row(entry: RetryEntry, now: float, wall: datetime) -> dict[str, Any]:
    due_in = entry.due_at - now
    return {
        "issue_id": entry.issue_id,
        "issue_identifier": entry.identifier,
        "url": entry.url,
        "attempt": entry.attempt,
        "kind": entry.kind.value,
        "due_at": (wall + timedelta(seconds=due_in)).isoformat(),
        "due_in_seconds": round(max(due_in, 0.0), 3),
        "error": entry.error,
    }

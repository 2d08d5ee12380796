"""The runtime snapshot: a JSON-safe view of orchestrator state for status surfaces.

Built synchronously from the state the orchestrator owns; reading it never changes scheduling.
Monotonic times are turned into wall-clock instants and ages at the moment of the snapshot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from symphony.base.hosts import CLUSTER
from symphony.config.sections import BudgetSettings, Settings
from symphony.core.costs import Spend, day_key
from symphony.core.state import (
    PullRecord,
    RetryEntry,
    RunningEntry,
    SchedulerState,
    TicketTotals,
    WireTotals,
)
from symphony.observability.activity import Activity
from symphony.observability.board import Board, BoardRow, board_row
from symphony.observability.health import Health, TrackerRequests

COST_SOURCE = "pricing"
"""Where the costs shown come from: the workflow's prices times the usage the agent reported.
An agent's own estimate (Claude Code reports one) is kept beside as `agent_cost_usd`."""
COST_DAYS = 14

# Formatting an aware datetime costs microseconds, and each running row has two that rarely
# change between snapshots; remembering the recent ones makes a 100-row snapshot a third cheaper.
_iso = functools.lru_cache(maxsize=4096)(datetime.isoformat)


def daemon_snapshot(
    state: SchedulerState,
    settings: Settings,
    now: float,
    wall: datetime,
    *,
    health: Health,
    tracker_requests: TrackerRequests,
    activity: Activity,
    board: Board,
    outcomes: dict[str, Any] | None,
    held_for_review: int,
    host_roots: Mapping[str, str | None],
    cluster: Mapping[str, Any] | None = None,
    notify: list[dict[str, Any]] | None = None,
    notices: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything `/api/v1/state`, the dashboard and the terminal table show, in one view."""
    snapshot = build_snapshot(
        state,
        now,
        wall,
        {
            "workflow_error": health.workflow_error,
            "workflow_error_since": (
                health.workflow_error_since.isoformat() if health.workflow_error_since else None
            ),
            "workflow_error_path": str(settings.workflow_path) if health.workflow_error else None,
            "tracker_error": health.tracker_error,
            "store_error": health.store_error,
            "last_tick_at": health.last_tick_at.isoformat() if health.last_tick_at else None,
            "last_tick_ms": health.last_tick_ms,
            "dispatched": health.dispatched,
            "failures": dict(health.failures),
            "tracker_requests": tracker_requests.as_json(),
        },
        activity.newest(),
    )
    snapshot["board"] = board.snapshot(state)
    snapshot["review"] = {
        "waiting": state.in_review,
        "limit": settings.agent.max_in_review,
        "held": held_for_review,
    }
    snapshot["outcomes"] = outcomes
    snapshot["costs"] = build_costs(state, wall, settings.budget)
    snapshot["mode"] = "stages" if settings.machine is not None else "spec"
    snapshot["hosts"] = host_rows(state, settings, now, host_roots, cluster)
    snapshot["paused"] = state.paused.to_json() if state.paused is not None else None
    snapshot["limits"] = [
        {**pause.to_json(), "says": pause.describe()} for pause in state.agent_pauses.values()
    ]
    snapshot["notify"] = notify or []
    snapshot["notices"] = notices or []
    return snapshot


def host_rows(
    state: SchedulerState,
    settings: Settings,
    now: float,
    roots: Mapping[str, str | None],
    cluster: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Each SSH worker host: its load, capacity, and whether it takes work now; or the
    cluster of `worker.kubernetes` (`cluster`, as the daemon's pods know it)."""
    worker = settings.worker
    rows = []
    if cluster is not None:
        rows.append(_cluster_row(state, settings, cluster))
    for spec in worker.hosts:
        health = state.host_health.get(spec.name)
        down = health is not None and health.is_down(now)
        rows.append(
            {
                "host": spec.name,
                "kind": "ssh",
                "running": sum(1 for e in state.running.values() if e.host == spec.name),
                "capacity": worker.capacity(spec) or settings.agent.max_concurrent_agents,
                "status": "down" if down else "up",
                "failures": health.failures if health is not None else 0,
                "down_for_s": (
                    round(health.down_until - now, 1)
                    if down and health is not None and health.down_until is not None
                    else None
                ),
                "error": health.error if health is not None else None,
                "workspace_root": roots.get(spec.name),
            }
        )
    return rows


def _cluster_row(
    state: SchedulerState, settings: Settings, cluster: Mapping[str, Any]
) -> dict[str, Any]:
    """The cluster as a worker host: `running` its pods Ready for a run, `pending` those the
    scheduler has no room for (and what is missing), `status` down while the last kubectl
    did not reach it; `failures` the runs in a row that could not reach it."""
    health = state.host_health.get(CLUSTER)
    return {
        "host": CLUSTER,
        "kind": "kubernetes",
        "running": cluster["running"],
        "capacity": cluster["max_pods"] or settings.agent.max_concurrent_agents,
        "status": "down" if cluster["reached"] is False else "up",
        "failures": health.failures if health is not None else 0,
        "down_for_s": None,
        "error": cluster["error"] or (health.error if health is not None else None),
        "workspace_root": "/workspace",
        "context": cluster["context"],
        "namespace": cluster["namespace"],
        "max_pods": cluster["max_pods"],
        "pending": cluster["pending"],
        "pending_reasons": list(cluster["pending_reasons"]),
        "reached": cluster["reached"],
        "checked_at": cluster["checked_at"],
    }


def issue_detail(
    state: SchedulerState,
    wanted: str,
    now: float,
    wall: datetime,
    *,
    board: Board,
    activity: Activity,
    evidence: Callable[[str], dict[str, Any] | None],
) -> dict[str, Any] | None:
    """One issue (by identifier or id) in detail: running, retrying, or known from the last
    poll as waiting (with the reason); None when the daemon knows nothing of it. `evidence`
    reads a ticket's evidence file from its workspace."""
    detail = build_issue_snapshot(state, wanted, now, wall)
    row = board.row(wanted)
    if detail is None:
        detail = _idle_issue(state, wanted, row)
    if detail is None:
        return None
    if row is not None:
        shown = board_row(row, state)
        detail.update(state=row.state, stage=row.stage, reason=shown["reason"], title=row.title)
    detail["activity"] = activity.for_issue(detail["issue_identifier"])
    detail["evidence"] = evidence(detail["issue_identifier"])
    detail.update(_issue_record(state, detail["issue_id"]))
    return detail


def _idle_issue(state: SchedulerState, wanted: str, row: BoardRow | None) -> dict[str, Any] | None:
    """An issue neither running nor retrying: waiting as of the last poll, or else known only
    from its history; None when the daemon knows nothing of it."""
    if row is not None:
        return {
            "issue_identifier": row.identifier,
            "issue_id": row.issue_id,
            "status": board_row(row, state)["status"],
            "running": None,
            "retry": None,
        }
    # Not polled (finished, or parked outside the workflow's states), but it has a history:
    # what it cost and used.
    known = next(
        (
            (issue_id, t)
            for issue_id, t in state.ticket_totals.items()
            if wanted in (issue_id, t.identifier)
        ),
        None,
    )
    if known is None:
        return None
    return {
        "issue_identifier": known[1].identifier,
        "issue_id": known[0],
        "status": "idle",
        "running": None,
        "retry": None,
    }


def _issue_record(state: SchedulerState, issue_id: str) -> dict[str, Any]:
    """What the daemon kept of an issue across runs: its cost, pull request, run ledger and
    files."""
    totals = state.ticket_totals.get(issue_id)
    record: dict[str, Any] = ticket_cost(totals) if totals is not None else {"cost_usd": None}
    pull = state.pull_requests.get(issue_id)
    record["pull_request"] = pull_request_row(pull) if pull is not None else None
    ledger = state.ledgers.get(issue_id)
    # Its runs by kind against their caps, the recent ones, and why the daemon stopped it.
    record["runs"] = (
        {"counts": dict(ledger.counts), "recent": list(ledger.history),
         "stopped": ledger.escalated}
        if ledger is not None
        else None
    )  # fmt: skip
    wire = state.wire_totals.get(issue_id)
    record["wire"] = wire_row(wire, totals.total_tokens if totals is not None else 0)
    footprint = state.footprints.get(issue_id)
    record["files"] = (
        {"planned": sorted(footprint.planned), "changed": sorted(footprint.changed)}
        if footprint is not None
        else None
    )
    return record


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
        "agent_totals": {
            "input_tokens": totals.input_tokens,
            "output_tokens": totals.output_tokens,
            "total_tokens": totals.total_tokens,
            "seconds_running": round(totals.ended_seconds + live_seconds, 3),
        },
        "rate_limits": dict(state.rate_limits) if state.rate_limits is not None else None,
        "tickets": _ticket_rows(state),
        "pull_requests": [
            pull_request_row(record)
            for record in sorted(state.pull_requests.values(), key=lambda r: r.identifier)
        ],
        "health": health or {},
        "activity": activity or [],
    }


def pull_request_row(record: PullRecord) -> dict[str, Any]:
    """A followed pull request as the API, the dashboard and the metrics show it."""
    return {
        "issue_identifier": record.identifier,
        "number": record.number,
        "url": record.url,
        "branch": record.branch,
        "base": record.base,
        "state": record.state.value,
        "head_sha": record.head_sha,
        "checks": record.checks or None,
        "review_decision": record.review.value,
        "mergeable": record.mergeable,
        "check_fixes": record.check_fixes,
        "escalated": record.escalated,
        "published_at": record.published_at.isoformat() if record.published_at else None,
        "history": list(record.history),
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
            **ticket_cost(totals),
        }
        for issue_id, totals in ranked[:TICKET_ROWS]
    ]


def wire_row(wire: WireTotals | None, agent_tokens: int) -> dict[str, Any] | None:
    """What the model gateway measured of a run's or a ticket's calls, and how far the agent's
    own report differs (`difference_tokens`: the wire's tokens less the agent's); None when
    no call went through the gateway (a subscription login)."""
    if wire is None:
        return None
    return {
        "requests": wire.requests,
        "refused": wire.refused,
        "input_tokens": wire.input_tokens,
        "cached_input_tokens": wire.cached_input_tokens,
        "output_tokens": wire.output_tokens,
        "total_tokens": wire.total_tokens,
        "cost_usd": None if wire.unpriced_tokens else round(wire.cost_usd, 6),
        "difference_tokens": wire.total_tokens - agent_tokens,
    }


def ticket_cost(totals: TicketTotals) -> dict[str, Any]:
    """A ticket's cost across all its attempts (null while any of it is unpriced), by stage,
    and its current budget window."""
    known = totals.known_cost_usd
    return {
        "cost_usd": None if known is None else round(known, 6),
        "cost_by_stage": {k: round(v, 6) for k, v in totals.cost_by_stage.items()},
        "unpriced_tokens": totals.unpriced_tokens,
        "budget_window": totals.budget_window,
        "budget_window_spent_usd": None if known is None else round(totals.window_spent_usd, 6),
    }


def build_costs(
    state: SchedulerState, wall: datetime, budget: BudgetSettings, *, days: int = COST_DAYS
) -> dict[str, Any]:
    """The fleet's spend: today, each of the last `days` UTC days, per model, and the budget."""
    first = wall.date() - timedelta(days=days - 1)
    daily = []
    for n in range(days):
        day = (first + timedelta(days=n)).isoformat()
        daily.append({"day": day, **state.daily_costs.get(day, Spend()).to_json()})
    today = state.daily_costs.get(day_key(wall), Spend())
    return {
        "cost_source": COST_SOURCE,
        "today": today.to_json(),
        "daily": daily,
        "by_model": {model: spend.to_json() for model, spend in sorted(state.model_costs.items())},
        "budget": {
            "per_ticket_usd": budget.per_ticket_usd,
            "warn_at": budget.warn_at,
            "per_day_usd": budget.per_day_usd,
            "on_exceeded": budget.on_exceeded,
            "daily_spent": budget.per_day_usd is not None and today.usd >= budget.per_day_usd,
        },
    }


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
        "run": entry.label,
        "run_kind": entry.kind.value,
        "session_id": entry.session_id,
        "pid": entry.pid,
        "host": entry.host,
        "sandbox": entry.sandbox,
        "remote_pgid": entry.remote_pgid,
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
            "cached_input_tokens": entry.cached_input_tokens,
        },
        "model": entry.model,
        # Unknown (null), never zero, while some of the run's tokens have no price.
        "cost_usd": None if entry.unpriced_tokens else round(entry.cost_usd, 6),
        "cost_source": COST_SOURCE,
        # What the agent itself estimated, where it reports one; shown beside, never summed.
        "agent_cost_usd": None if entry.agent_cost_usd is None else round(entry.agent_cost_usd, 6),
        "agent": entry.agent_kind,
        "wire": wire_row(entry.wire, entry.total_tokens),
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

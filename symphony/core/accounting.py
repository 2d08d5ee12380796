"""Tokens, cost and agent time: every agent event is priced with the session's model and added
to the run, the ticket, the UTC day and the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from symphony.base.events import RESUMED, AgentEvent, EventKind
from symphony.config.pricing import Pricing
from symphony.core.costs import UNKNOWN_MODEL, Spend, day_key
from symphony.core.state import RecentEvent, RunningEntry, SchedulerState, TicketTotals


def on_agent_event(
    state: SchedulerState,
    issue_id: str,
    event: AgentEvent,
    now: float,
    wall: datetime,
    pricing: Pricing | None = None,
) -> None:
    """Fold one agent update into the live session fields, token and cost totals, and rate
    limits. `pricing` prices the model a starting session names."""
    entry = state.running.get(issue_id)
    if entry is None:
        return
    entry.last_event = event.kind
    entry.last_event_at = now
    entry.last_event_at_wall = wall
    if event.message is not None:
        entry.last_message = event.message
    if event.pid is not None:
        entry.pid = event.pid
    if event.remote_pgid is not None:
        entry.remote_pgid = event.remote_pgid
    if event.thread_id is not None:
        entry.thread_id = event.thread_id
    if event.session_id is not None:
        entry.session_id = event.session_id
    if event.kind is EventKind.SESSION_STARTED:
        if event.model is not None:
            entry.model = event.model
        entry.price = pricing.price_for(entry.model) if pricing is not None else None
        if entry.resumed:
            entry.resumed = False
            if event.message != RESUMED:
                # A new thread after all: it counts from zero.
                entry.input_tokens = entry.output_tokens = entry.total_tokens = 0
                entry.cached_input_tokens = entry.cache_write_tokens = 0
    if event.kind is EventKind.TURN_STARTED:
        entry.turn_count += 1
        progress = state.stage_progress.get(issue_id)
        if progress is not None and progress.stage == entry.stage:
            progress.turns += 1
    if event.kind not in ("token_usage", "rate_limits"):
        entry.recent_events.append(RecentEvent(wall, event.kind, event.message))
    usage = event.usage
    if usage is not None:
        # Absolute thread totals: add only what grew since the last report. A total lower than
        # the last one means a new thread started counting from zero. A thread resumed after a
        # restart reports what it used before it too: its entry starts at the totals saved for
        # it (`start_run`), so only what it used beyond them counts.
        totals = state.totals
        ticket = ticket_totals_of(state, entry)
        deltas: dict[str, int] = {}
        for name in ("input_tokens", "output_tokens", "total_tokens", "cached_input_tokens"):
            new = getattr(usage, name)
            old = getattr(entry, name)
            delta = deltas[name] = new - old if new >= old else new
            if name != "cached_input_tokens":
                setattr(totals, name, getattr(totals, name) + delta)
            setattr(ticket, name, getattr(ticket, name) + delta)
            setattr(entry, name, new)
        written = usage.cache_write_tokens
        old_written = entry.cache_write_tokens
        deltas["cache_write_tokens"] = written - old_written if written >= old_written else written
        entry.cache_write_tokens = written
        _add_cost(state, entry, ticket, deltas, wall)
        state.changed_totals.add(issue_id)
    if event.rate_limits is not None:
        state.rate_limits = event.rate_limits
    if event.reported_cost_usd is not None:
        entry.agent_cost_usd = event.reported_cost_usd


def _add_cost(
    state: SchedulerState,
    entry: RunningEntry,
    ticket: TicketTotals,
    deltas: Mapping[str, int],
    wall: datetime,
) -> None:
    """Price what a usage report added, onto the run, the ticket, the day and the model."""
    tokens = deltas["total_tokens"]
    if tokens <= 0 and deltas["input_tokens"] <= 0 and deltas["output_tokens"] <= 0:
        return
    day = state.daily_costs.setdefault(day_key(wall), Spend())
    model = state.model_costs.setdefault(entry.model or UNKNOWN_MODEL, Spend())
    if entry.price is None:
        entry.unpriced_tokens += tokens
        ticket.unpriced_tokens += tokens
        day.add(None, tokens)
        model.add(None, tokens)
        return
    written = deltas.get("cache_write_tokens", 0)
    cost = entry.price.cost_usd(
        deltas["input_tokens"] - written,
        deltas["cached_input_tokens"],
        deltas["output_tokens"],
        written,
    )
    entry.cost_usd += cost
    ticket.cost_usd += cost
    stage = entry.stage or "run"
    ticket.cost_by_stage[stage] = ticket.cost_by_stage.get(stage, 0.0) + cost
    day.add(cost, tokens)
    model.add(cost, tokens)


def ticket_totals_of(state: SchedulerState, entry: RunningEntry) -> TicketTotals:
    totals = state.ticket_totals.get(entry.issue.id)
    if totals is None:
        totals = state.ticket_totals[entry.issue.id] = TicketTotals(entry.identifier)
    return totals

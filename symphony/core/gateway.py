"""The model gateway's decisions: whether a run may call its model now, and what a measured call
changes.

The gateway (`symphony.gateway`) asks `refusal` before it passes a call on: a run that ended or
is stopping, a ticket whose budget is spent, or an agent kind paused for its provider's limit
gets a refusal, on the call that comes next, not at the end of the turn. What the provider
reported of each call it passed comes back here: `on_wire_usage` adds it to the run and the
ticket beside the agent's own reports (and looks at the budgets again at once), and
`on_wire_limit` pauses the agent kind that met a limit (`symphony.core.limits`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from symphony.base.limits import ProviderLimit
from symphony.base.wire import WireUsage
from symphony.config.sections import Settings
from symphony.core.accounting import ticket_totals_of
from symphony.core.budgets import check_budgets, window_spend
from symphony.core.costs import usd
from symphony.core.effects import Effect
from symphony.core.limits import met_at_wire, waits_for_limit
from symphony.core.state import SchedulerState, WireTotals


class RefusalKind(enum.StrEnum):
    REVOKED = "revoked"
    """The run the token was given to ended or is stopping."""
    BUDGET = "budget"
    """Its ticket spent its budget."""
    LIMITED = "limited"
    """Its agent kind waits for its provider's limit to reset."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the model gateway turns a run's call away, in words the agent reports; for a paused agent
    kind, also when the pause ends."""

    kind: RefusalKind
    message: str
    resets_at: datetime | None = None
    """A paused agent kind: when the pause ends."""


def refusal(
    state: SchedulerState, settings: Settings, issue_id: str, agent_kind: str, wall: datetime
) -> Refusal | None:
    """Why a call of `issue_id`'s run (on `agent_kind`) may not go to its provider now; None
    when it may."""
    entry = state.running.get(issue_id)
    if entry is None or entry.stop_reason is not None:
        return Refusal(RefusalKind.REVOKED, "symphony: this run has ended; its token is revoked")
    pause = waits_for_limit(state, agent_kind, issue_id, wall)
    if pause is not None:
        return Refusal(
            RefusalKind.LIMITED,
            f"symphony paused {agent_kind} for its provider's usage limit: {pause.describe()}",
            pause.until,
        )
    limit = settings.budget.per_ticket_usd
    spent = window_spend(state, issue_id)
    if limit is not None and spent is not None and spent >= limit:
        return Refusal(
            RefusalKind.BUDGET,
            f"symphony: ticket {entry.identifier} spent {usd(spent)} of its {usd(limit)} "
            "budget (budget.per_ticket_usd); no more model calls",
        )
    return None


def on_refused(state: SchedulerState, issue_id: str) -> None:
    """The gateway refused a call of `issue_id`'s run: counted beside its measured calls."""
    entry = state.running.get(issue_id)
    if entry is not None:
        entry.wire = entry.wire or WireTotals()
        entry.wire.refused += 1


def on_wire_usage(
    state: SchedulerState, issue_id: str, usage: WireUsage, settings: Settings
) -> list[Effect]:
    """Add what the provider reported of one call to the run and its ticket, priced with the
    model it names (else the run's), then look at the budgets: a ticket the wire shows over
    its budget is stopped before its next call."""
    entry = state.running.get(issue_id)
    if entry is None:
        return []
    model = usage.model or entry.model
    pricing = settings.pricing
    price = pricing.price_for(model) if pricing is not None and model is not None else None
    cost = (
        price.cost_usd(
            usage.input_tokens - usage.cache_write_tokens, usage.cached_input_tokens,
            usage.output_tokens, usage.cache_write_tokens,
        )
        if price is not None
        else None
    )  # fmt: skip
    ticket_totals_of(state, entry)  # a ticket measured at the wire alone is held to its budget
    entry.wire = entry.wire or WireTotals()
    for totals in (entry.wire, state.wire_totals.setdefault(issue_id, WireTotals())):
        totals.requests += 1
        totals.input_tokens += usage.input_tokens
        totals.cached_input_tokens += usage.cached_input_tokens
        totals.output_tokens += usage.output_tokens
        if cost is None:
            totals.unpriced_tokens += usage.total_tokens
        else:
            totals.cost_usd += cost
    state.changed_totals.add(issue_id)
    return check_budgets(state, settings)


def on_wire_limit(
    state: SchedulerState, issue_id: str, limit: ProviderLimit, wall: datetime
) -> None:
    """The provider refused a call of `issue_id`'s run with `limit`: its agent kind pauses."""
    entry = state.running.get(issue_id)
    if entry is not None:
        met_at_wire(state, entry, limit, wall)


def wire_difference(agent_tokens: int, wire: WireTotals) -> int:
    """How many more tokens the wire measured than the agent reported (negative: fewer)."""
    return wire.total_tokens - agent_tokens

"""Budget decisions: what a ticket's spend calls for, checked after every usage update.

`budget.per_ticket_usd` is a window of spend. At `warn_at` of it the ticket gets one comment
(spent so far, by stage). At the whole of it the running agent is stopped (its turn
interrupted) and, when the worker has exited, the ticket moves to `budget.on_exceeded` with the
breakdown (`transitions.budget_transition`); it runs again only when a person moves it back,
which opens a new window of the same size (`dispatch.start_run`). A ticket whose cost is
unknown (a model without a price) cannot be held to a budget: it is never stopped for one.
The daily fleet budget (`budget.per_day_usd`) holds new dispatch (`dispatch`).

A run whose calls go through the model gateway is measured at the wire too, call by call:
where the wire saw more than its agent has reported yet (an agent that reports its usage at
the end of a turn), the wire's figure counts, so a budget stops the next call, not the turn's
end (`symphony.core.gateway`).
"""

from __future__ import annotations

from symphony.config.sections import Settings
from symphony.core.costs import budget_warning_text, usd
from symphony.core.effects import Effect, PostComment, StopWorker
from symphony.core.state import SchedulerState, StopReason


def check_budgets(state: SchedulerState, settings: Settings) -> list[Effect]:
    """Warn or stop the running tickets whose spend reached their budget's marks."""
    budget = settings.budget
    limit = budget.per_ticket_usd
    if limit is None:
        return []
    effects: list[Effect] = []
    for issue_id, entry in state.running.items():
        totals = state.ticket_totals.get(issue_id)
        spent = window_spend(state, issue_id)
        if entry.stop_reason is not None or totals is None or spent is None:
            continue
        if spent >= limit:
            entry.stop_reason = StopReason.BUDGET
            effects.append(
                StopWorker(
                    issue_id,
                    entry.identifier,
                    StopReason.BUDGET,
                    f"spent {usd(spent)} of its {usd(limit)} budget",
                )
            )
        elif spent >= budget.warn_at * limit and not totals.budget_warned:
            totals.budget_warned = True
            state.changed_totals.add(issue_id)
            body = budget_warning_text(spent, limit, budget.warn_at, totals.cost_by_stage)
            effects.append(
                PostComment(entry.issue, "budget_warning", f"window-{totals.budget_window}", body)
            )
    return effects


def window_spend(state: SchedulerState, issue_id: str) -> float | None:
    """What `issue_id` spent in its budget window: its agents' reports, plus what the gateway
    measured of its running run beyond its agent's report; None while its cost is unknown."""
    totals = state.ticket_totals.get(issue_id)
    entry = state.running.get(issue_id)
    wire = entry.wire if entry is not None else None
    if wire is not None and wire.unpriced_tokens:
        return None
    beyond = max(wire.cost_usd - entry.cost_usd, 0.0) if wire is not None and entry else 0.0
    if totals is None:
        return beyond if wire is not None else None
    if totals.unpriced_tokens:
        return None
    return totals.window_spent_usd + beyond

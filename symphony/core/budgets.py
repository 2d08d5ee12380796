"""Budget decisions: what a ticket's spend calls for, checked after every usage update.

`budget.per_ticket_usd` is a window of spend. At `warn_at` of it the ticket gets one comment
(spent so far, by stage). At the whole of it the running agent is stopped (its turn
interrupted) and, when the worker has exited, the ticket moves to `budget.on_exceeded` with the
breakdown (`transitions.budget_transition`); it runs again only when a person moves it back,
which opens a new window of the same size (`dispatch.start_run`). A ticket whose cost is
unknown (a model without a price) cannot be held to a budget: it is never stopped for one.
The daily fleet budget (`budget.per_day_usd`) holds new dispatch (`dispatch`).
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
        if entry.stop_reason is not None or totals is None or totals.unpriced_tokens:
            continue
        spent = totals.window_spent_usd
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

"""What a run reports beside its agent's events, folded into the state as it arrives: a move
its own tool call makes, and what the model gateway measured of its model calls
(`symphony.gateway`). The gateway's reports decide at once (a budget the wire shows spent stops
the run, a provider's limit pauses its agent kind), so the next call already meets them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from symphony import core
from symphony.config.sections import Settings
from symphony.daemon import events as ev
from symphony.daemon.events import Clock
from symphony.gateway.reports import Admit, WireReport


def fold(
    state: core.SchedulerState, event: ev.OwnMove | WireReport, settings: Settings, wall: datetime
) -> list[core.Effect]:
    """Fold one such report into `state`; the effects it calls for."""
    if isinstance(event, ev.OwnMove):
        core.on_own_move(state, event.issue_id, event.target, event.phase)
        return []
    if event.usage is not None:
        return core.gateway.on_wire_usage(state, event.issue_id, event.usage, settings)
    if event.limit is not None:
        core.gateway.on_wire_limit(state, event.issue_id, event.limit, wall)
    elif event.refused:
        core.gateway.on_refused(state, event.issue_id)
    return []


def admission(state: core.SchedulerState, settings: Callable[[], Settings], clock: Clock) -> Admit:
    """The gateway's question, answered by the core from the daemon's state now."""

    def admit(issue_id: str, agent_kind: str) -> core.gateway.Refusal | None:
        return core.gateway.refusal(state, settings(), issue_id, agent_kind, clock.wall())

    return admit

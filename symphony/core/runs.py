"""What comes after a turn: another turn on the same thread, the end of the run, or the stage's
progress guard.

The worker runs turns and reads the ticket back after each one; whether it goes on is decided
here, from the ticket as the tracker now shows it, the turns used and the limits in force. A
worker never applies a rule of its own, so the same ticket gets the same answer from the worker
and from the scheduling core (which judges a live run by the same states in `apply_refresh`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from symphony.base.issue import Issue
from symphony.config.sections import Settings
from symphony.config.stages import Stage
from symphony.core.scheduling import is_routable


class Verdict(enum.Enum):
    CONTINUE = "continue"
    """Another turn on the same thread."""
    STOP = "stop"
    """The run ends; the scheduling core decides what happens to the ticket next."""
    STUCK = "stuck"
    """The stage's turn budget is used without a report: the progress guard takes over."""


@dataclass(frozen=True, slots=True)
class NextTurn:
    verdict: Verdict
    reason: str
    """Why, in a person's words (the worker logs it as `worker done`)."""


@dataclass(frozen=True, slots=True)
class TurnLimits:
    max_turns: int
    """Turns this run may take: the stage's `max_turns`, else `agent.max_turns`."""
    budget: int
    """Turns the stage has left across attempts (`max_total_turns` minus those used); outside
    stage mode, `max_turns`."""


def turn_limits(settings: Settings, stage: Stage | None, turns_used: int) -> TurnLimits:
    max_turns = (stage.max_turns if stage else None) or settings.agent.max_turns
    budget = stage.max_total_turns - turns_used if stage else max_turns
    return TurnLimits(max_turns, budget)


def before_first_turn(limits: TurnLimits) -> NextTurn:
    """A run may start only while its stage has turns left."""
    if limits.budget <= 0:
        return NextTurn(Verdict.STUCK, "the stage's turn budget is used up")
    return NextTurn(Verdict.CONTINUE, "turns left")


def next_turn(
    issue: Issue | None,
    *,
    turn: int,
    limits: TurnLimits,
    stage: Stage | None,
    settings: Settings,
) -> NextTurn:
    """After turn `turn` completed with no report: `issue` is the ticket read back (None when
    the tracker no longer shows it)."""
    if issue is None:
        return NextTurn(Verdict.STOP, "issue no longer visible")
    if not settings.tracker.is_active(issue.state):
        return NextTurn(Verdict.STOP, f"state is now {issue.state}")
    if (
        stage is not None
        and settings.machine is not None
        and settings.machine.stage_for(issue.state) != stage
    ):
        return NextTurn(Verdict.STOP, f"moved to {issue.state}, another stage")
    if not is_routable(issue, settings.tracker):
        return NextTurn(Verdict.STOP, "issue no longer routable")
    if stage is not None and turn >= limits.budget:
        return NextTurn(Verdict.STUCK, f"max_total_turns ({stage.max_total_turns}) used, no report")
    if turn >= limits.max_turns:
        return NextTurn(Verdict.STOP, f"max_turns ({limits.max_turns}) reached")
    return NextTurn(Verdict.CONTINUE, "turns left")

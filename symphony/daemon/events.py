"""What reaches the orchestrator's loop: its clock, and the events workers, watchers and the
HTTP server put on its queue (an agent's update, a run's own move, a worker's exit, a written
transition, a changed workflow, a refresh asked for, a pull request read or merged, a stop).
The loop is their only reader.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from symphony import core
from symphony.base.events import AgentEvent
from symphony.base.pulls import PullRequest, PullStatus
from symphony.core.follow import MergeAnswer
from symphony.core.state import AgentPause
from symphony.core.transitions import WriteResult
from symphony.gateway.reports import WireReport as WireReport


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> datetime: ...


class Seat(Protocol):
    """A workflow's place in a fleet's shared pool of agent slots."""

    def slots(self, waiting: int) -> int:
        """How many agents the workflow may run now, having `waiting` more it could start."""
        ...

    def hosts_busy_elsewhere(self) -> dict[str, int]:
        """The agents the fleet's other workflows run on each SSH host now."""
        ...

    def pauses_elsewhere(self) -> list[AgentPause]:
        """The pauses the fleet's other workflows met on the accounts this one's agents use."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)


# Queue events


@dataclass(frozen=True, slots=True)
class AgentUpdate:
    """What one session reported in one go (the events of one read of its output), with when
    the daemon took them."""

    issue_id: str
    events: tuple[AgentEvent, ...]
    at: float
    at_wall: datetime


@dataclass(frozen=True, slots=True)
class OwnMove:
    """A run's own tool call moving its ticket (`runner.MoveSink`)."""

    issue_id: str
    target: str | None
    phase: core.MovePhase


@dataclass(frozen=True, slots=True)
class WorkerExited:
    """A worker ended, however it did: how its run went (`core.WorkerExit`)."""

    issue_id: str
    result: core.WorkerExit


@dataclass(frozen=True, slots=True)
class TransitionWritten:
    """The shell's attempt at a pending transition: `moved`, `abandoned` (a person moved the
    ticket first, or it vanished) or `failed` (with the error)."""

    issue_id: str
    result: WriteResult
    detail: str | None = None
    pull: PullRequest | None = None
    """The pull request a publishing stage opened or updated on the way (whatever the move
    answered: the next try finds it)."""


@dataclass(frozen=True, slots=True)
class WorkflowChanged:
    """WORKFLOW.md may have changed (its watch, SIGHUP): read it again in the loop."""


@dataclass(frozen=True, slots=True)
class RefreshRequested:
    """Poll the tracker now rather than at the next interval (a webhook, a person, an agent's pause
    lifted)."""

    ids: tuple[str, ...] | None = None
    """Look at these tickets only (a webhook named them); None: a whole poll."""


@dataclass(frozen=True, slots=True)
class PullRead:
    """A reading of a ticket's pull request: its status, or why it failed."""

    issue_id: str
    status: PullStatus | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class MergeAnswered:
    """What merging a ticket's pull request came to (`core.follow.MergeAnswer`), with the host's
    words or why."""

    issue_id: str
    answer: MergeAnswer
    detail: str


@dataclass(frozen=True, slots=True)
class FollowRequested:
    """A code host's webhook said a pull request changed: read them all now."""


@dataclass(frozen=True, slots=True)
class StopRequested:
    """The daemon is asked to stop (a signal, the fleet stopping): the loop stops its workers and
    returns."""


@dataclass(frozen=True, slots=True)
class AgentsReported:
    """Agents' updates were folded into the state since the last pass: time for one (the
    store, the listeners), asked for at most every `AGENT_PASS_S`."""


QueueEvent = (
    AgentUpdate
    | OwnMove
    | WorkerExited
    | TransitionWritten
    | WorkflowChanged
    | RefreshRequested
    | PullRead
    | MergeAnswered
    | FollowRequested
    | StopRequested
    | AgentsReported
    | WireReport
)

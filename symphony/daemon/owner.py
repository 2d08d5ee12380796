"""What the orchestrator's parts see of it.

`Polling`, `Reloading`, `DaemonView` and `startup.prepare` each work on one orchestrator's
state and collaborators; they take it as this protocol rather than importing the orchestrator,
so no module of the daemon imports itself back through another. The orchestrator is the one
implementation: it owns every attribute here, and only its loop changes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from symphony import core
from symphony.base.secrets import SecretMasker
from symphony.config.sections import Settings
from symphony.daemon.actions import PersonActions
from symphony.daemon.events import Clock, QueueEvent, Seat
from symphony.daemon.notices import Notices
from symphony.daemon.notify import Notifier
from symphony.daemon.places import Places
from symphony.daemon.reads import TrackerReads
from symphony.daemon.saving import Saver
from symphony.observability.activity import Activity
from symphony.observability.board import Board
from symphony.observability.figures import OutcomeFigures
from symphony.observability.health import Health, TrackerRequests
from symphony.store import Store
from symphony.tracker.contract import Tracker


class PollingPart(Protocol):
    held_for_review: int

    async def resolve_states(self) -> bool: ...


class ReloadingPart(Protocol):
    def reload(self) -> None: ...


class Owner(Protocol):
    settings: Settings
    tracker: Tracker
    places: Places
    seat: Seat | None
    environ: Mapping[str, str]
    instance_id: str
    masker: SecretMasker
    store: Store | None
    clock: Clock
    state: core.SchedulerState
    health: Health
    activity: Activity
    board: Board
    outcomes: OutcomeFigures
    tracker_requests: TrackerRequests
    reads: TrackerReads
    notices: Notices
    notifier: Notifier
    saver: Saver
    actions: PersonActions

    @property
    def polling(self) -> PollingPart: ...

    @property
    def reloading(self) -> ReloadingPart: ...

    def perform(self, effects: Sequence[core.Effect]) -> None: ...

    def absorb_queued(self) -> None: ...

    def put(self, event: QueueEvent) -> None: ...

    def reload(self) -> None: ...

    def request_refresh(self, ids: Sequence[str] | None = None) -> None: ...

    def poll_by(self, at: float) -> None: ...

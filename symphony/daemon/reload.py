"""Reading WORKFLOW.md again while the daemon runs: what the file now asks for, and what the
operator is told.

`reload_workflow` reads and builds the new settings (the prompts checked, a tracker made only
when its settings changed) and answers one of four things: the file is as applied, it was
already rejected as it is, it is rejected now, or here are the settings to apply. It never
raises: an invalid file, and even an adapter's bug, reject the reload and keep the last good
settings. `WorkflowStatus` says once when dispatch pauses for an invalid file and once when it
resumes. `Reloading` applies a reload to one orchestrator (its settings, tracker, places and
masked secrets) and keeps the watches of its files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from symphony.base.errors import SymphonyError
from symphony.base.secrets import credential_variables
from symphony.config.load import build_settings, workflow_fingerprint
from symphony.config.prompt import check_prompts
from symphony.config.sections import Settings
from symphony.config.workflow import read_workflow
from symphony.daemon.events import Clock
from symphony.daemon.owner import Owner
from symphony.daemon.places import Places
from symphony.daemon.watch import watch_tracker, watch_workflow
from symphony.gateway.access import gateway_refusal
from symphony.observability.activity import Activity
from symphony.observability.health import Health
from symphony.telemetry import header_secrets
from symphony.tracker.contract import Tracker, TrackerContext, Watchable, create_tracker

log = structlog.get_logger("symphony.orchestrator")


@dataclass(frozen=True, slots=True)
class Unchanged:
    """The file is what the daemon runs on."""


@dataclass(frozen=True, slots=True)
class StillRejected:
    """The file is as it was when it was rejected; that was said already."""


@dataclass(frozen=True, slots=True)
class ReloadRejected:
    """The file cannot be run as it is (unreadable, invalid, refused): the last good settings stay,
    and `message` says why."""

    message: str
    fingerprint: str | None
    """None when the file could not even be read (each attempt is judged again)."""


@dataclass(frozen=True, slots=True)
class Reloaded:
    """The file changed and is valid: the settings to apply, with the tracker they need."""

    settings: Settings
    tracker: Tracker
    """The current tracker when its settings did not change, else a new one."""


Reload = Unchanged | StillRejected | ReloadRejected | Reloaded


def reload_workflow(
    current: Settings,
    tracker: Tracker,
    environ: Mapping[str, str],
    rejected: str | None,
    new_tracker: Callable[[Settings], Tracker],
) -> Reload:
    """What the workflow file at `current.workflow_path` asks for now; `rejected` is the
    fingerprint of the version last rejected."""
    try:
        workflow = read_workflow(current.workflow_path)
    except SymphonyError as exc:
        return ReloadRejected(str(exc), None)
    fingerprint = workflow_fingerprint(workflow)
    if fingerprint == current.fingerprint:
        return Unchanged()
    if fingerprint == rejected:
        return StillRejected()
    try:
        settings = build_settings(workflow, environ)
        check_prompts(settings)
        refused = gateway_refusal(settings, environ)
        if refused is not None:
            return ReloadRejected(refused, fingerprint)
        if settings.tracker != current.tracker:
            tracker = new_tracker(settings)
    except SymphonyError as exc:
        return ReloadRejected(str(exc), fingerprint)
    except Exception as exc:  # an adapter bug rejects the reload, never the daemon
        log.exception("workflow reload failed unexpectedly")
        return ReloadRejected(f"internal error: {exc!r}", fingerprint)
    return Reloaded(settings, tracker)


def known_secrets(settings: Settings, tracker: Tracker, environ: Mapping[str, str]) -> list[str]:
    """Every secret the daemon knows, to be masked wherever text enters or leaves it: the
    tracker's, the repository's token, the server's, the notification channels', every
    credential the workflow names, the daemon's own variables named like one (the agents'
    API keys among them) and the headers it exports traces with."""
    repository = settings.repository
    return [
        *(environ.get(name, "") for name in tracker.secret_env_names()),
        repository.token if repository is not None else "",
        settings.server.auth_token or "",
        *(secret for channel in settings.notify.channels for secret in channel.secrets()),
        *settings.credentials,
        *credential_variables(environ),
        *header_secrets(environ),
    ]


def moves_places(old: Settings, new: Settings) -> bool:
    """Whether a reload changes where and how runs happen (workspaces, hooks, hosts, the
    repository, sandboxes, the agent): then the daemon makes its places anew."""

    def where(settings: Settings) -> tuple[object, ...]:
        return (
            settings.workspace, settings.hooks, settings.worker, settings.repository,
            settings.sandbox, settings.agent.kind,
        )  # fmt: skip

    return where(old) != where(new)


class WorkflowStatus:
    """Whether dispatch runs on a valid workflow, kept in the health and told to the operator."""

    def __init__(self, health: Health, activity: Activity, clock: Clock) -> None:
        self._health = health
        self._activity = activity
        self._clock = clock

    def valid(self, path: Path) -> None:
        if self._health.workflow_error is not None:
            log.info("workflow valid again, dispatch resumed", path=str(path))
            self._activity.add(
                self._clock.wall(),
                "workflow_valid",
                "WORKFLOW.md is valid again, dispatch resumed",
            )
        self._health.workflow_error = None
        self._health.workflow_error_fingerprint = None
        self._health.workflow_error_since = None

    def rejected(self, path: Path, rejection: ReloadRejected) -> None:
        if self._health.workflow_error != rejection.message:
            log.error(
                "workflow reload rejected; keeping last good settings, dispatch paused",
                path=str(path),
                reason=rejection.message,
            )
            self._activity.add(
                self._clock.wall(), "workflow_rejected", rejection.message, level="error"
            )
        if self._health.workflow_error is None:
            self._health.workflow_error_since = self._clock.wall()
        self._health.workflow_error = rejection.message
        self._health.workflow_error_fingerprint = rejection.fingerprint

    def applied(self, path: Path, old: Settings, new: Settings) -> None:
        self.valid(path)
        log.info("workflow reloaded", path=str(path))
        for warning in new.warnings:
            if warning not in old.warnings:
                log.warning(warning, path=str(path))
        self._activity.add(self._clock.wall(), "workflow_reloaded", f"{path.name} applied")


class Reloading:
    """One orchestrator's reloads and file watches (see the module's docstring)."""

    def __init__(self, orchestrator: Owner) -> None:
        self._o = orchestrator
        self._status = WorkflowStatus(
            orchestrator.health, orchestrator.activity, orchestrator.clock
        )
        self._tasks: asyncio.TaskGroup | None = None
        self._watches: list[asyncio.Task[None]] = []
        self._tracker_watch: asyncio.Task[None] | None = None

    def new_tracker(self, settings: Settings) -> Tracker:
        return create_tracker(
            settings.tracker, TrackerContext(settings.workflow_dir, self._o.environ)
        )

    def new_places(self, settings: Settings) -> Places:
        o = self._o
        previous = getattr(o, "places", None)  # none yet at start-up
        store = getattr(o, "store", None)
        workflow = (store.workflow_id() if store is not None else None) or o.instance_id
        return Places(
            settings, o.environ, o.tracker.secret_env_names(), o.instance_id, previous=previous,
            workflow_id=workflow,
        )  # fmt: skip

    def mask_secrets(self) -> None:
        o = self._o
        o.masker.set(
            known_secrets(o.settings, o.tracker, o.environ), source=str(o.settings.workflow_path)
        )

    def reload(self) -> None:
        """Re-read WORKFLOW.md; apply it when valid, otherwise keep the last good settings."""
        o = self._o
        path = o.settings.workflow_path
        reload = reload_workflow(
            o.settings, o.tracker, o.environ, o.health.workflow_error_fingerprint, self.new_tracker
        )
        if isinstance(reload, Unchanged):
            self._status.valid(path)
        elif isinstance(reload, ReloadRejected):
            self._status.rejected(path, reload)
        elif isinstance(reload, Reloaded):
            self._apply(reload.settings, reload.tracker)
        else:
            assert isinstance(reload, StillRejected)

    def _apply(self, settings: Settings, tracker: Tracker) -> None:
        o = self._o
        old, tracker_changed = o.settings, tracker is not o.tracker
        o.settings = settings
        # Running sessions keep the tracker they were started with (their tools stay bound).
        o.tracker = tracker
        self.mask_secrets()
        if tracker_changed:
            self._watch_tracker()
        if tracker_changed or moves_places(old, settings):
            o.places = self.new_places(settings)
        if settings.polling != old.polling:
            o.poll_by(o.clock.monotonic() + settings.polling.interval_ms / 1000)
        self._status.applied(old.workflow_path, old, settings)

    def watch(self, tasks: asyncio.TaskGroup) -> None:
        """Watch WORKFLOW.md (a change is a reload in the loop) and the tracker's files."""
        self._tasks = tasks
        self._watches.append(
            tasks.create_task(watch_workflow(self._o.settings.workflow_path, self._o.reload))
        )
        self._watch_tracker()

    def _watch_tracker(self) -> None:
        """Watch the tracker's files (the local board), replacing the watch of the tracker a
        reload swapped out; trackers behind an API are polled only."""
        if self._tracker_watch is not None:
            self._tracker_watch.cancel()
            self._tracker_watch = None
        tracker = self._o.tracker
        if self._tasks is None or not isinstance(tracker, Watchable):
            return
        self._tracker_watch = self._tasks.create_task(
            watch_tracker(tracker, self._o.request_refresh)
        )

    def unwatch(self) -> None:
        for task in [*self._watches, self._tracker_watch]:
            if task is not None:
                task.cancel()

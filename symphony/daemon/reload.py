"""Reading WORKFLOW.md again while the daemon runs: what the file now asks for, and what the
operator is told.

`reload_workflow` reads and builds the new settings (the prompts checked, a tracker made only
when its settings changed) and answers one of four things: the file is as applied, it was
already rejected as it is, it is rejected now, or here are the settings to apply. It never
raises: an invalid file, and even an adapter's bug, reject the reload and keep the last good
settings. `WorkflowStatus` says once when dispatch pauses for an invalid file and once when it
resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from symphony.base.errors import SymphonyError
from symphony.config.load import build_settings, workflow_fingerprint
from symphony.config.prompt import check_prompts
from symphony.config.sections import Settings
from symphony.config.workflow import read_workflow
from symphony.daemon.events import Clock
from symphony.observability.activity import Activity
from symphony.observability.snapshot import Health
from symphony.tracker.contract import Tracker

log = structlog.get_logger("symphony.orchestrator")


@dataclass(frozen=True, slots=True)
class Unchanged:
    """The file is what the daemon runs on."""


@dataclass(frozen=True, slots=True)
class StillRejected:
    """The file is as it was when it was rejected; that was said already."""


@dataclass(frozen=True, slots=True)
class Rejected:
    message: str
    fingerprint: str | None
    """None when the file could not even be read (each attempt is judged again)."""


@dataclass(frozen=True, slots=True)
class Reloaded:
    settings: Settings
    tracker: Tracker
    """The current tracker when its settings did not change, else a new one."""


Reload = Unchanged | StillRejected | Rejected | Reloaded


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
        return Rejected(str(exc), None)
    fingerprint = workflow_fingerprint(workflow)
    if fingerprint == current.fingerprint:
        return Unchanged()
    if fingerprint == rejected:
        return StillRejected()
    try:
        settings = build_settings(workflow, environ)
        check_prompts(settings)
        if settings.tracker != current.tracker:
            tracker = new_tracker(settings)
    except SymphonyError as exc:
        return Rejected(str(exc), fingerprint)
    except Exception as exc:  # an adapter bug rejects the reload, never the daemon
        log.exception("workflow reload failed unexpectedly")
        return Rejected(f"internal error: {exc!r}", fingerprint)
    return Reloaded(settings, tracker)


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

    def rejected(self, path: Path, rejection: Rejected) -> None:
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

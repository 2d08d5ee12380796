"""What the commands share: a workflow loaded with its tracker, and a fleet's workflows taken
one by one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from symphony.base.errors import SymphonyError
from symphony.base.exits import EXIT_FAILED, EXIT_OK
from symphony.base.secrets import SecretMasker
from symphony.config.load import load_settings
from symphony.config.prompt import check_prompts
from symphony.config.sections import Settings
from symphony.tracker.contract import Tracker, TrackerContext, create_tracker

if TYPE_CHECKING:
    from symphony.daemon.fleet import Member


def load(path: Path, masker: SecretMasker) -> tuple[Settings, Tracker]:
    """The workflow's settings and tracker; `masker` learns the tracker's secrets."""
    settings = load_settings(path)
    check_prompts(settings)
    tracker = create_tracker(settings.tracker, TrackerContext(settings.workflow_dir, os.environ))
    masker.set(os.environ.get(name, "") for name in tracker.secret_env_names())
    return settings, tracker


def fleet_of(path: Path) -> list[Member] | None:
    """The workflows `path` names when it is a fleet (a fleet.yaml, or a folder of folders
    with a WORKFLOW.md each); None for one workflow."""
    if path.is_dir() and (path / "WORKFLOW.md").is_file():
        return None
    if path.is_dir() or path.suffix in (".yaml", ".yml"):
        return members_of([path])
    return None


def members_of(paths: list[Path]) -> list[Member]:
    """The workflows of a fleet (the fleet's planner is imported only for one)."""
    from symphony.daemon.fleet import plan_fleet

    return list(plan_fleet(paths).members)


def each(members: list[Member], one: Callable[[Path], int]) -> int:
    """`one` for every workflow of a fleet, each under its name; failed if any failed."""
    failed = False
    for member in members:
        print(f"== {member.name} ({member.workflow}) ==")
        try:
            failed = one(member.workflow) != EXIT_OK or failed
        except SymphonyError as exc:
            print(f"symphony: {exc}")
            failed = True
        print()
    return EXIT_FAILED if failed else EXIT_OK


def single(path: Path) -> Path:
    return path / "WORKFLOW.md" if path.is_dir() else path

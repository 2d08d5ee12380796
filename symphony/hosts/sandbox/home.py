"""The private home of a sandboxed run: an empty folder, and only the files its agent kind needs
to authenticate to its model, copied read-only and removed with the folder at the run's end."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HomeCredentials:
    """What one agent kind takes into a private home: the files of its configuration folder
    (`variable` names it, else `folder` under the home) and files at the home's top."""

    variable: str | None = None
    folder: str | None = None
    files: tuple[str, ...] = ()
    top_files: tuple[str, ...] = ()


NO_CREDENTIALS = HomeCredentials()


def fill_home(home: Path, credentials: HomeCredentials, env: Mapping[str, str]) -> dict[str, str]:
    """Copy the agent kind's credential files into `home`; returns the variables that point the
    agent there (`HOME`, and its configuration folder's variable when it has one)."""
    home.mkdir(parents=True, exist_ok=True)
    pointed = {"HOME": str(home)}
    real_home = Path(env.get("HOME") or os.path.expanduser("~"))
    if credentials.folder is not None:
        source = None
        if credentials.variable is not None and env.get(credentials.variable):
            source = Path(env[credentials.variable])
        elif credentials.folder:
            source = real_home / credentials.folder
        target = home / credentials.folder
        target.mkdir(parents=True, exist_ok=True)
        for name in credentials.files:
            if source is not None:
                _copy(source / name, target / name)
        if credentials.variable is not None:
            pointed[credentials.variable] = str(target)
    for name in credentials.top_files:
        _copy(real_home / name, home / name)
    return pointed


def _copy(source: Path, target: Path) -> None:
    with contextlib.suppress(OSError):
        if source.is_file():
            shutil.copyfile(source, target)
            os.chmod(target, stat.S_IRUSR)


def remove_home(path: Path) -> None:
    """Remove a run folder the daemon made (its read-only copies sit in folders it owns)."""
    shutil.rmtree(path, ignore_errors=True)

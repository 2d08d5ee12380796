"""Rewrite a file atomically without overwriting an edit someone made while we were working.

The new content goes to a temp file in the same folder (so the rename cannot cross file
systems), is flushed to disk, and replaces the original with `os.replace`: readers see the old
file or the new one, never a half-written one. Just before replacing, the file is read again; if
it changed since the edit was computed, the edit is redone on the fresh content. This narrows the
lost-update window to the instant between that check and the rename; closing it fully would need
a lock every editor honours, which plain files on disk do not have.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

DEFAULT_ATTEMPTS = 5


class WriteConflict(Exception):
    """The file kept changing under us; nothing was written."""


class OutsideFolder(Exception):
    """The path is a symlink to a file outside the folder it may be edited in; nothing was read
    or written."""


def rewrite_file(
    path: Path,
    edit: Callable[[bytes], tuple[bytes, T]],
    *,
    within: Path,
    attempts: int = DEFAULT_ATTEMPTS,
) -> T:
    """Apply `edit` (old bytes -> new bytes and a result) and return the result.

    Raises FileNotFoundError when the file is gone, OutsideFolder when it resolves outside
    `within`, WriteConflict when it changed on every attempt, and whatever `edit` raises. When
    `edit` returns the bytes unchanged, nothing is written.
    """
    # Replacing a symlink would turn it into a copy; edit the file it points to instead, but
    # only inside the folder: a link must never let an edit reach a file elsewhere.
    target = path.resolve()
    real_folder = within.resolve()
    if not target.is_relative_to(real_folder):
        raise OutsideFolder(f"{path.name} is a symbolic link to {target}, outside {real_folder}")
    for attempt in range(attempts):
        before = target.read_bytes()
        after, result = edit(before)
        if after == before:
            return result
        mode = stat.S_IMODE(os.stat(target).st_mode)
        temp = _write_temp(target, after, mode)
        replaced = False
        try:
            _before_replace(target)
            if target.read_bytes() != before:
                time.sleep(0.01 * (attempt + 1))  # let a multi-step save finish
                continue
            os.replace(temp, target)
            replaced = True
        finally:
            if not replaced:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        _sync_folder(target.parent)
        return result
    raise WriteConflict(f"{path.name} changed {attempts} times while it was being edited")


def create_file(path: Path, data: bytes) -> None:
    """Write a new file atomically; FileExistsError if `path` exists (it is never replaced).

    The content goes to a temp file first and is hard-linked into place, so a reader sees
    nothing or the whole file, and two creators racing for one name cannot both win.
    """
    temp = _write_temp(path, data, 0o644)
    try:
        os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    _sync_folder(path.parent)


def _before_replace(path: Path) -> None:
    """Nothing; tests replace it to change the file at the worst possible moment."""


def _write_temp(target: Path, data: bytes, mode: int) -> str:
    handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return temp


def _sync_folder(folder: Path) -> None:
    # Makes the rename itself durable; some file systems refuse to open or sync a folder.
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)

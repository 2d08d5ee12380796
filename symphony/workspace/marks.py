"""Ownership marks: proof that symphony itself created a workspace directory.

The workspace root may hold folders symphony never made (a root of `.`, a shared scratch
folder, a user's checkout that happens to share a ticket's name). Only directories carrying a
mark may be used as workspaces or deleted. A mark is a small JSON file in `<root>/.symphony-owned/`
named by the workspace key, holding the directory's device and inode numbers: it identifies that
very directory, so a folder someone later puts at the same path is not mistaken for ours.

Marks live beside the workspaces, not inside them, so that hooks can clone into an empty
directory and agents cleaning their tree (`git clean -xfd`) cannot remove the proof. A mark is
written atomically (temp file, fsync, rename) before the directory is made (without an inode)
and stamped with the inode right after, so a crash between the two leaves an empty directory
with a pending mark, which is recognized as ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

MARKS_DIR = ".symphony-owned"
"""Reserved name inside the root; no workspace key may equal it (see `workspace_key`)."""


@dataclass(frozen=True, slots=True)
class Mark:
    """The mark of one workspace: the ticket it is for, and the device and inode of its directory
    (none while the mark is pending)."""

    identifier: str
    device: int | None
    inode: int | None
    base: str | None = None
    """The commit the workspace's git checkout was at when symphony made it (the default base
    its changes are compared against), when it is a git work tree."""

    @property
    def pending(self) -> bool:
        """Written before the directory was made; the crash, if any, came before the stamp."""
        return self.inode is None


class OwnershipMarks:
    """Reads and writes the marks of one workspace root."""

    def __init__(self, root: Path) -> None:
        self.folder = root / MARKS_DIR

    def read(self, key: str) -> Mark | None:
        """The mark for `key`, or None when there is none or it is unreadable."""
        try:
            data = json.loads((self.folder / key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("identifier"), str):
            return None
        device, inode, base = data.get("device"), data.get("inode"), data.get("base")
        return Mark(
            data["identifier"],
            device if isinstance(device, int) else None,
            inode if isinstance(inode, int) else None,
            base if isinstance(base, str) else None,
        )

    def write_pending(self, key: str, identifier: str) -> None:
        """Announce that `<root>/<key>` is about to be created by symphony. Raises OSError."""
        self._write(key, identifier, None)

    def stamp(self, key: str, identifier: str, path: Path, base: str | None = None) -> None:
        """Record the directory now at `path` as ours. Raises OSError."""
        info = os.lstat(path)
        self._write(key, identifier, (info.st_dev, info.st_ino), base)

    def owns(self, key: str, path: Path) -> bool:
        """True when the real directory at `path` is the one the mark for `key` names."""
        mark = self.read(key)
        if mark is None or mark.pending:
            return False
        try:
            info = os.lstat(path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == (mark.device, mark.inode)

    def holds_any(self) -> bool:
        """Whether the root holds a mark at all: without one it holds no workspace of ours."""
        try:
            with os.scandir(self.folder) as marks:
                return any(not mark.name.startswith(".") for mark in marks)
        except OSError:
            return False

    def discard(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.folder / key).unlink()

    def _write(
        self, key: str, identifier: str, identity: tuple[int, int] | None, base: str | None = None
    ) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        document = {
            "identifier": identifier,
            "device": identity[0] if identity else None,
            "inode": identity[1] if identity else None,
            "base": base,
            "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        handle, temp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(document, stream)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temp, self.folder / key)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise

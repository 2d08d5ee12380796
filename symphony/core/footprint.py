"""The files a ticket touches or will touch: named in its plan, changed on its branch.

Two things read a ticket's footprint: memory picks the notes about those files for its prompt
(`symphony.memory`), and the scheduler holds a ticket whose files overlap another's
(`agent.overlap`). Everything here is pure; `symphony.workspace.facts.changed_files` asks git
in the workspace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_FILES = 500
"""A footprint keeps at most this many paths: a plan naming thousands says little anyway."""

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
# A path: optional directories, then a name with an extension that starts with a letter
# (`src/app.py`, `README.md`; a bare name of two characters or more before its first dot), or
# a path with a slash and no extension (`scripts/test`). Not versions (`1.2.3`), not `e.g.`.
_PATH = re.compile(
    r"(?<![\w/.@-])"
    r"((?:\./)?(?:\.?[\w-][\w.-]*/+)+(?:[\w.-]*[\w-])?|[\w-]{2,}(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,9})"
    r"(?![\w/@-])"
)


@dataclass(frozen=True, slots=True)
class Footprint:
    """What is known of a ticket's files: `planned` from its plan, `changed` on its branch."""

    identifier: str
    planned: frozenset[str] = frozenset()
    changed: frozenset[str] = frozenset()

    @property
    def files(self) -> frozenset[str]:
        return self.planned | self.changed


def files_named(text: str | None) -> frozenset[str]:
    """The repository paths a text (a plan, a description) names, normalized (no `./`); a
    folder written as one (`docs/`) is left out."""
    if not text:
        return frozenset()
    found: set[str] = set()
    for match in _PATH.finditer(_URL.sub(" ", text)):
        if match.group(1).endswith("/"):
            continue  # a folder (`NOTES/`) says where, not which file: no claim on others
        path = normalize_path(match.group(1))
        if path:
            found.add(path)
            if len(found) >= MAX_FILES:
                break
    return frozenset(found)


def normalize_path(path: str) -> str:
    """`./src//app.py` -> `src/app.py`; a path that climbs out (`../x`) or is absolute is ''."""
    parts = [p for p in path.strip().split("/") if p not in ("", ".")]
    if not parts or path.startswith("/") or ".." in parts:
        return ""
    return "/".join(parts)


def overlap(ours: Iterable[str], theirs: Iterable[str]) -> frozenset[str]:
    """The paths both sides touch; a directory (`src/`) overlaps every file under it."""
    theirs = frozenset(theirs)
    shared = set(frozenset(ours) & theirs)
    dirs_ours = {p for p in ours if not _has_extension(p)}
    dirs_theirs = {p for p in theirs if not _has_extension(p)}
    for path in ours:
        if any(path.startswith(d + "/") for d in dirs_theirs):
            shared.add(path)
    for path in theirs:
        if any(path.startswith(d + "/") for d in dirs_ours):
            shared.add(path)
    return frozenset(shared)


def _has_extension(path: str) -> bool:
    return "." in path.rsplit("/", 1)[-1]

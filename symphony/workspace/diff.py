"""A ticket's branch against its base, file by file, for a person's review (the review page).

`branch_diff` reads `git diff <base>...HEAD` in the workspace, bounded like every git query
the daemon makes: per file its status, added and removed lines and its patch, with the patch
left out (and said so) for a binary file, a file whose patch is too large to read in a
browser, or a generated one (lock files, minified bundles), which a reviewer opens on demand.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from symphony.workspace.diff_lines import diff_rows
from symphony.workspace.git import LOCAL_GIT, Git, git_output, is_own_work_tree

MAX_FILES = 300
MAX_PATCH_LINES = 2_500
"""A file's patch longer than this is collapsed: its counts are shown, its lines are not."""
MAX_TOTAL_BYTES = 4_000_000
GENERATED = (
    "*.lock",
    "package-lock.json",
    "pnpm-lock.yaml",
    "poetry.lock",
    "Cargo.lock",
    "go.sum",
    "*.min.js",
    "*.min.css",
    "*.map",
    "*_pb2.py",
    "*.pb.go",
)


@dataclass(frozen=True, slots=True)
class FileDiff:
    """One file the branch changed: its status, its line counts and its patch, unless collapsed."""

    path: str
    status: str
    """added, deleted, renamed or modified."""
    added: int | None
    removed: int | None
    """None for a binary file."""
    patch: str | None
    """The unified diff of the file, or None when it is collapsed (`collapsed` says why)."""
    collapsed: str | None = None
    old_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "old_path": self.old_path,
            "status": self.status,
            "added": self.added,
            "removed": self.removed,
            "patch": self.patch,
            "rows": diff_rows(self.patch) if self.patch is not None else None,
            "collapsed": self.collapsed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileDiff:
        return cls(
            str(data["path"]), str(data["status"]), data.get("added"), data.get("removed"),
            data.get("patch"), data.get("collapsed"), data.get("old_path"),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class BranchDiff:
    """A ticket's branch against its base, for the review page: the files it changed (at most
    `MAX_FILES`; `more_files` counts the rest)."""

    base: str
    head: str | None
    files: tuple[FileDiff, ...]
    more_files: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "head": self.head,
            "files": [f.to_json() for f in self.files],
            "more_files": self.more_files,
            "added": sum(f.added or 0 for f in self.files),
            "removed": sum(f.removed or 0 for f in self.files),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BranchDiff:
        """What `to_json` wrote (a pod's hand-off keeps it on this machine)."""
        files = tuple(FileDiff.from_json(f) for f in data.get("files") or ())
        return cls(str(data["base"]), data.get("head"), files, int(data.get("more_files") or 0))


async def branch_diff(
    path: Path, base: str, env: Mapping[str, str], git: Git = LOCAL_GIT
) -> BranchDiff | None:
    """The branch's changes since `base` (committed), or None when `path` is not a git work
    tree or `base` is unknown there. `git` says where it is asked: here or the workspace's
    SSH host."""
    if not await is_own_work_tree(path, env, git):
        return None

    async def ask(*args: str) -> str | None:
        return await git_output(path, env, *args, git=git)

    if await ask("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}") is None:
        return None
    head = (await ask("rev-parse", "--verify", "--quiet", "HEAD") or "").strip()
    span = f"{base}...HEAD"
    numstat = await ask("diff", "--numstat", "-z", "-M", span) or ""
    counts = _numstat(numstat)
    status = await ask("diff", "--name-status", "-z", "-M", span) or ""
    kinds = _statuses(status)
    text = await ask("diff", "-M", "--no-color", span) or ""
    # The patches come in the order numstat lists the files (one diff queue): matched by
    # position, a name git quotes in a header (`café.py`, a quote, a newline) is never lost.
    patches = _split(text[:MAX_TOTAL_BYTES])
    files = []
    for index, (name, (added, removed, old)) in enumerate(list(counts.items())[:MAX_FILES]):
        patch = patches[index] if index < len(patches) else None
        collapsed = None
        if added is None:
            collapsed, patch = "binary", None
        elif any(fnmatch.fnmatch(Path(name).name, pattern) for pattern in GENERATED):
            collapsed, patch = "generated", None
        elif patch is not None and patch.count("\n") > MAX_PATCH_LINES:
            collapsed, patch = "large", None
        elif patch is None:
            collapsed = "not read (the diff is too large)"
        files.append(
            FileDiff(name, kinds.get(name, "modified"), added, removed, patch, collapsed, old)
        )
    return BranchDiff(base, head or None, tuple(files), max(len(counts) - MAX_FILES, 0))


def _numstat(text: str) -> dict[str, tuple[int | None, int | None, str | None]]:
    """`git diff --numstat -z`: `added\tremoved\tpath\0`, or for a rename
    `added\tremoved\t\0old\0new\0`."""
    found: dict[str, tuple[int | None, int | None, str | None]] = {}
    parts = text.split("\0")
    i = 0
    while i < len(parts):
        entry = parts[i]
        i += 1
        if not entry:
            continue
        fields = entry.split("\t", 2)
        if len(fields) < 3:
            continue
        added = int(fields[0]) if fields[0].isdigit() else None
        removed = int(fields[1]) if fields[1].isdigit() else None
        old = None
        name = fields[2]
        if not name and i + 1 < len(parts):  # a rename: the old and the new path follow
            old, name = parts[i], parts[i + 1]
            i += 2
        found[name] = (added, removed, old)
    return found


def _statuses(text: str) -> dict[str, str]:
    """`git diff --name-status -z`: `M\0path\0`, or for a rename or copy
    `R100\0old\0new\0`."""
    kinds = {"A": "added", "D": "deleted", "R": "renamed", "M": "modified", "C": "copied"}
    found = {}
    parts = text.split("\0")
    i = 0
    while i + 1 < len(parts):
        code = parts[i]
        if not code:
            i += 1
            continue
        paths = 2 if code[0] in "RC" else 1
        if i + paths >= len(parts):
            break
        found[parts[i + paths]] = kinds.get(code[0], "modified")
        i += paths + 1
    return found


def _split(text: str) -> list[str]:
    """The unified diff cut at each file's `diff --git` header, in order. A line of a patch
    starts with a space, `+`, `-`, `@` or `\\`, and git quotes a newline in a name, so only a
    header starts with `diff --git `."""
    patches: list[str] = []
    lines: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git "):
            if lines is not None:
                patches.append("".join(lines))
            lines = []
        if lines is not None:
            lines.append(line)
    if lines is not None:
        patches.append("".join(lines))
    return patches

"""`workspace.strategy: worktree`: each ticket's workspace is a git worktree on its own branch.

All worktrees share one object store: a bare clone of `workspace.repository` (a local clone or
a URL) that the daemon makes once in the workspace root (`.symphony-mirror.git`) and fetches
before each new worktree. Fetches update `origin/*` only: the tickets' own branches live beside
them and are never pruned by a fetch.

A ticket's worktree is on its branch: the tracker's branch name, else `workspace.branch` (a
Liquid template, default `symphony/{{ issue.identifier | slugify }}`). The branch is made from
`workspace.base` the first time and checked out as it was left after that (a rework keeps its
commits). Removing a worktree keeps its branch. Git commands on the store run one at a time
(one lock per store), so two tickets never race `git worktree add`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from symphony.base.errors import SymphonyError
from symphony.config.sections import WorktreeSettings
from symphony.workspace.git import run_git

WORKTREE_FAILED = "worktree_failed"
MIRROR_NAME = ".symphony-mirror.git"
GIT_TIMEOUT_S = 300.0
"""A clone or fetch of a large repository takes a while; a query (`workspace.git`) does not."""

_locks: dict[Path, asyncio.Lock] = {}


class WorktreeError(SymphonyError):
    pass


def slugify(text: str) -> str:
    """A branch-name-safe form: letters, digits, `.`, `_`, `-`, nothing else."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return re.sub(r"-{2,}", "-", slug) or "ticket"


class Worktrees:
    def __init__(self, settings: WorktreeSettings, root: Path, env: Mapping[str, str]) -> None:
        self.settings = settings
        self.mirror = root / MIRROR_NAME
        self._env = dict(env)

    async def _git(self, *args: str) -> str:
        run = await run_git(*args, env=self._env, timeout_s=GIT_TIMEOUT_S)
        if run.returncode != 0:
            detail = " ".join(run.err.strip().splitlines())[-500:]
            raise WorktreeError(WORKTREE_FAILED, f"git {' '.join(args[:2])} failed: {detail}")
        return run.out

    def _lock(self) -> asyncio.Lock:
        return _locks.setdefault(self.mirror, asyncio.Lock())

    async def _refresh_mirror(self) -> None:
        if not (self.mirror / "HEAD").exists():
            staging = self.mirror.with_name(self.mirror.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            await self._git("clone", "--bare", "--quiet", self.settings.repository, str(staging))
            await self._git(
                "--git-dir", str(staging), "config", "remote.origin.fetch",
                "+refs/heads/*:refs/remotes/origin/*",
            )  # fmt: skip
            staging.rename(self.mirror)  # a clone cut short is never taken for the store
        await self._git("--git-dir", str(self.mirror), "fetch", "--prune", "--quiet", "origin")

    async def _base(self) -> str:
        """What a new branch starts from: the repository's branch as last fetched
        (`origin/<name>`), or the commit or ref as given."""
        base = self.settings.base
        if base is None:
            head = await self._git("--git-dir", str(self.mirror), "symbolic-ref", "HEAD")
            base = head.strip().removeprefix("refs/heads/")
        name = base.removeprefix("origin/")
        try:
            await self._git(
                "--git-dir", str(self.mirror), "rev-parse", "--verify", "-q",
                f"refs/remotes/origin/{name}",
            )  # fmt: skip
        except WorktreeError:
            return base
        return f"refs/remotes/origin/{name}"

    async def current_base(self) -> str:
        """The base as the repository has it now (fetched first): what a hand-off's branch
        must merge onto."""
        async with self._lock():
            await self._refresh_mirror()
            return await self._base()

    async def branch_name(self, wanted: str, identifier: str) -> str:
        """`wanted` when git accepts it as a branch name, else one made from the identifier."""
        for name in (wanted, f"symphony/{slugify(identifier)}"):
            try:
                return (await self._git("check-ref-format", "--branch", name)).strip()
            except WorktreeError:
                continue
        raise WorktreeError(WORKTREE_FAILED, f"no valid branch name for {identifier}")

    async def add(self, path: Path, branch: str) -> None:
        """Make `path` (an empty directory) a worktree on `branch`."""
        async with self._lock():
            await self._refresh_mirror()
            git_dir = ("--git-dir", str(self.mirror))
            exists = True
            try:
                await self._git(
                    *git_dir, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"
                )
            except WorktreeError:
                exists = False
            if exists:
                await self._git(*git_dir, "worktree", "add", "--quiet", str(path), branch)
            else:
                base = await self._base()
                await self._git(
                    *git_dir, "worktree", "add", "--quiet", "-b", branch, str(path), base
                )

    async def remove(self, path: Path) -> None:
        """Unregister the worktree at `path` (its branch stays); the caller deletes leftovers."""
        if not (self.mirror / "HEAD").exists():
            return
        async with self._lock():
            # Not a worktree any more: prune forgets it once its folder is gone.
            with contextlib.suppress(WorktreeError):
                await self._git(
                    "--git-dir", str(self.mirror), "worktree", "remove", "--force", str(path)
                )
            await self.prune()

    async def prune(self) -> None:
        if (self.mirror / "HEAD").exists():
            await self._git("--git-dir", str(self.mirror), "worktree", "prune")

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

On an SSH worker host (`host`), the store is `<the host's workspace root>/.symphony-mirror.git`
there, and every git command and file operation on it runs on the host (`symphony.hosts.ssh`):
this machine's git never sees it, and `workspace.repository` is a URL or a path there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from symphony.base.errors import ErrorCategory
from symphony.config.sections import WorktreeSettings
from symphony.workspace.git import SAFE_GIT_SH, GitRun, WorktreeError, run_git, slugify

if TYPE_CHECKING:
    from symphony.hosts.ssh import SshHost

WORKTREE_FAILED = ErrorCategory.WORKTREE_FAILED
MIRROR_NAME = ".symphony-mirror.git"
GIT_TIMEOUT_S = 300.0
"""A clone or fetch of a large repository takes a while; a query (`workspace.git`) does not."""

_locks: dict[tuple[str, Path], asyncio.Lock] = {}

log = structlog.get_logger(__name__)

# On a host: $1 the operation, then its paths or git's arguments (for git: first the word that
# names the store, `--git-dir=...`, or "").
_ON_HOST = (
    SAFE_GIT_SH
    + r"""
op=$1; shift
case $op in
  git) symphony_git "$@" ;;
  exists) [ -e "$1" ] && echo yes; exit 0 ;;
  discard) rm -rf -- "$1" ;;
  rename) mv -T -- "$1" "$2" ;;
esac
"""
)


MERGER = ("symphony", "symphony@localhost")
"""Who the daemon's merge commit of the target into a ticket's branch is by."""
MAX_CONFLICT_CHARS = 8_000


@dataclass(frozen=True, slots=True)
class CatchUp:
    """What bringing a worktree up to its target did: `base` is the target commit it now
    starts from (for the evidence), `how` says so in words; `conflict` tells the run what
    conflicts when the target could not be merged in."""

    base: str | None = None
    how: str | None = None
    conflict: str | None = None
    pushed: str | None = None
    """Someone else pushed to the ticket's branch: what the run is told of it."""


def conflict_text(target: str, files: list[str], both: str) -> str:
    """For the run: which files conflict with the target, and both sides of each."""
    names = ", ".join(f"`{name}`" for name in files) or "(git named none)"
    sides = both.strip()
    if len(sides) > MAX_CONFLICT_CHARS:
        sides = sides[:MAX_CONFLICT_CHARS] + "\n… (cut)"
    return (
        f"The branch no longer merges onto `{target}`: {names} conflict. Merge `{target}` "
        "into the branch (do not rebase: the daemon never force-pushes), resolve each "
        "conflict keeping both intentions, make the checks pass and commit.\n\n"
        f"Both sides, as git shows them:\n\n```diff\n{sides}\n```"
    )


def _naming_store(args: tuple[str, ...]) -> tuple[str, ...]:
    """git's arguments for the host's `symphony_git`: the store's `--git-dir` as one word
    first (or "" for a command on no repository), then the rest."""
    if len(args) >= 2 and args[0] == "--git-dir":
        return (f"--git-dir={args[1]}", *args[2:])
    return ("", *args)


class Worktrees:
    def __init__(
        self,
        settings: WorktreeSettings,
        root: Path,
        env: Mapping[str, str],
        host: SshHost | None = None,
    ) -> None:
        self.settings = settings
        self.mirror = root / MIRROR_NAME  # on the host, a path there
        self._env = dict(env)
        self._host = host

    async def _run(self, op: str, *args: str) -> GitRun:
        """One operation on the store: here, or on the host (over the connection symphony's
        own commands to it share)."""
        if self._host is None:
            if op == "git":
                return await run_git(*args, env=self._env, timeout_s=GIT_TIMEOUT_S)
            path = Path(args[0])
            if op == "exists":
                return GitRun(0, "yes" if path.exists() else "", "")
            if op == "discard":
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.rename(args[1])
            return GitRun(0, "", "")
        if op == "git":
            args = _naming_store(args)
        done = await self._host.command(_ON_HOST, op, *args, timeout_s=GIT_TIMEOUT_S)
        if done.unreachable:
            return GitRun(done.returncode, "", f"cannot reach {self._host.name}: {done.reason()}")
        return GitRun(done.returncode, done.out, done.err)

    async def _git(self, *args: str) -> str:
        run = await self._run("git", *args)
        if run.returncode != 0:
            detail = " ".join(run.err.strip().splitlines())[-500:] or "timed out"
            where = f" on {self._host.name}" if self._host is not None else ""
            raise WorktreeError(
                WORKTREE_FAILED, f"git {' '.join(args[:2])} failed{where}: {detail}"
            )
        return run.out

    async def _has_store(self) -> bool:
        return (await self._run("exists", str(self.mirror / "HEAD"))).out.strip() == "yes"

    def _lock(self) -> asyncio.Lock:
        where = self._host.name if self._host is not None else ""
        return _locks.setdefault((where, self.mirror), asyncio.Lock())

    async def _refresh_mirror(self) -> None:
        if not await self._has_store():
            staging = self.mirror.with_name(self.mirror.name + ".partial")
            await self._run("discard", str(staging))
            await self._git("clone", "--bare", "--quiet", self.settings.repository, str(staging))
            await self._git(
                "--git-dir", str(staging), "config", "remote.origin.fetch",
                "+refs/heads/*:refs/remotes/origin/*",
            )  # fmt: skip
            # A clone cut short is never taken for the store.
            renamed = await self._run("rename", str(staging), str(self.mirror))
            if renamed.returncode != 0:
                raise WorktreeError(WORKTREE_FAILED, f"cannot make {self.mirror}: {renamed.err}")
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

    async def merge_target(self) -> tuple[str, str] | None:
        """(name, ref) of the branch a hand-off must merge onto, fetched fresh; None when the
        repository cannot be reached (logged; the hand-off then says it was not checked)."""
        try:
            ref = await self.current_base()
        except WorktreeError as exc:
            log.warning("base branch not fetched; merge not checked", error=exc.message,
                        **self._where())  # fmt: skip
            return None
        return ref.removeprefix("refs/remotes/"), ref

    async def forget_missing(self) -> None:
        """`prune`, with a failure logged rather than raised (at start-up, after a cleanup)."""
        try:
            await self.prune()
        except WorktreeError as exc:
            log.warning("git worktree prune failed", reason=exc.message, **self._where())

    def _where(self) -> dict[str, str]:
        return {"host": self._host.name} if self._host is not None else {}

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

    async def catch_up(self, path: Path) -> CatchUp:
        """Bring the existing worktree at `path` up to the target as the repository has it now
        (fetched first), before a run starts in it: with no commits of its own it moves to
        the target (a fresh cut); with commits, the target is merged in. A merge that
        conflicts is undone and described for the run; uncommitted changes are left alone."""
        async with self._lock():
            await self._refresh_mirror()
            target = await self._base()
        here = ("-C", str(path))
        if (await self._git(*here, "status", "--porcelain", "--untracked-files=no")).strip():
            return CatchUp()
        pushed = await self._take_a_persons_push(path)
        if pushed is not None and pushed.conflict is not None:
            return pushed
        caught = await self._up_to_target(path, target)
        return dataclasses.replace(caught, pushed=pushed.pushed if pushed else None)

    async def _take_a_persons_push(self, path: Path) -> CatchUp | None:
        """The ticket's branch as the remote has it is the truth: when someone pushed commits
        the worktree lacks, it moves to them (fast-forward), its unpublished commits replayed
        on top (never the other way round: the daemon never force-pushes over a commit it did
        not make). None: nobody pushed."""
        here = ("-C", str(path))
        branch = (await self._run("git", *here, "symbolic-ref", "--short", "-q", "HEAD")).out
        remote = f"refs/remotes/origin/{branch.strip()}"
        if not branch.strip():
            return None
        found = await self._run("git", *here, "rev-parse", "--verify", "-q", f"{remote}^{{commit}}")
        if found.returncode != 0:
            return None  # not published yet
        theirs = found.out.strip()
        if (
            await self._run("git", *here, "merge-base", "--is-ancestor", theirs, "HEAD")
        ).returncode == 0:
            return None  # everything pushed is here (the daemon's own pushes)
        subject = (await self._git(*here, "log", "-1", "--format=%h %s", theirs)).strip()
        told = f"Someone pushed to `{branch.strip()}`: this run starts from their commit {subject}."
        ours = await self._run("git", *here, "merge-base", "--is-ancestor", "HEAD", theirs)
        if ours.returncode == 0:
            await self._git(*here, "merge", "--ff-only", "--quiet", theirs)
            return CatchUp(pushed=told)
        replayed = await self._run(
            "git", *here, "-c", f"user.name={MERGER[0]}", "-c", f"user.email={MERGER[1]}",
            "rebase", "--quiet", theirs,
        )  # fmt: skip
        if replayed.returncode == 0:
            return CatchUp(pushed=told + " Your commits not yet pushed were replayed on top of it.")
        await self._run("git", *here, "rebase", "--abort")
        return CatchUp(
            conflict=told.replace("this run starts from", "the branch now has")
            + " Your commits not yet pushed conflict with it: merge "
            f"`{remote.removeprefix('refs/remotes/')}` into the branch, keep both intentions, "
            "and commit."
        )

    async def _up_to_target(self, path: Path, target: str) -> CatchUp:
        here = ("-C", str(path))
        behind = await self._run("git", *here, "merge-base", "--is-ancestor", target, "HEAD")
        if behind.returncode == 0 or behind.returncode not in (0, 1):
            return CatchUp()  # up to date, or not a state to judge (git said why in its log)
        commit = (await self._git(*here, "rev-parse", "--verify", f"{target}^{{commit}}")).strip()
        name = target.removeprefix("refs/remotes/")
        own = int((await self._git(*here, "rev-list", "--count", f"{target}..HEAD")).strip())
        if own == 0:
            await self._git(*here, "merge", "--ff-only", "--quiet", commit)
            return CatchUp(base=commit, how=f"started again from the current {name}")
        merged = await self._run(
            "git", *here, "-c", f"user.name={MERGER[0]}", "-c", f"user.email={MERGER[1]}",
            "merge", "--no-edit", "--quiet", "-m", f"Merge {name} into the ticket's branch",
            commit,
        )  # fmt: skip
        if merged.returncode == 0:
            return CatchUp(base=commit, how=f"brought up to date with {name} (a merge commit)")
        files = (await self._run("git", *here, "diff", "--name-only", "--diff-filter=U")).out
        both = (await self._run("git", *here, "diff", "--no-color")).out
        await self._run("git", *here, "merge", "--abort")
        return CatchUp(conflict=conflict_text(name, files.split(), both))

    async def remove(self, path: Path) -> None:
        """Unregister the worktree at `path` (its branch stays); the caller deletes leftovers."""
        if not await self._has_store():
            return
        async with self._lock():
            # Not a worktree any more: prune forgets it once its folder is gone.
            with contextlib.suppress(WorktreeError):
                await self._git(
                    "--git-dir", str(self.mirror), "worktree", "remove", "--force", str(path)
                )
            await self.prune()

    async def prune(self) -> None:
        if await self._has_store():
            await self._git("--git-dir", str(self.mirror), "worktree", "prune")

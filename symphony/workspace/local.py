"""Per-issue workspace directories under one root: keys, containment, lifecycle hooks, removal.

Every ticket gets `<root>/<workspace_key>`, created on first use and reused afterwards. This module
is the only place that creates, checks or deletes those directories and the only place that runs
the `after_create`, `before_run`, `after_run` and `before_remove` hooks (spec §5.3.4, §9). Paths
are checked against the root before anything is launched in them or deleted, with symlinks
resolved, so a hostile identifier or a stray link can never point work outside the root.

Policies this module chooses where the spec leaves room:

- An empty identifier is rejected (`invalid_workspace_path`): it names nothing and two such
  tickets would share one directory. The identifiers `.` and `..` are treated as changed by
  sanitization (`_-<hash>`, `__-<hash>`), so no key ever names the root or its parent.
- Symphony works only in directories it created itself, proven by an ownership mark
  (`symphony.workspace.marks`). Anything else found at a workspace path (a user's folder, a
  file, a symlink, a directory that replaced ours) is never used, changed or deleted: preparing
  fails with `workspace_not_owned` (or `invalid_workspace_path` for a link escaping the root),
  and `remove` leaves it in place and logs that once.
- If `after_create` fails, times out or is cancelled, the directory it was given is deleted (it was
  created by the same call, so nothing is lost) and the next attempt starts fresh. Reused
  workspaces are never reset.
- Hooks that leave background processes behind on success keep them; only a timed-out or
  cancelled hook has its whole process group killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import structlog

from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.base.templating import Environment, StrictUndefined
from symphony.config.sections import HooksSettings, WorktreeSettings
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST, LocalHost
from symphony.hosts.shell import ScriptOutcome, ScriptResult
from symphony.workspace.diff import BranchDiff
from symphony.workspace.diff import branch_diff as read_branch_diff
from symphony.workspace.facts import read_evidence_file, write_evidence_file
from symphony.workspace.git import LOCAL_GIT, WorktreeError, git_output, slugify
from symphony.workspace.marks import MARKS_DIR, OwnershipMarks

if TYPE_CHECKING:
    from symphony.workspace.worktrees import Worktrees

log = structlog.get_logger(__name__)

INVALID_WORKSPACE_PATH = ErrorCategory.INVALID_WORKSPACE_PATH
WORKSPACE_CREATE_FAILED = ErrorCategory.WORKSPACE_CREATE_FAILED
HOOK_FAILED = ErrorCategory.HOOK_FAILED
HookHost = Callable[[], contextlib.AbstractAsyncContextManager[Host]]
"""Makes the host one hook runs on and ends it after (a sandbox built for that hook); raises
SymphonyError when it cannot be made."""
HOOK_TIMEOUT = ErrorCategory.HOOK_TIMEOUT
WORKSPACE_REMOVE_FAILED = ErrorCategory.WORKSPACE_REMOVE_FAILED
WORKSPACE_NOT_OWNED = ErrorCategory.WORKSPACE_NOT_OWNED

# Hook output kept for the log: the end of the output is where the error usually is.
OUTPUT_TAIL_BYTES = 2048

_DISALLOWED = re.compile(r"[^A-Za-z0-9._-]")
_VALID_KEY = re.compile(r"[A-Za-z0-9._-]+")
_HASH_HEX_CHARS = 16  # 64 bits of sha256, hex is within the allowed key alphabet

HookName = Literal["after_create", "before_run", "after_run", "before_remove"]


class WorkspaceError(SymphonyError):
    """A workspace could not be made, checked, prepared by a hook, or removed."""


def valid_key(key: str) -> bool:
    """Whether `key` can name a workspace: allowed characters only, not `.` or `..`."""
    return _VALID_KEY.fullmatch(key) is not None and key not in (".", "..")


def workspace_key(identifier: str) -> str:
    """The directory name for an issue identifier (spec §4.2 "Workspace Key").

    Characters outside `[A-Za-z0-9._-]` become `_`. When that changed anything, `-` and the first
    16 hex digits of the SHA-256 of the original identifier are appended, so identifiers that
    sanitize alike (`A/1`, `A:1`) still get distinct keys; identifiers already made of allowed
    characters are returned unchanged. `.` and `..` count as changed (every dot becomes `_`) so a
    key never names the root or its parent. An empty identifier raises
    `WorkspaceError(invalid_workspace_path)`. The name of the ownership marks folder is reserved
    the same way (any letter case), so no ticket's workspace can be that folder.
    """
    if not identifier:
        raise WorkspaceError(INVALID_WORKSPACE_PATH, "an empty issue identifier names no workspace")
    sanitized = _DISALLOWED.sub("_", identifier)
    if sanitized in (".", ".."):
        sanitized = "_" * len(sanitized)
    if sanitized == identifier and identifier.casefold() != MARKS_DIR:
        return identifier
    # surrogatepass: identifiers decoded from JSON may hold lone surrogates; hashing must not fail.
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{sanitized}-{digest[:_HASH_HEX_CHARS]}"


@dataclass(frozen=True, slots=True)
class Workspace:
    """A prepared per-issue directory (spec §4.1.4).

    `identifier` is the issue identifier the key was derived from; it is what hooks see as
    `SYMPHONY_ISSUE_IDENTIFIER`, because the key alone cannot be turned back into it.
    """

    path: Path
    key: str
    created_now: bool
    identifier: str = ""
    base: str | None = None
    """The commit its git checkout was at when it was created (`Mark.base`), if any."""
    note: str | None = None
    """What the run must know of how its worktree was brought up to date (a person's push it
    now starts from, a conflict with its target to resolve: `Worktrees.catch_up`)."""


@dataclass(frozen=True, slots=True)
class _HookResult:
    """How a workspace hook ended; `error` is what a hook that did not complete raises."""

    name: HookName
    outcome: ScriptOutcome
    exit_code: int | None
    detail: str

    def error(self) -> WorkspaceError:
        category = HOOK_TIMEOUT if self.outcome == "timed_out" else HOOK_FAILED
        return WorkspaceError(category, f"{self.name} hook {self.detail}")


class WorkspaceManager:
    """Creates, checks, runs hooks in, and removes the workspaces under one root.

    The hooks and their timeout are captured at construction; a workflow reload builds a new
    manager, so a hook always runs with the settings of the manager that started it.
    """

    outlives_run = True

    def __init__(
        self,
        root: Path,
        hooks: HooksSettings,
        *,
        env: Mapping[str, str],
        worktrees: WorktreeSettings | None = None,
        hook_host: HookHost | None = None,
    ) -> None:
        self._root = Path(os.path.normpath(os.path.abspath(root)))
        self._hook_host_factory = hook_host
        self._hooks = hooks
        self._env = dict(env)
        self._worktrees = (
            _worktrees(worktrees, self._root, self._env) if worktrees is not None else None
        )
        self._marks = OwnershipMarks(self._root)
        self.git = LOCAL_GIT
        """Where git answers about these workspaces: here."""
        # Paths already reported as not ours: a terminal ticket is looked at every sweep.
        self._reported_foreign: set[Path] = set()
        self._host: LocalHost = LOCAL_HOST

    @property
    def root(self) -> Path:
        """The absolute, normalized workspace root."""
        return self._root

    @property
    def remote_host(self) -> str | None:
        """These workspaces are on this machine."""
        return None

    def path_for(self, identifier: str) -> Path:
        """`<root>/<workspace_key>` after checking it stays inside the root, symlinks resolved."""
        path = self._root / workspace_key(identifier)
        self._check_contained(path)
        return path

    def holds_any(self) -> bool:
        """Whether the root may hold a workspace symphony made: only those are ever removed."""
        return self._marks.holds_any()

    def owned_path(self, identifier: str) -> Path | None:
        """The ticket's workspace when it exists and symphony made it, else None."""
        path = self.path_for(identifier)
        return path if self._marks.owns(path.name, path) and path.is_dir() else None

    async def write_evidence(self, identifier: str, evidence: Mapping[str, Any]) -> None:
        """The hand-off's evidence into the ticket's workspace (`.symphony/evidence.json`); a
        failure costs only the file."""
        path = self.owned_path(identifier)
        if path is None:
            return
        try:
            write_evidence_file(path, evidence)
        except OSError as exc:
            log.warning("could not write the evidence file", workspace=str(path), reason=str(exc))

    async def read_evidence(self, identifier: str) -> dict[str, Any] | None:
        path = self.owned_path(identifier)
        return read_evidence_file(path) if path is not None else None

    async def peer_paths(self, identifiers: Sequence[str]) -> list[tuple[str, Path]]:
        """Those of `identifiers` with a workspace of symphony's here, and its path."""
        return [(i, path) for i in identifiers if (path := self.owned_path(i)) is not None]

    async def branch_diff(
        self, identifier: str, base: str, env: Mapping[str, str]
    ) -> BranchDiff | None:
        return await read_branch_diff(self.path_for(identifier), base, env)

    async def end_leftovers(self) -> None:
        return None

    async def keep_for_review(
        self, identifier: str, workspace: Workspace, base: str, env: Mapping[str, str]
    ) -> None:
        return None

    async def merge_target(self) -> tuple[str, str] | None:
        """(name, ref) of the branch a ticket's work must merge onto, fetched fresh, in
        `workspace.strategy: worktree`; None otherwise or when the repository cannot be
        reached (the hand-off then says it was not checked)."""
        return await self._worktrees.merge_target() if self._worktrees is not None else None

    async def prune(self) -> None:
        """Forget the worktrees of this root's store whose folders are gone (at start-up)."""
        if self._worktrees is not None:
            await self._worktrees.forget_missing()

    async def prepare(
        self,
        identifier: str,
        branch: str | None = None,
        on_status: Callable[[str], None] | None = None,
    ) -> Workspace:
        """Ensure the workspace directory exists; run `after_create` only if it was made now.

        Raises `WorkspaceError` with `invalid_workspace_path`, `workspace_create_failed`,
        `workspace_not_owned`, `hook_failed` or `hook_timeout`. A failed `after_create` leaves no
        directory behind.
        """
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(
                WORKSPACE_CREATE_FAILED, f"cannot create workspace root {self._root}: {exc}"
            ) from None
        path = self.path_for(identifier)
        if self._worktrees is not None and self._half_made(path):
            # A worktree whose creation was cut short (a killed daemon): ours, so it goes, and
            # it is made again below.
            log.info("removing a half-made worktree", workspace=str(path))
            await asyncio.to_thread(self._discard_new, path)
            await self._worktrees.prune()
        # Synchronous on purpose: a cancellation between creating the directory and returning
        # would otherwise leave a marked workspace whose after_create never ran.
        created_now = self._claim(identifier, path)
        if created_now and self._worktrees is not None:
            try:
                await self._add_worktree(identifier, path, branch)
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self._discard_new, path)
                    await self._worktrees.prune()
                raise
        workspace = Workspace(
            path=path, key=path.name, created_now=created_now, identifier=identifier
        )
        if created_now and self._hooks.after_create is not None:
            try:
                result = await self._run_hook("after_create", self._hooks.after_create, workspace)
            except BaseException:
                # Cancelled mid-hook: a half-populated directory would be reused without
                # after_create next time, so it goes (synchronously: we are being torn down).
                self._discard_new(path)
                raise
            if result is not None:
                leftovers = await asyncio.to_thread(self._discard_new, path)
                if leftovers:
                    # Reused later without after_create; the operator should know why.
                    log.warning(
                        "new workspace not fully removed after after_create failed",
                        workspace=str(path),
                        reason=leftovers[0],
                    )
                raise result.error()
            # The hook may have replaced the directory (`rm -rf` then `git clone`): whatever
            # real directory our own hook left at the path is ours. Its commit now is where the
            # ticket's work starts from.
            base = await _git_head(path, self._env)
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    self._marks.stamp(path.name, identifier, path, base)
            return dataclasses.replace(workspace, base=base)
        if not created_now:
            mark = self._marks.read(path.name)
            workspace = dataclasses.replace(workspace, base=mark.base if mark else None)
            return await self._catch_up(workspace) if self._worktrees is not None else workspace
        if self._worktrees is not None:
            # Where the ticket's work starts from, and the sign the worktree is complete.
            base = await _git_head(path, self._env)
            with contextlib.suppress(OSError):
                self._marks.stamp(path.name, identifier, path, base)
            return dataclasses.replace(workspace, base=base)
        return workspace

    async def _catch_up(self, workspace: Workspace) -> Workspace:
        """An existing worktree starts from what is true now: the target as fetched now
        (`Worktrees.catch_up`); its mark then starts from that commit, so the evidence shows
        the ticket's own changes only. A failure is logged: the run starts where it was."""
        assert self._worktrees is not None
        try:
            caught = await self._worktrees.catch_up(workspace.path)
        except WorktreeError as exc:
            log.warning("worktree not brought up to date", workspace=str(workspace.path),
                        reason=exc.message)  # fmt: skip
            return workspace
        if caught.pushed is not None:
            log.info("worktree moved to a person's push", workspace=str(workspace.path))
        if caught.base is not None:
            with contextlib.suppress(OSError):
                self._marks.stamp(workspace.key, workspace.identifier, workspace.path, caught.base)
            log.info("worktree brought up to date", workspace=str(workspace.path), how=caught.how)
            workspace = dataclasses.replace(workspace, base=caught.base)
        if caught.conflict is not None:
            log.info("worktree conflicts with its target", workspace=str(workspace.path))
        told = [text for text in (caught.pushed, caught.conflict) if text]
        return dataclasses.replace(workspace, note="\n\n".join(told)) if told else workspace

    def _half_made(self, path: Path) -> bool:
        """Ours, and a worktree whose creation was cut short: no start commit in its mark yet
        (it is recorded once the worktree is complete), and either nothing in it or a `.git`
        that points into this root's store. A workspace of ours that is neither (one made
        before the strategy was switched on) is left as it is."""
        if not self._marks.owns(path.name, path) or not path.is_dir():
            return False
        mark = self._marks.read(path.name)
        if mark is not None and mark.base is not None:
            return False
        if not any(path.iterdir()):
            return True
        assert self._worktrees is not None
        try:
            link = (path / ".git").read_text(errors="replace")
        except OSError:
            return False
        return link.startswith("gitdir:") and str(self._worktrees.mirror) in link

    async def _add_worktree(self, identifier: str, path: Path, branch: str | None) -> None:
        assert self._worktrees is not None
        wanted = branch or render_branch(self._worktrees.settings.branch, identifier)
        name = await self._worktrees.branch_name(wanted, identifier)
        try:
            await self._worktrees.add(path, name)
        except WorktreeError as exc:
            raise WorkspaceError(WORKSPACE_CREATE_FAILED, f"{path}: {exc.message}") from None
        log.info("worktree added", workspace=str(path), branch=name)

    def _claim(self, identifier: str, path: Path) -> bool:
        """Create the directory with its mark (True), or check an existing one is ours (False)."""
        key = path.name
        mark = self._marks.read(key)
        if os.path.lexists(path):
            if self._marks.owns(key, path):
                return False
            if (
                mark is not None
                and mark.pending
                and not path.is_symlink()
                and path.is_dir()
                and not any(path.iterdir())
            ):
                # A creation interrupted between mkdir and the stamp: ours, and still empty.
                self._stamp(identifier, path)
                return True
            raise WorkspaceError(WORKSPACE_NOT_OWNED, _foreign(path))
        try:
            self._marks.write_pending(key, identifier)
        except OSError as exc:
            raise WorkspaceError(
                WORKSPACE_CREATE_FAILED, f"cannot write the ownership mark for {path}: {exc}"
            ) from None
        try:
            # mkdir, not exists-then-mkdir: whether this call created it decides after_create.
            path.mkdir()
        except FileExistsError:
            # Someone else made it in between: not ours.
            raise WorkspaceError(WORKSPACE_NOT_OWNED, _foreign(path)) from None
        except OSError as exc:
            self._marks.discard(key)
            raise WorkspaceError(
                WORKSPACE_CREATE_FAILED, f"cannot create workspace {path}: {exc}"
            ) from None
        self._stamp(identifier, path)
        return True

    def _stamp(self, identifier: str, path: Path) -> None:
        try:
            self._marks.stamp(path.name, identifier, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()  # just made and empty; without a mark it could never be removed
            raise WorkspaceError(
                WORKSPACE_CREATE_FAILED, f"cannot write the ownership mark for {path}: {exc}"
            ) from None

    def _discard_new(self, path: Path) -> list[str]:
        """Delete a directory this manager just created, and its mark once it is gone."""
        leftovers = _remove_tree(path)
        if not leftovers:
            self._marks.discard(path.name)
        return leftovers

    async def before_run(self, workspace: Workspace) -> None:
        """Run `before_run`; any failure or timeout aborts the attempt with `WorkspaceError`."""
        if self._hooks.before_run is None:
            return
        self.check_agent_cwd(workspace)
        result = await self._run_hook("before_run", self._hooks.before_run, workspace)
        if result is not None:
            raise result.error()

    async def after_run(self, workspace: Workspace) -> None:
        """Run `after_run` best effort: failures, timeouts and a vanished workspace are logged."""
        if self._hooks.after_run is None:
            return
        try:
            self.check_agent_cwd(workspace)
        except WorkspaceError as exc:
            log.warning(
                "hook skipped", hook="after_run", workspace=str(workspace.path), reason=str(exc)
            )
            return
        await self._run_hook("after_run", self._hooks.after_run, workspace)

    async def remove(self, identifier: str) -> bool:
        """Run `before_remove` (best effort) and delete the workspace; False if there was none.

        Only a directory symphony created (its ownership mark matches) is deleted. Anything else
        at the path is left in place, logged once, and counts as nothing removed. Raises
        `WorkspaceError`: `invalid_workspace_path` when the entry resolves outside the root
        (nothing is touched), `workspace_remove_failed` when deletion fails.
        """
        path = self.path_for(identifier)
        key = path.name
        if not os.path.lexists(path):
            self._marks.discard(key)  # deleted by hand: the mark names nothing any more
            return False
        if not self._marks.owns(key, path):
            if path not in self._reported_foreign:
                self._reported_foreign.add(path)
                log.warning(
                    "workspace left in place: symphony did not create it",
                    issue_identifier=identifier,
                    workspace=str(path),
                )
            return False
        if self._hooks.before_remove is not None:
            workspace = Workspace(
                path=path, key=path.name, created_now=False, identifier=identifier
            )
            await self._run_hook("before_remove", self._hooks.before_remove, workspace)
            # The hook ran arbitrary code in there; check again before deleting anything.
            self._check_contained(path)
            if path.is_symlink():
                raise WorkspaceError(
                    WORKSPACE_REMOVE_FAILED,
                    f"{path} became a symlink during before_remove; it was left untouched",
                )
        if self._worktrees is not None:
            try:
                await self._worktrees.remove(path)  # its branch stays
            except WorktreeError as exc:
                log.warning("worktree not unregistered", workspace=str(path), reason=exc.message)
        failures = await asyncio.to_thread(_remove_tree, path)
        if failures:
            raise WorkspaceError(
                WORKSPACE_REMOVE_FAILED,
                f"cannot fully remove {path}: {failures[0]}"
                + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""),
            )
        self._marks.discard(key)
        return True

    def check_agent_cwd(self, workspace: Workspace) -> None:
        """The launch invariant (spec §9.5): the agent's cwd is this issue's workspace directory.

        `workspace.path` must be exactly `<root>/<workspace.key>` for a valid key, resolve
        (symlinks followed) strictly inside the root, and be an existing directory. Raises
        `WorkspaceError(invalid_workspace_path)` otherwise.
        """
        key = workspace.key
        if not valid_key(key):
            raise WorkspaceError(INVALID_WORKSPACE_PATH, f"{key!r} is not a valid workspace key")
        if not workspace.path.is_absolute():
            raise WorkspaceError(INVALID_WORKSPACE_PATH, f"{workspace.path} is not absolute")
        if Path(os.path.normpath(workspace.path)) != self._root / key:
            raise WorkspaceError(
                INVALID_WORKSPACE_PATH,
                f"{workspace.path} is not the workspace {key!r} under root {self._root}",
            )
        self._check_contained(workspace.path)
        if not workspace.path.is_dir():
            raise WorkspaceError(
                INVALID_WORKSPACE_PATH, f"{workspace.path} is not an existing directory"
            )

    def _check_contained(self, path: Path) -> None:
        """Require `path` to be a direct child of the root, also after resolving symlinks."""
        lexical = Path(os.path.normpath(os.path.abspath(path)))
        if lexical.parent != self._root or lexical.name in ("", ".", ".."):
            raise WorkspaceError(
                INVALID_WORKSPACE_PATH, f"{path} is not directly inside workspace root {self._root}"
            )
        # realpath on both sides: the root itself may legitimately sit behind a symlink.
        real_root = os.path.realpath(self._root)
        real = os.path.realpath(lexical)
        if real == real_root or os.path.commonpath([real_root, real]) != real_root:
            raise WorkspaceError(
                INVALID_WORKSPACE_PATH,
                f"{path} resolves to {real}, which is not inside workspace root {real_root}",
            )

    async def _run_hook(
        self, name: HookName, script: str, workspace: Workspace
    ) -> _HookResult | None:
        """Run one hook to completion or timeout and log it; None when it succeeded."""
        path = workspace.path
        timeout_ms = self._hooks.timeout_ms
        env = {
            **self._env,
            "SYMPHONY_WORKSPACE": str(path),
            "SYMPHONY_ISSUE_IDENTIFIER": workspace.identifier or workspace.key,
            "SYMPHONY_WORKSPACE_ROOT": str(self._root),
            "SYMPHONY_HOOK": name,
        }
        bound = log.bind(
            hook=name, workspace=str(path), issue_identifier=workspace.identifier or None
        )
        bound.debug("hook started", timeout_ms=timeout_ms)
        try:
            async with self._hook_host() as host:
                ran = await host.run_script(
                    script, cwd=path, env=env, timeout_ms=timeout_ms, tail_bytes=OUTPUT_TAIL_BYTES
                )
        except SymphonyError as exc:  # its sandbox could not be made
            ran = ScriptResult("failed", None, f"could not start: {exc.message}", 0.0, b"", 0)
        result = _HookResult(name, ran.outcome, ran.exit_code, ran.detail)
        _log_result(bound, result, ran)
        return None if ran.ok else result

    def _hook_host(self) -> contextlib.AbstractAsyncContextManager[Host]:
        """Where one hook runs: this machine, or the boundary `hook_host` makes for it."""
        if self._hook_host_factory is None:
            return contextlib.nullcontext(self._host)
        return self._hook_host_factory()


async def _git_head(path: Path, env: Mapping[str, str]) -> str | None:
    """The commit checked out at `path`, or None when it is not a git work tree."""
    head = (await git_output(path, env, "rev-parse", "--verify", "--quiet", "HEAD") or "").strip()
    return head or None


_BRANCH_TEMPLATES = Environment(undefined=StrictUndefined)
_BRANCH_TEMPLATES.filters["slugify"] = slugify


def _worktrees(settings: WorktreeSettings, root: Path, env: Mapping[str, str]) -> Worktrees:
    """The worktree strategy's layer, loaded by a workflow that uses it."""
    from symphony.workspace.worktrees import Worktrees

    return Worktrees(settings, root, env)


def render_branch(template: str, identifier: str) -> str:
    """The branch a ticket's worktree is on, from `workspace.branch`."""
    return _BRANCH_TEMPLATES.from_string(template).render(issue={"identifier": identifier}).strip()


def _foreign(path: Path) -> str:
    if path.is_symlink():
        what = "a symlink"
    elif path.is_dir():
        what = "a directory"
    else:
        what = "a file"
    return (
        f"{path} is {what} symphony did not create; it is never used or deleted as a "
        "workspace. Move it out of the workspace root (or choose another workspace.root) and "
        "the next attempt creates a fresh workspace there"
    )


def _log_result(bound: Any, result: _HookResult, ran: ScriptResult) -> None:
    fields: dict[str, Any] = {
        "outcome": result.outcome,
        "exit_code": result.exit_code,
        "duration_ms": int(ran.duration_s * 1000),
        "output": ran.output,
    }
    if ran.total_bytes > len(ran.tail):
        fields["output_truncated"] = f"showing last {len(ran.tail)} of {ran.total_bytes} bytes"
    if result.outcome == "completed":
        bound.info("hook completed", **fields)
    else:
        event = "hook timed out" if result.outcome == "timed_out" else "hook failed"
        bound.warning(event, reason=result.detail, **fields)


def _remove_tree(path: Path) -> list[str]:
    """Delete a directory tree without following symlinks; returns the failures, if any.

    Entries that vanish meanwhile are fine (a hook may have removed them). Read-only
    directories, as some package caches create, are made writable and retried once.
    """
    failures: list[str] = []
    top = os.fspath(path)

    def on_error(func: Callable[..., Any], failed: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        parent = os.path.dirname(failed)
        # Only directories inside the tree are made writable; the root's mode is the operator's.
        if (
            isinstance(exc, PermissionError)
            and func in (os.unlink, os.remove, os.rmdir)
            and os.path.commonpath([top, parent]) == top
        ):
            try:
                mode = os.lstat(parent).st_mode
                os.chmod(parent, mode | stat.S_IRWXU)
                func(failed)
                return
            except OSError as retry_exc:
                exc = retry_exc
        failures.append(f"{failed}: {exc}")

    if not os.path.lexists(path):
        return failures
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=on_error)
    else:

        def on_error_info(func: Callable[..., Any], failed: str, info: Any) -> None:
            on_error(func, failed, info[1])

        shutil.rmtree(path, onerror=on_error_info)
    return failures

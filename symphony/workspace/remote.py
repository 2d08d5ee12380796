"""The workspaces of an SSH worker host: made, hooked and removed there, as on this machine.

`RemoteWorkspaces` answers what the runner and the orchestrator ask of `WorkspaceManager`, for
one host: the workspace of a ticket is `<workspace_root>/<key>` on that host, created with an
ownership mark (`.symphony-owned/<key>`, the directory's device and inode) and deleted only
when its mark matches, so a folder symphony did not make is never used or removed there
either. Hooks run there with `sh -lc` in the workspace, and git's questions about it (evidence,
footprints, merge checks) are asked there (`git`). With `workspace.strategy: worktree` each
host has its own store (`symphony.workspace.worktrees`, run on the host) and a ticket's
workspace is a worktree of it on the ticket's branch, made, half-made and removed by the same
rules as here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

import structlog

from symphony.base.hosts import HOST_UNREACHABLE
from symphony.config.sections import HooksSettings, WorktreeSettings
from symphony.hosts import Host
from symphony.hosts.ssh import SshHost
from symphony.workspace.diff import BranchDiff
from symphony.workspace.diff import branch_diff as read_branch_diff
from symphony.workspace.facts import EVIDENCE_DIR, EVIDENCE_FILE
from symphony.workspace.git import Git, WorktreeError
from symphony.workspace.local import (
    HOOK_FAILED,
    HOOK_TIMEOUT,
    INVALID_WORKSPACE_PATH,
    OUTPUT_TAIL_BYTES,
    WORKSPACE_CREATE_FAILED,
    WORKSPACE_NOT_OWNED,
    WORKSPACE_REMOVE_FAILED,
    HookName,
    Workspace,
    WorkspaceError,
    render_branch,
    valid_key,
    workspace_key,
)
from symphony.workspace.worktrees import Worktrees

log = structlog.get_logger(__name__)

# The hand-off's evidence into the workspace on the host, as here (`symphony.workspace.facts`):
# its folder ignores itself in git; the text comes in the environment the wrapper was sent.
_WRITE_EVIDENCE = f"""
mkdir -p {EVIDENCE_DIR} || exit 1
[ -f {EVIDENCE_DIR}/.gitignore ] || printf '*\\n' > {EVIDENCE_DIR}/.gitignore
printf '%s\\n' "$SYMPHONY_EVIDENCE" > {EVIDENCE_DIR}/.{EVIDENCE_FILE}.tmp \\
  && mv -f {EVIDENCE_DIR}/.{EVIDENCE_FILE}.tmp {EVIDENCE_DIR}/{EVIDENCE_FILE}
"""
_READ_EVIDENCE = f'cat -- "$1/{EVIDENCE_DIR}/{EVIDENCE_FILE}" 2>/dev/null; exit 0'

# A worktree whose creation was cut short (a killed daemon): symphony's own (its mark matches),
# no start commit recorded yet (that comes once it is complete), and either empty or a `.git`
# that points into this root's store. $1 root, $2 key, $3 the store.
_HALF_MADE = r"""
ws="$1/$2"; mark="$1/.symphony-owned/$2"
[ -d "$ws" ] && [ ! -L "$ws" ] && [ -f "$mark" ] || exit 0
[ "$(cat -- "$mark")" = "$(stat -c %d:%i -- "$ws")" ] || exit 0
[ -s "$mark.base" ] && exit 0
if [ -z "$(ls -A -- "$ws")" ]; then echo half-made; exit 0; fi
case $(head -c 4096 -- "$ws/.git" 2>/dev/null) in "gitdir:"*"$3"*) echo half-made ;; esac
exit 0
"""


class RemoteWorkspaces:
    outlives_run = True

    def __init__(
        self,
        host: SshHost,
        hooks: HooksSettings,
        *,
        env: Mapping[str, str],
        worktrees: WorktreeSettings | None = None,
    ) -> None:
        self.host = host
        self._root = PurePosixPath(host.workspace_root)
        self._hooks = hooks
        self._env = dict(env)
        self.git = Git(host)
        """Where git answers about these workspaces: on the host."""
        self._worktrees = (
            Worktrees(worktrees, Path(self._root), {}, host=host) if worktrees else None
        )

    @property
    def root(self) -> Path:
        return Path(self._root)

    @property
    def remote_host(self) -> str | None:
        """The SSH host these workspaces are on (a person opens one with `ssh -t` there)."""
        return self.host.name

    def path_for(self, identifier: str) -> Path:
        return Path(self._root / workspace_key(identifier))

    def owned_path(self, identifier: str) -> Path | None:
        """A workspace on another machine is no local path (evidence files, `open`)."""
        return None

    async def merge_target(self) -> tuple[str, str] | None:
        """(name, ref) of the branch a hand-off must merge onto, fetched fresh on the host's
        store, with worktrees; None otherwise or when it cannot be fetched."""
        return await self._worktrees.merge_target() if self._worktrees is not None else None

    async def prune(self) -> None:
        """Forget the worktrees of the host's store whose folders are gone (at start-up)."""
        if self._worktrees is not None:
            await self._worktrees.forget_missing()

    async def write_evidence(self, identifier: str, evidence: Mapping[str, Any]) -> None:
        """The hand-off's evidence into the ticket's workspace on the host; a failure costs
        only the file."""
        if not await self.peer_paths([identifier]):
            return
        text = json.dumps(evidence, indent=2, sort_keys=True)
        ran = await self.host.without_sandbox().run_script(
            _WRITE_EVIDENCE, cwd=self.path_for(identifier), env={"SYMPHONY_EVIDENCE": text},
            timeout_ms=30_000, tail_bytes=OUTPUT_TAIL_BYTES,
        )  # fmt: skip
        if not ran.ok:
            log.warning("could not write the evidence file", host=self.host.name,
                        workspace=str(self.path_for(identifier)), reason=ran.detail)  # fmt: skip

    async def read_evidence(self, identifier: str) -> dict[str, Any] | None:
        said = await self.host.command(_READ_EVIDENCE, str(self.path_for(identifier)))
        with contextlib.suppress(ValueError):
            data = json.loads(said.out) if said.returncode == 0 and said.out.strip() else None
            return data if isinstance(data, dict) else None
        return None

    async def branch_diff(
        self, identifier: str, base: str, env: Mapping[str, str]
    ) -> BranchDiff | None:
        return await read_branch_diff(self.path_for(identifier), base, env, self.git)

    async def end_leftovers(self) -> None:
        return None

    async def keep_for_review(
        self, identifier: str, workspace: Workspace, base: str, env: Mapping[str, str]
    ) -> None:
        return None

    async def peer_paths(self, identifiers: Sequence[str]) -> list[tuple[str, Path]]:
        """Those of `identifiers` with a workspace of symphony's on this host, and its path
        (one connection for all)."""
        keys = {workspace_key(identifier): identifier for identifier in identifiers}
        if not keys:
            return []
        found = await self.host.owned_dirs(list(keys))
        if found.returncode != 0:
            return []
        return [(keys[key], self.path_for(keys[key])) for key in found.out.split() if key in keys]

    async def prepare(
        self,
        identifier: str,
        branch: str | None = None,
        on_status: Callable[[str], None] | None = None,
    ) -> Workspace:
        key = workspace_key(identifier)
        path = self.path_for(identifier)
        if self._worktrees is not None:
            await self._discard_half_made(key, path)
        made = await self.host.prepare_dir(key)
        if made.unreachable:
            raise WorkspaceError(
                HOST_UNREACHABLE, f"cannot reach {self.host.name}: {made.reason()}"
            )
        said = made.out.strip()
        if made.returncode != 0 or said not in ("created", "existing", "not-ours"):
            raise WorkspaceError(
                WORKSPACE_CREATE_FAILED,
                f"cannot create {path} on {self.host.name}: {made.reason()}",
            )
        if said == "not-ours":
            raise WorkspaceError(
                WORKSPACE_NOT_OWNED,
                f"{path} on {self.host.name} is something symphony did not create; it is "
                "never used or deleted as a workspace. Move it out of the workspace root there",
            )
        workspace = Workspace(
            path=path, key=key, created_now=said == "created", identifier=identifier
        )
        if workspace.created_now and self._worktrees is not None:
            await self._add_worktree(workspace, branch)
        if workspace.created_now:
            log.info("workspace created", workspace=str(path), host=self.host.name)
            if self._hooks.after_create is not None:
                failure = await self._run_hook("after_create", self._hooks.after_create, workspace)
                if failure is not None:
                    await self.host.remove_dir(key)  # a failed after_create leaves nothing
                    await self.prune()
                    raise failure
        # Where the ticket's work starts from: its commit once made, as recorded since.
        base = await self.host.workspace_base(key, stamp=workspace.created_now)
        return dataclasses.replace(workspace, base=base)

    async def _discard_half_made(self, key: str, path: Path) -> None:
        assert self._worktrees is not None
        found = await self.host.command(
            _HALF_MADE, str(self._root), key, str(self._worktrees.mirror)
        )
        if found.out.strip() != "half-made":
            return
        log.info("removing a half-made worktree", workspace=str(path), host=self.host.name)
        await self.host.remove_dir(key)
        await self.prune()

    async def _add_worktree(self, workspace: Workspace, branch: str | None) -> None:
        """Make the new, empty workspace a worktree of the host's store on its branch; a
        failure leaves nothing behind."""
        assert self._worktrees is not None
        identifier = workspace.identifier or workspace.key
        wanted = branch or render_branch(self._worktrees.settings.branch, identifier)
        try:
            name = await self._worktrees.branch_name(wanted, identifier)
            await self._worktrees.add(workspace.path, name)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.host.remove_dir(workspace.key))
                await self.prune()
            if isinstance(exc, WorktreeError):
                raise WorkspaceError(
                    WORKSPACE_CREATE_FAILED, f"{workspace.path} on {self.host.name}: {exc.message}"
                ) from None
            raise
        log.info("worktree added", workspace=str(workspace.path), branch=name, host=self.host.name)

    async def before_run(self, workspace: Workspace) -> None:
        if self._hooks.before_run is not None:
            failure = await self._run_hook("before_run", self._hooks.before_run, workspace)
            if failure is not None:
                raise failure

    async def after_run(self, workspace: Workspace) -> None:
        if self._hooks.after_run is not None:
            await self._run_hook("after_run", self._hooks.after_run, workspace)

    async def remove(self, identifier: str) -> bool:
        """`before_remove` (best effort) and the delete, both on the host; False when there
        was no workspace of symphony's there."""
        key = workspace_key(identifier)
        path = self.path_for(identifier)
        if self._hooks.before_remove is not None:
            workspace = Workspace(path=path, key=key, created_now=False, identifier=identifier)
            await self._run_hook("before_remove", self._hooks.before_remove, workspace)
        if self._worktrees is not None and await self.peer_paths([identifier]):
            try:
                await self._worktrees.remove(path)  # its branch stays; only a worktree of ours
            except WorktreeError as exc:
                log.warning("worktree not unregistered", workspace=str(path), host=self.host.name,
                            reason=exc.message)  # fmt: skip
        gone = await self.host.remove_dir(key)
        said = gone.out.strip()
        if gone.unreachable or gone.returncode != 0:
            raise WorkspaceError(
                WORKSPACE_REMOVE_FAILED,
                f"cannot remove {path} on {self.host.name}: {gone.reason()}",
            )
        if said == "not-ours":
            log.warning(
                "workspace left in place: symphony did not create it",
                issue_identifier=identifier, workspace=str(path), host=self.host.name,
            )  # fmt: skip
        return said == "removed"

    def check_agent_cwd(self, workspace: Workspace) -> None:
        """The launch invariant, as far as it can be checked from here: the path is the
        ticket's key directly under the host's root (the wrapper refuses a missing one)."""
        if (
            not valid_key(workspace.key)
            or PurePosixPath(workspace.path) != self._root / workspace.key
        ):
            raise WorkspaceError(
                INVALID_WORKSPACE_PATH,
                f"{workspace.path} is not the workspace {workspace.key!r} under {self._root} "
                f"on {self.host.name}",
            )

    async def _run_hook(
        self, name: HookName, script: str, workspace: Workspace
    ) -> WorkspaceError | None:
        return await run_hook_there(
            self.host, name, script, workspace, env=self._env, root=self._root,
            timeout_ms=self._hooks.timeout_ms, workspace_path=str(workspace.path),
        )  # fmt: skip


async def run_hook_there(
    host: Host,
    name: HookName,
    script: str,
    workspace: Workspace,
    *,
    env: Mapping[str, str],
    root: PurePath,
    timeout_ms: int,
    **log_fields: str,
) -> WorkspaceError | None:
    """Run a hook in `workspace` on another host (an SSH host, a run's pod) and say how it
    went; a host that could not be reached is `host_unreachable`, not the hook's failure."""
    hook_env = {
        **env,
        "SYMPHONY_WORKSPACE": str(workspace.path),
        "SYMPHONY_ISSUE_IDENTIFIER": workspace.identifier or workspace.key,
        "SYMPHONY_WORKSPACE_ROOT": str(root),
        "SYMPHONY_HOOK": name,
    }
    bound = log.bind(hook=name, host=host.name, issue_identifier=workspace.identifier or None,
                     **log_fields)  # fmt: skip
    ran = await host.run_script(
        script, cwd=workspace.path, env=hook_env, timeout_ms=timeout_ms,
        tail_bytes=OUTPUT_TAIL_BYTES,
    )  # fmt: skip
    fields = {"outcome": ran.outcome, "exit_code": ran.exit_code, "output": ran.output}
    if ran.ok:
        bound.info("hook completed", **fields)
        return None
    bound.warning("hook failed", reason=ran.detail, **fields)
    if ran.exit_code == 255:
        return WorkspaceError(HOST_UNREACHABLE, f"{name} hook: {ran.detail}")
    category = HOOK_TIMEOUT if ran.outcome == "timed_out" else HOOK_FAILED
    return WorkspaceError(category, f"{name} hook {ran.detail}")

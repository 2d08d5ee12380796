"""The workspaces of an SSH worker host: made, hooked and removed there, as on this machine.

`RemoteWorkspaces` answers what the runner and the orchestrator ask of `WorkspaceManager`, for
one host: the workspace of a ticket is `<workspace_root>/<key>` on that host, created with an
ownership mark (`.symphony-owned/<key>`, the directory's device and inode) and deleted only
when its mark matches, so a folder symphony did not make is never used or removed there
either. Hooks run there with `sh -lc` in the workspace, and git's questions about it (evidence,
footprints, merge checks) are asked there (`git`). Only the `empty` strategy runs on hosts:
hooks populate a workspace (a clone), as without worktrees here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

import structlog

from symphony.base.hosts import HOST_UNREACHABLE
from symphony.config.sections import HooksSettings
from symphony.hosts.ssh import SshHost
from symphony.workspace.git import Git
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
    valid_key,
    workspace_key,
)

log = structlog.get_logger(__name__)


class RemoteWorkspaces:
    def __init__(self, host: SshHost, hooks: HooksSettings, *, env: Mapping[str, str]) -> None:
        self.host = host
        self._root = PurePosixPath(host.workspace_root)
        self._hooks = hooks
        self._env = dict(env)
        self.git = Git(host)
        """Where git answers about these workspaces: on the host."""

    @property
    def root(self) -> Path:
        return Path(self._root)

    def path_for(self, identifier: str) -> Path:
        return Path(self._root / workspace_key(identifier))

    def owned_path(self, identifier: str) -> Path | None:
        """A workspace on another machine is no local path (evidence files, `open`)."""
        return None

    async def merge_target(self) -> tuple[str, str] | None:
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

    async def prepare(self, identifier: str, branch: str | None = None) -> Workspace:
        key = workspace_key(identifier)
        path = self.path_for(identifier)
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
        if workspace.created_now:
            log.info("workspace created", workspace=str(path), host=self.host.name)
            if self._hooks.after_create is not None:
                failure = await self._run_hook("after_create", self._hooks.after_create, workspace)
                if failure is not None:
                    await self.host.remove_dir(key)  # a failed after_create leaves nothing
                    raise failure
        # Where the ticket's work starts from: its commit once made, as recorded since.
        base = await self.host.workspace_base(key, stamp=workspace.created_now)
        return dataclasses.replace(workspace, base=base)

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
        env = {
            **self._env,
            "SYMPHONY_WORKSPACE": str(workspace.path),
            "SYMPHONY_ISSUE_IDENTIFIER": workspace.identifier or workspace.key,
            "SYMPHONY_WORKSPACE_ROOT": str(self._root),
            "SYMPHONY_HOOK": name,
        }
        bound = log.bind(
            hook=name, workspace=str(workspace.path), host=self.host.name,
            issue_identifier=workspace.identifier or None,
        )  # fmt: skip
        ran = await self.host.run_script(
            script, cwd=workspace.path, env=env, timeout_ms=self._hooks.timeout_ms,
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

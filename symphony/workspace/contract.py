"""The workspaces of one host, as the daemon uses them: this machine's (`WorkspaceManager`), an
SSH worker host's (`RemoteWorkspaces`) or the one of a run's pod (`PodWorkspaces`).

Whoever holds a `Workspaces` makes, hooks, checks and removes a ticket's workspace and asks git
about it without knowing where it is: a path in a `Workspace` is a path on its host, and `git`
runs there. Only `owned_path` admits the difference, since a workspace elsewhere has no path
on this machine (evidence files read here, `open`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from symphony.workspace.diff import BranchDiff
from symphony.workspace.git import Git
from symphony.workspace.local import Workspace


class Workspaces(Protocol):
    git: Git
    """Where git answers about these workspaces: on their host."""
    outlives_run: bool
    """Whether a ticket's workspace is still there after its run (here, an SSH host); a
    run's pod ends with its run, so what the daemon does later from the workspace (the push
    of a publication) is done at the run's hand-off instead."""

    @property
    def root(self) -> Path: ...

    @property
    def remote_host(self) -> str | None:
        """The SSH host the workspaces are on; None for this machine."""
        ...

    def path_for(self, identifier: str) -> Path: ...

    def owned_path(self, identifier: str) -> Path | None:
        """The ticket's workspace as a path on this machine, when it is here and symphony's."""
        ...

    async def prepare(
        self,
        identifier: str,
        branch: str | None = None,
        on_status: Callable[[str], None] | None = None,
    ) -> Workspace:
        """The ticket's workspace, made (with `after_create`) when it is not there yet;
        `on_status` hears what a wait for the place to exist (a pod's room) is about."""
        ...

    async def before_run(self, workspace: Workspace) -> None: ...

    async def after_run(self, workspace: Workspace) -> None: ...

    async def remove(self, identifier: str) -> bool:
        """`before_remove` and the delete; False when there was no workspace of symphony's."""
        ...

    def check_agent_cwd(self, workspace: Workspace) -> None:
        """Raise `WorkspaceError` unless the agent may be started in `workspace`."""
        ...

    async def peer_paths(self, identifiers: Sequence[str]) -> list[tuple[str, Path]]:
        """Those of `identifiers` with a workspace of symphony's here, and its path."""
        ...

    async def merge_target(self) -> tuple[str, str] | None: ...

    async def prune(self) -> None: ...

    async def write_evidence(self, identifier: str, evidence: Mapping[str, Any]) -> None: ...

    async def read_evidence(self, identifier: str) -> dict[str, Any] | None: ...

    async def branch_diff(
        self, identifier: str, base: str, env: Mapping[str, str]
    ) -> BranchDiff | None:
        """The ticket's branch against `base`, for a person's review: read in its workspace,
        or, for one that ended with its run, as its last hand-off kept it here."""
        ...

    async def end_leftovers(self) -> None:
        """In a workspace that ends with its run, once its agent has stopped and before the
        daemon's own work there with its token (a pod's hand-off): end every process the run
        left. Nothing to do where the workspace stays."""
        ...

    async def keep_for_review(
        self, identifier: str, workspace: Workspace, base: str, env: Mapping[str, str]
    ) -> None:
        """At a hand-off, keep on this machine what the review page reads of a workspace that
        ends with its run (`outlives_run` false); nothing to do where the workspace stays."""
        ...

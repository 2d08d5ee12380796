"""The workspace of a run in its own pod (`worker.kubernetes`): made with the pod, gone with it
(an `emptyDir`), or on the ticket's claim (`workspace: pvc:<claim>`), kept between its runs.

`PodWorkspaces` answers what the runner asks of a host's workspaces for one run: `prepare`
makes the run's pod (`symphony.hosts.kubernetes.pods`), waits until it runs (saying so while
the cluster has no room), then makes `/workspace/<key>` in it the ticket's checkout: with
`workspace.strategy: worktree` a clone of `workspace.repository` on the ticket's branch (the
code host's token, when the repository needs one, goes to that one git command on its stdin
and to a credential helper that reads it from there; never a command line, never a file),
then `after_create`; a branch an earlier run of the ticket pushed is checked out where it
left off, and a kept claim's checkout goes on on its branch. Hooks and gates run in the pod;
`after_run` deletes it, with its NetworkPolicy. Every run starts a new agent thread (on a fresh
checkout or a kept claim's), so none is resumed across runs.

The workspace ends with the run (`outlives_run` false), so what the daemon needs of it later
is done at the hand-off, in the pod: the branch pushed (`symphony.daemon.publish.
push_before_end`) and the branch's diff kept on this machine (`keep_for_review`), beside the
evidence once published, in a folder per ticket that `remove` deletes (with the ticket's
claim, when this workflow made it). The merge check
onto the base uses the clone's `origin/<base>`; other tickets' workspaces are not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import structlog

from symphony.base.hosts import HOST_UNREACHABLE
from symphony.config.sandbox import HostPattern, Network
from symphony.config.sections import HooksSettings
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.manifests import WORKSPACE
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from symphony.workspace.diff import BranchDiff
from symphony.workspace.diff import branch_diff as read_branch_diff
from symphony.workspace.facts import read_evidence_file, write_evidence_file
from symphony.workspace.git import Git
from symphony.workspace.local import (
    INVALID_WORKSPACE_PATH,
    OUTPUT_TAIL_BYTES,
    WORKSPACE_CREATE_FAILED,
    HookName,
    Workspace,
    WorkspaceError,
    render_branch,
    workspace_key,
)
from symphony.workspace.remote import run_hook_there

log = structlog.get_logger(__name__)

CLONE_TIMEOUT_MS = 600_000
KEPT_DIFF = "diff.json"
_END_ALL = "kill -KILL -1 2>/dev/null; exit 0"

# The ticket's checkout, in the empty workspace (or the kept claim's): the token is read by the
# credential helper from this command's environment (sent on stdin); git never stores it.
_CLONE = r"""
set -e
helper='!f() { test "$1" = get || exit 0; echo "username=$SYMPHONY_CLONE_USER";'
helper="$helper"' echo "password=$SYMPHONY_CLONE_TOKEN"; }; f'
auth() { git -c credential.helper= -c "credential.helper=$helper" -c core.askPass= "$@"; }
kept=
if [ -d .git ]; then  # a claim kept from the ticket's last run
  rm -f .git/symphony-start
  auth fetch --quiet origin
  git rev-parse --verify --quiet "refs/heads/$SYMPHONY_BRANCH" >/dev/null && kept=1
else
  auth clone --quiet --no-checkout -- "$SYMPHONY_CLONE_URL" .
fi
if [ -n "$SYMPHONY_CLONE_BASE" ]; then
  start=$SYMPHONY_CLONE_BASE
  git rev-parse --verify --quiet "origin/$start" >/dev/null && start="origin/$start"
else
  start=$(git symbolic-ref --quiet --short refs/remotes/origin/HEAD || echo HEAD)
fi
pushed="refs/remotes/origin/$SYMPHONY_BRANCH"
if [ -n "$kept" ]; then
  # The branch goes on where the last run left it, with what it left beside it; what the
  # remote got since (a person's commits on it) is taken when the branch is behind it.
  git checkout --quiet "$SYMPHONY_BRANCH"
  if git rev-parse --verify --quiet "$pushed" >/dev/null; then
    git merge --quiet --ff-only "$pushed" >/dev/null 2>&1 || true
  fi
  git merge-base HEAD "$start" > .git/symphony-start 2>/dev/null || rm -f .git/symphony-start
  exit 0
fi
if git rev-parse --verify --quiet "$pushed" >/dev/null; then
  # An earlier run pushed the branch: this one (a fix, a rework) goes on from it, and its
  # evidence measures from where the branch left the base.
  git checkout --quiet -B "$SYMPHONY_BRANCH" "$pushed"
  git merge-base HEAD "$start" > .git/symphony-start 2>/dev/null || rm -f .git/symphony-start
  exit 0
fi
git checkout --quiet -B "$SYMPHONY_BRANCH" "$start"
"""


@dataclass(frozen=True, slots=True)
class CloneSource:
    """Where a pod's workspace is cloned from (`workspace.repository`), the branch template
    and the start (`workspace.base`), and the code host's credential for it."""

    url: str
    branch: str
    base: str | None = None
    token: str = ""
    username: str = ""


class PodWorkspaces:
    outlives_run = False
    """The workspace ends with the run's pod: a publishing hand-off pushes before it does."""

    def __init__(
        self,
        pods: Pods,
        host: KubectlHost,
        hooks: HooksSettings,
        *,
        env: Mapping[str, str],
        ticket: str,
        run: str,
        network: Network,
        model_hosts: Sequence[HostPattern] = (),
        clone: CloneSource | None = None,
        kept: Path | None = None,
        issue_id: str = "",
    ) -> None:
        self.pods = pods
        self.host = host
        """The run's pod, by the name it is made with (`prepare`)."""
        self._made = False
        self._hooks = hooks
        self._env = dict(env)
        self._ticket, self._run, self._network = ticket, run, network
        self._issue_id = issue_id
        self._model_hosts = tuple(model_hosts)
        """What `network: model` lets out, resolved when the pod is made."""
        self._clone = clone
        self._kept = kept
        """Where a hand-off's evidence and diff are kept on this machine, a folder per ticket,
        for the review page once the pod has gone (None: nowhere)."""
        self.git = Git(host)
        """In the pod; once it ended, every answer is unknown."""

    @property
    def root(self) -> Path:
        return Path(WORKSPACE)

    @property
    def remote_host(self) -> str | None:
        return self.host.name

    def path_for(self, identifier: str) -> Path:
        """`/workspace/<key>`: a folder the pod's user makes and owns (the volume's root is
        root's, which git refuses to work in as another user)."""
        return Path(WORKSPACE) / workspace_key(identifier)

    def owned_path(self, identifier: str) -> Path | None:
        return None

    async def merge_target(self) -> tuple[str, str] | None:
        """`workspace.base` as the run's clone fetched it when the pod started (minutes ago,
        not fetched again: the pod's git would need the token once more); None without one."""
        if self._clone is None or not self._clone.base:
            return None
        return f"origin/{self._clone.base}", f"refs/remotes/origin/{self._clone.base}"

    async def prune(self) -> None:
        return None

    def _kept_for(self, identifier: str) -> Path | None:
        return self._kept / workspace_key(identifier) if self._kept is not None else None

    async def write_evidence(self, identifier: str, evidence: Mapping[str, Any]) -> None:
        """The hand-off's evidence, kept here beside its diff (the pod has gone by now)."""
        kept = self._kept_for(identifier)
        if kept is None:
            return
        try:
            kept.mkdir(parents=True, exist_ok=True)
            write_evidence_file(kept, evidence)
        except OSError as exc:
            log.warning("could not keep the evidence file", folder=str(kept), reason=str(exc))

    async def read_evidence(self, identifier: str) -> dict[str, Any] | None:
        kept = self._kept_for(identifier)
        return read_evidence_file(kept) if kept is not None else None

    async def end_leftovers(self) -> None:
        """SIGKILL every process in the pod but its waiting process (the container's init,
        which a signal from inside its namespace never reaches) and this command itself: the
        agent has stopped, so whatever is left is the run's (a child that left its group,
        a daemon an agent started) and would see the environment of the push that follows."""
        ended = await self.host.command(_END_ALL)
        if ended.returncode != 0:
            log.warning("leftover processes in the pod not ended", pod=self.host.name,
                        reason=ended.reason())  # fmt: skip

    async def keep_for_review(
        self, identifier: str, workspace: Workspace, base: str, env: Mapping[str, str]
    ) -> None:
        """The branch's diff against `base`, read in the pod now and kept here as JSON: the
        review page's view of the hand-off once the pod has gone. Best effort."""
        kept = self._kept_for(identifier)
        if kept is None:
            return
        diff = await read_branch_diff(workspace.path, base, env, self.git)
        try:
            kept.mkdir(parents=True, exist_ok=True)
            target, temp = kept / KEPT_DIFF, kept / f".{KEPT_DIFF}.tmp"
            if diff is None:
                target.unlink(missing_ok=True)
                return
            temp.write_text(json.dumps(diff.to_json()), encoding="utf-8")
            temp.replace(target)
        except OSError as exc:
            log.warning("could not keep the branch's diff", folder=str(kept), reason=str(exc))

    async def branch_diff(
        self, identifier: str, base: str, env: Mapping[str, str]
    ) -> BranchDiff | None:
        """As the ticket's last hand-off kept it (its pod has gone)."""
        kept = self._kept_for(identifier)
        if kept is None:
            return None
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads((kept / KEPT_DIFF).read_text(encoding="utf-8"))
            return BranchDiff.from_json(data) if isinstance(data, dict) else None
        return None

    async def peer_paths(self, identifiers: Sequence[str]) -> list[tuple[str, Path]]:
        return []

    async def prepare(
        self,
        identifier: str,
        branch: str | None = None,
        on_status: Callable[[str], None] | None = None,
    ) -> Workspace:
        try:
            made = await self.pods.start(
                self._ticket or identifier, self._run, self._network,
                on_status or (lambda _: None), self._model_hosts, self._issue_id,
            )  # fmt: skip
        except PodFailed as exc:
            category = HOST_UNREACHABLE if exc.unreachable else WORKSPACE_CREATE_FAILED
            raise WorkspaceError(category, exc.message) from None
        assert made.pod == self.host.pod, "a run's pod is named by its instance, ticket and run"
        self._made = True
        workspace = Workspace(
            path=self.path_for(identifier), key=workspace_key(identifier), created_now=True,
            identifier=identifier,
        )  # fmt: skip
        try:
            made_dir = await self.host.command('mkdir -p -- "$1"', str(workspace.path))
            if made_dir.returncode != 0:
                raise WorkspaceError(
                    HOST_UNREACHABLE if made_dir.unreachable else WORKSPACE_CREATE_FAILED,
                    f"cannot make {workspace.path} in pod {self.host.name}: {made_dir.reason()}",
                )
            if self._clone is not None:
                await self._checkout(workspace, branch)
            if self._hooks.after_create is not None:
                failure = await self._run_hook("after_create", self._hooks.after_create, workspace)
                if failure is not None:
                    raise failure
        except BaseException:
            await self._end()
            raise
        said = await self.host.command(
            'cd -- "$1" && { cat .git/symphony-start 2>/dev/null'
            " || git rev-parse --verify --quiet HEAD 2>/dev/null || true; }",
            str(workspace.path),
        )
        head = said.out.strip() if said.returncode == 0 else ""
        return Workspace(
            path=workspace.path, key=workspace.key, created_now=True, identifier=identifier,
            base=head or None,
        )  # fmt: skip

    async def _checkout(self, workspace: Workspace, branch: str | None) -> None:
        clone = self._clone
        assert clone is not None
        name = branch or render_branch(clone.branch, workspace.identifier)
        sent = {
            "SYMPHONY_CLONE_URL": clone.url,
            "SYMPHONY_CLONE_TOKEN": clone.token,
            "SYMPHONY_CLONE_USER": clone.username,
            "SYMPHONY_CLONE_BASE": clone.base or "",
            "SYMPHONY_BRANCH": name,
            "GIT_TERMINAL_PROMPT": "0",
        }
        ran = await self.host.run_script(
            _CLONE, cwd=workspace.path, env=sent, timeout_ms=CLONE_TIMEOUT_MS,
            tail_bytes=OUTPUT_TAIL_BYTES,
        )  # fmt: skip
        if not ran.ok:
            said = ran.output.replace(clone.token, "***") if clone.token else ran.output
            raise WorkspaceError(
                WORKSPACE_CREATE_FAILED,
                f"cannot clone {clone.url} in pod {self.host.name}: {ran.detail}: {said[-300:]}",
            )
        log.info("workspace cloned", pod=self.host.name, branch=name)

    async def before_run(self, workspace: Workspace) -> None:
        if self._hooks.before_run is not None:
            failure = await self._run_hook("before_run", self._hooks.before_run, workspace)
            if failure is not None:
                raise failure

    async def after_run(self, workspace: Workspace) -> None:
        """`after_run` in the pod, then the pod and its policy deleted: the run is over."""
        try:
            if self._hooks.after_run is not None and self._made:
                await self._run_hook("after_run", self._hooks.after_run, workspace)
        finally:
            await self._end()

    async def _end(self) -> None:
        if self._made:
            self._made = False
            with contextlib.suppress(Exception):
                await asyncio.shield(self.pods.delete(self.host.pod))

    async def remove(self, identifier: str) -> bool:
        """The ticket is done with: what its hand-offs kept here goes, and its claim
        (`workspace: pvc:`) when this workflow made it. False when there was neither."""
        claimed = await self.pods.claims.remove_for(identifier)
        kept = self._kept_for(identifier)
        if kept is None or not kept.is_dir():
            return claimed
        await asyncio.to_thread(shutil.rmtree, kept, True)
        return True

    def check_agent_cwd(self, workspace: Workspace) -> None:
        wanted = PurePosixPath(WORKSPACE) / workspace.key
        if not self._made or PurePosixPath(workspace.path) != wanted:
            raise WorkspaceError(
                INVALID_WORKSPACE_PATH, f"{workspace.path} is not the workspace of a run's pod"
            )

    async def _run_hook(
        self, name: HookName, script: str, workspace: Workspace
    ) -> WorkspaceError | None:
        return await run_hook_there(
            self.host, name, script, workspace, env=self._env, root=self.root,
            timeout_ms=self._hooks.timeout_ms, pod=self.host.name,
        )  # fmt: skip

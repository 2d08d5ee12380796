"""A workflow's cluster (`worker.kubernetes`): its pods and claims, the workspaces of a run's
pod, and what start-up clears there. Loaded only by a workflow that names a cluster; the
rest of the daemon knows it through `Places.pods`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from symphony import core
from symphony.config.kubernetes import KubernetesSettings
from symphony.config.sandbox import HostPattern, Network
from symphony.config.sections import Settings
from symphony.daemon.publish import PUSH_USERNAME
from symphony.daemon.reads import TrackerReads
from symphony.daemon.sandbox import pod_hand_offs_root
from symphony.hosts.kubernetes.claims import ClaimsFailed
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.kubectl import ClusterStatus, Kubectl
from symphony.hosts.kubernetes.manifests import pod_name
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from symphony.tracker.contract import Tracker, TrackerError
from symphony.workspace.pod import CloneSource, PodWorkspaces

log = structlog.get_logger("symphony.orchestrator")


def open_pods(
    cluster: KubernetesSettings,
    environ: Mapping[str, str],
    instance_id: str,
    workflow_id: str,
    status: ClusterStatus | None,
) -> Pods:
    """This workflow's pods in `cluster`, one per run, and its tickets' claims, labelled with
    `workflow_id`; `status`: what the places before a reload heard from the same cluster."""
    return Pods(Kubectl(cluster, environ, status=status), instance_id, workflow=workflow_id)


def pod_workspaces(
    pods: Pods,
    settings: Settings,
    env: dict[str, str],
    *,
    ticket: str,
    run: str,
    network: Network,
    hosts: Sequence[HostPattern],
    issue_id: str,
) -> PodWorkspaces:
    """The workspaces of `ticket`'s `run` in a pod of its own, cloned from the workflow's
    repository, its hand-offs kept beside the store."""
    host = KubectlHost(pods.kubectl, pod_name(pods.instance, ticket, run))
    return PodWorkspaces(
        pods, host, settings.hooks, env=env, ticket=ticket, run=run, network=network,
        model_hosts=hosts, clone=clone_source(settings), kept=pod_hand_offs_root(settings),
        issue_id=issue_id,
    )  # fmt: skip


def clone_source(settings: Settings) -> CloneSource | None:
    """Where a pod's checkout comes from: `workspace.repository` (`strategy: worktree`), with
    the code host's token when the workflow has one."""
    worktrees = settings.workspace.worktrees
    if worktrees is None:
        return None
    repository = settings.repository
    token = repository.token if repository is not None else ""
    username = PUSH_USERNAME[repository.kind] if repository is not None else ""
    return CloneSource(worktrees.repository, worktrees.branch, worktrees.base, token, username)


async def delete_orphan_pods(pods: Pods, previous: Sequence[str]) -> int:
    """Delete what earlier daemons of this workflow left running in the cluster (never adopted,
    by the rule for local and remote agents: a restarted run starts in a new pod); a cluster
    that cannot be reached is reported and skipped."""
    if not previous:
        return 0
    try:
        deleted = await pods.delete_orphans(previous)
    except PodFailed as exc:
        log.warning("orphan pods not checked", reason=exc.message)
        return 0
    if deleted:
        log.warning("deleted pods an earlier daemon left running",
                    pods=[p.name for p in deleted])  # fmt: skip
    return len(deleted)


async def delete_ended_claims(
    reads: TrackerReads, tracker: Tracker, settings: Settings, pods: Pods
) -> list[str]:
    """Delete this workflow's workspace claims (found by its label, whatever the claim's name
    or `workspace` says now) whose tickets are terminal; what was deleted. A cluster or a
    tracker that cannot be read decides nothing."""
    try:
        listed = await pods.claims.listed()
    except ClaimsFailed as exc:
        log.warning("claims not checked", reason=exc.message)
        return []
    if not listed:
        return []
    ids = sorted({c.issue_id for c in listed if c.issue_id})
    try:
        found = await reads.read("startup_cleanup", tracker.fetch_issues_by_ids(ids))
    except TrackerError as exc:
        log.warning("claims not checked", reason=str(exc))
        return []
    fates = core.claim_fates({c.name: c.issue_id for c in listed}, found, settings.tracker)
    ended = [c for c in listed if fates[c.name] is not None]
    if ended and await pods.claims.delete(*(c.name for c in ended)):
        log.info("deleted the claims of ended tickets",
                 claims={c.name: f"{c.ticket}: {fates[c.name]}" for c in ended})  # fmt: skip
        return [c.name for c in ended]
    return []

"""Where a run may happen: this machine's workspaces and each SSH host's, with the environment a
child gets on each.

Built from the settings, the daemon's environment, the tracker's secret names (removed from every
child) and the instance id (carried by every child, so a restart finds what an earlier daemon
left). The orchestrator builds a new one when a reload changes the tracker, the workspace, the
hooks or the worker hosts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from symphony.agents.registry import model_hosts
from symphony.base.hosts import CLUSTER, LOCAL
from symphony.config.sandbox import HostPattern, Network, SandboxSettings
from symphony.config.sections import Settings
from symphony.daemon.sandbox import hook_sandbox
from symphony.gateway.tokens import routes
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST
from symphony.workspace.contract import Workspaces as Workspaces
from symphony.workspace.environment import child_environment, remote_environment
from symphony.workspace.local import WorkspaceManager

if TYPE_CHECKING:
    from symphony.config.kubernetes import KubernetesSettings
    from symphony.hosts.kubernetes.kubectl import ClusterStatus
    from symphony.hosts.kubernetes.pods import Pods
    from symphony.workspace.pod import PodWorkspaces
    from symphony.workspace.remote import RemoteWorkspaces


@dataclass(frozen=True, slots=True)
class RunPlace:
    """What one attempt is given: its host's workspaces, the host, the environment of its
    hooks and gates, and the agent's own."""

    workspaces: Workspaces
    host: Host
    child_env: dict[str, str]
    agent_env: dict[str, str]


class Places:
    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str],
        secret_names: Sequence[str],
        instance_id: str,
        previous: Places | None = None,
        workflow_id: str = "",
    ) -> None:
        self._environ = environ
        self._secret_names = tuple(secret_names)
        self._instance_id = instance_id
        hook_env = self.child_env(settings)
        self.local = WorkspaceManager(
            settings.workspace.root,
            settings.hooks,
            env=hook_env,
            worktrees=settings.workspace.worktrees,
            hook_host=hook_sandbox(settings, environ, hook_env),
        )
        self.remote: dict[str, RemoteWorkspaces] = {}
        """The workspaces of each SSH worker host, by its name."""
        if settings.worker.hosts:
            from symphony.daemon.ssh_hosts import open_remote_workspaces  # only with SSH hosts

            self.remote = open_remote_workspaces(settings, environ, self.remote_env(settings))
        cluster = settings.worker.kubernetes
        self.pods: Pods | None = None
        if cluster is not None:
            from symphony.daemon.cluster import open_pods  # only a workflow that names one

            status = _same_cluster(previous, cluster)
            self.pods = open_pods(cluster, environ, instance_id, workflow_id, status)
        """This workflow's pods, with `worker.kubernetes`: one per run; and its tickets' claims,
        labelled with `workflow_id` (its store's, the same across restarts)."""
        self._settings = settings

    def on(self, host: str) -> Workspaces:
        """The workspaces of `host` (this machine's for `local` or a host no longer listed;
        for the cluster, those of a run that has ended, where nothing is left)."""
        if host == CLUSTER and self.pods is not None:
            return self._pod_run(self._settings, "", "", Network.NONE)
        return self.remote.get(host, self.local) if host != LOCAL else self.local

    def for_run(
        self,
        settings: Settings,
        host: str,
        agent_env_names: Sequence[str],
        *,
        ticket: str = "",
        run: str = "",
        sandbox: SandboxSettings | None = None,
        agent_kind: str = "",
        issue_id: str = "",
    ) -> RunPlace:
        """Where an attempt on `host` runs, with the environments of the current settings; on
        the cluster, in a pod of its own for `ticket`'s `run`, let out on `sandbox`'s network
        (`model`: its `allow_hosts`, or else `agent_kind`'s model hosts, none when the agent
        holds an API key and so calls the daemon's gateway, which the policy lets out)."""
        if host == CLUSTER and self.pods is not None:
            env = self.remote_env(settings)
            network = sandbox.network if sandbox is not None and sandbox.enabled else Network.FULL
            hosts: tuple[HostPattern, ...] = ()
            if network is Network.MODEL and sandbox is not None:
                listed = sandbox.allow_hosts
                keyed = bool(routes(env))
                default = () if keyed else model_hosts(agent_kind, env)
                hosts = listed if listed is not None else default
            workspaces = self._pod_run(settings, ticket, run, network, hosts, issue_id)
            return RunPlace(workspaces, workspaces.host, env, env)
        remote = self.remote.get(host) if host != LOCAL else None
        if remote is not None:
            # A host gets one environment for all (its own basics are its own).
            env = self.remote_env(settings)
            return RunPlace(remote, remote.host, env, env)
        return RunPlace(
            self.local,
            LOCAL_HOST,
            self.child_env(settings),
            self.child_env(settings, agent_env_names),
        )

    def _pod_run(
        self,
        settings: Settings,
        ticket: str,
        run: str,
        network: Network,
        hosts: Sequence[HostPattern] = (),
        issue_id: str = "",
    ) -> PodWorkspaces:
        assert self.pods is not None
        from symphony.daemon.cluster import pod_workspaces  # loaded with the pods, above

        return pod_workspaces(
            self.pods, settings, self.remote_env(settings), ticket=ticket, run=run,
            network=network, hosts=hosts, issue_id=issue_id,
        )  # fmt: skip

    async def close(self) -> None:
        """At shutdown: the connections symphony's own commands to the hosts share."""
        await asyncio.gather(*(w.host.close_shared() for w in self.remote.values()))

    def cluster(self) -> dict[str, Any] | None:
        """With `worker.kubernetes`: the cluster as the status surfaces show it (its context
        and namespace, the pods running and pending, whether kubectl last reached it)."""
        if self.pods is None:
            return None
        kubectl = self.pods.kubectl
        seen, settings = kubectl.status, kubectl.settings
        return {
            "context": settings.context,
            "namespace": settings.namespace,
            "max_pods": settings.max_pods,
            "running": len(seen.running),
            "pending": len(seen.pending),
            "pending_reasons": sorted(set(seen.pending.values())),
            "reached": seen.reached,
            "error": seen.error,
            "checked_at": (
                datetime.fromtimestamp(seen.at, UTC).isoformat() if seen.at is not None else None
            ),
        }

    def host_roots(self) -> dict[str, str | None]:
        """Each SSH host's workspace root, for the status surfaces."""
        return {name: w.host.workspace_root for name, w in self.remote.items()}

    def child_env(self, settings: Settings, extra_names: Sequence[str] = ()) -> dict[str, str]:
        """A local child's environment (`symphony.workspace.environment`)."""
        return child_environment(
            self._environ,
            settings,
            self._secret_names,
            self._instance_id,
            extra_names=extra_names,
        )

    def remote_env(self, settings: Settings) -> dict[str, str]:
        """What crosses to an SSH host for every child there."""
        return remote_environment(self._environ, settings, self._secret_names, self._instance_id)


def _same_cluster(previous: Places | None, cluster: KubernetesSettings) -> ClusterStatus | None:
    """What the places before a reload heard from the same cluster and namespace (its pods
    are the same ones), so the status surfaces go on counting them."""
    if previous is None or previous.pods is None:
        return None
    before = previous.pods.kubectl
    same = (before.settings.context, before.namespace) == (cluster.context, cluster.namespace)
    return before.status if same else None

"""What the daemon does with the cluster beyond a run's own pod (`worker.kubernetes`): refuse
a workflow whose agents would need the daemon's loopback from a pod, delete at start-up the
pods earlier daemons of this workflow left, and say in `check` what it would do with each.

A pod reaches nothing on the daemon's loopback: not the tool server claude and ACP agents take
their tools from (refused at load), nor the model gateway an agent holding an API key calls
its model through (refused here, as the key's presence depends on the daemon's environment).
Earlier daemons' pods are deleted, never adopted, by the rule for local and remote agents
(SPEC §20.3): no new agent works beside an old one, and a restarted run starts in a new pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from symphony.config.sections import Settings
from symphony.gateway.tokens import routes
from symphony.hosts.kubernetes.manifests import label_value
from symphony.hosts.kubernetes.pods import ListedPod, PodFailed, Pods
from symphony.workspace.environment import remote_environment

log = structlog.get_logger("symphony.orchestrator")


def gateway_refusal(settings: Settings, environ: Mapping[str, str]) -> str | None:
    """Why runs of this workflow cannot go to pods: an API key the pod's agent would be sent
    (`agent.env`, `worker.ssh.pass_env`) makes its calls go through the model gateway."""
    if settings.worker.kubernetes is None:
        return None
    env = remote_environment(environ, settings, ())
    found = routes(env)
    if not found:
        return None
    keys = ", ".join(next(n for n in r.provider.key_names if env.get(n)) for r in found)
    return (
        f"worker.kubernetes: the agents would be sent {keys} (agent.env or worker.ssh.pass_env), "
        "so they would call their model through the daemon's model gateway on its loopback, "
        "which no pod reaches; give the image's agent a login of its own instead of an API key"
    )


async def delete_orphan_pods(pods: Pods | None, previous: Sequence[str]) -> int:
    """Delete what earlier daemons of this workflow left running in the cluster; a cluster
    that cannot be reached is reported and skipped."""
    if pods is None or not previous:
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


def describe_pods(
    listed: Sequence[ListedPod], instances: Sequence[str], live: str | None
) -> list[str]:
    """One line per pod of this workflow (by the instances its store knows): what a start-up
    would do with it. `live`: the instance of the daemon running now, whose pods are its own."""
    ours = {label_value(i): i for i in instances}
    lines = []
    for pod in listed:
        if pod.instance not in ours:
            continue
        if live is not None and pod.instance == label_value(live):
            fate = "kept: the running daemon's"
        else:
            fate = "deleted at the next start: an earlier daemon's"
        lines.append(f"{pod.name} (ticket {pod.ticket}, {pod.phase}): {fate}")
    return lines

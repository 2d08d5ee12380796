"""This workflow's pods in its namespace: one made per run and deleted when the run ends, and
those an earlier daemon left behind, found by their instance label and deleted at start-up.

A run's pod and its NetworkPolicy are applied together (`kubectl apply -f -`, one List as
JSON on stdin; first in it the ticket's claim when the daemon is to make it, `claims`), then
the pod is watched (`kubectl get pod <name> -o json`) until it is Ready.
While the scheduler has no room for it the run waits, saying so (`Pending: Insufficient cpu`)
every `STATUS_EVERY_S` so a long wait is never taken for a stalled agent; anything else that
keeps it from running (an image that cannot be pulled, a container that ended, no Ready within
`START_TIMEOUT_S`) fails the run, and the pod is deleted at once. Deleting (`kubectl delete
pod/<name> networkpolicy/<name>`) does not wait for the pod to be gone: it is ended by the
cluster, its slot is free.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from symphony.config.sandbox import HostPattern, Network
from symphony.hosts.kubernetes.claims import Claims, ClaimsFailed
from symphony.hosts.kubernetes.egress import EgressUnresolved, allowed_addresses, daemon_addresses
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.kubectl import ClusterFailed, Kubectl, KubectlResult
from symphony.hosts.kubernetes.manifests import (
    INSTANCE_LABEL,
    MANAGED_BY,
    RUN_LABEL,
    TICKET_LABEL,
    daemon_rule,
    label_value,
    network_policy,
    pod_manifest,
)
from symphony.hosts.kubernetes.status import pod_state

log = structlog.get_logger("symphony.hosts")

POLL_S = 1.0
STATUS_EVERY_S = 15.0
START_TIMEOUT_S = 600.0
"""How long a pod the cluster has placed may take to be Ready (an image pull included)."""


class PodFailed(ClusterFailed):
    """The run's pod could not be made or never ran; `unreachable`: kubectl could not reach
    the cluster at all."""


@dataclass(frozen=True, slots=True)
class ListedPod:
    """A pod of symphony's in the namespace, as `kubectl get` lists it."""

    name: str
    instance: str
    ticket: str
    run: str
    phase: str


def _unreachable(result: KubectlResult) -> bool:
    return result.unreachable


class Pods:
    def __init__(
        self, kubectl: Kubectl, instance: str, *, poll_s: float = POLL_S, workflow: str = ""
    ) -> None:
        self.kubectl = kubectl
        self.instance = instance
        self._poll_s = poll_s
        self.claims = Claims(kubectl, workflow or instance)
        """The tickets' workspace claims this workflow makes (`workflow`: its store's id,
        the same across restarts; without one, this daemon's instance)."""

    @property
    def selector(self) -> str:
        return f"{MANAGED_BY}=symphony"

    async def start(
        self,
        ticket: str,
        run: str,
        network: Network,
        on_status: Callable[[str], None] = lambda _: None,
        model_hosts: Sequence[HostPattern] = (),
        issue_id: str = "",
    ) -> KubectlHost:
        """Make the run's pod and policy (and the ticket's claim, with `workspace: pvc:` when
        it is not there yet) and wait until the pod is Ready; its host. With
        `network: model` the policy lets out the addresses `model_hosts` resolve to now; with
        `daemon_address`, the daemon's ports at the addresses it resolves to now (which the
        pod knows its name by) or on the daemon's pods."""
        settings = self.kubectl.settings
        daemon, reached = settings.daemon, tuple[str, ...]()
        allow: tuple[tuple[str, int], ...] = ()
        try:
            if network is Network.MODEL:
                allow = await allowed_addresses(model_hosts)
            if daemon is not None:
                reached = await self._daemon_addresses(network)
            claim = await self.claims.to_make(ticket, issue_id)
        except EgressUnresolved as exc:
            raise PodFailed(exc.message) from None
        except ClaimsFailed as exc:
            raise PodFailed(exc.message, unreachable=exc.unreachable) from None
        pod = pod_manifest(settings, self.instance, ticket, run, reached)
        rule = daemon_rule(daemon, settings.namespace, reached) if daemon is not None else None
        policy = network_policy(pod, network, allow, rule)
        name = pod["metadata"]["name"]
        items = [claim, pod, policy] if claim is not None else [pod, policy]
        listed = {"apiVersion": "v1", "kind": "List", "items": items}
        applied = await self.kubectl("apply", "-f", "-", stdin=json.dumps(listed).encode())
        if not applied.ok:
            await self.delete(name)
            raise PodFailed(
                f"kubectl apply of pod {name} failed: {applied.reason()}",
                unreachable=_unreachable(applied),
            )
        if claim is not None:
            log.info("claim created", claim=claim["metadata"]["name"], ticket=ticket)
        log.info("pod created", pod=name, ticket=ticket, namespace=self.kubectl.namespace)
        try:
            await self._until_ready(name, on_status)
        except BaseException:
            await asyncio.shield(self.delete(name))
            raise
        return KubectlHost(self.kubectl, name)

    async def _daemon_addresses(self, network: Network) -> tuple[str, ...]:
        """Where `daemon_address` is now; with `network: full` a name that does not resolve
        here is left to the pod's own DNS (its policy lets everything out)."""
        daemon = self.kubectl.settings.daemon
        assert daemon is not None
        try:
            return await daemon_addresses(daemon.address)
        except EgressUnresolved:
            if network is Network.FULL:
                return ()
            raise

    async def _until_ready(self, name: str, on_status: Callable[[str], None]) -> None:
        placed_at: float | None = None
        said, said_at = "", 0.0
        while True:
            got = await self.kubectl("get", "pod", name, "-o", "json")
            if not got.ok:
                raise PodFailed(
                    f"cannot read pod {name}: {got.reason()}", unreachable=_unreachable(got)
                )
            try:
                state = pod_state(json.loads(got.out))
            except ValueError:
                raise PodFailed(f"kubectl said something other than JSON of pod {name}") from None
            now = time.monotonic()
            seen = self.kubectl.status
            if state.kind == "waiting":
                seen.pending[name] = state.message.removeprefix("Pending: ")
            else:
                seen.pending.pop(name, None)
            if state.kind == "ready":
                seen.running.add(name)
                return
            if state.kind == "failed":
                raise PodFailed(f"pod {name}: {state.message}")
            if state.kind == "waiting":
                placed_at = None  # waiting for room is not starting: no timeout
                if state.message != said or now - said_at >= STATUS_EVERY_S:
                    if state.message != said:
                        log.info("pod waits for room", pod=name, reason=state.message)
                    on_status(state.message)
                    said, said_at = state.message, now
            else:
                placed_at = placed_at if placed_at is not None else now
                if now - placed_at > START_TIMEOUT_S:
                    raise PodFailed(
                        f"pod {name} was not ready after {START_TIMEOUT_S:.0f} s ({state.message})"
                    )
            await asyncio.sleep(self._poll_s)

    async def delete(self, *names: str) -> bool:
        """Delete the pods `names` and their policies, without waiting for them to end."""
        if not names:
            return True
        for name in names:
            self.kubectl.status.running.discard(name)
            self.kubectl.status.pending.pop(name, None)
        objects = [f"{kind}/{name}" for name in names for kind in ("pod", "networkpolicy")]
        return await self.kubectl.delete("pods", names, objects)

    async def listed(self) -> list[ListedPod]:
        """Every pod of symphony's in the namespace (any workflow's, any daemon's)."""
        got = await self.kubectl("get", "pods", "-l", self.selector, "-o", "json")
        if not got.ok:
            raise PodFailed(f"cannot list pods: {got.reason()}", unreachable=_unreachable(got))
        try:
            items = json.loads(got.out).get("items") or []
        except (ValueError, AttributeError):
            raise PodFailed("kubectl listed pods as something other than JSON") from None
        return [_listed(item) for item in items if isinstance(item, dict)]

    async def delete_orphans(self, previous: Iterable[str]) -> list[ListedPod]:
        """Delete the pods earlier daemons of this workflow left (found by their instance
        label); what was deleted. Never a pod of this daemon or of another workflow's."""
        earlier = {label_value(p) for p in previous} - {label_value(self.instance)}
        if not earlier:
            return []
        orphans = [p for p in await self.listed() if p.instance in earlier]
        if orphans:
            await self.delete(*(p.name for p in orphans))
        return orphans


def _listed(item: dict[str, Any]) -> ListedPod:
    metadata = item.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = item.get("status") or {}
    return ListedPod(
        name=str(metadata.get("name", "")),
        instance=str(labels.get(INSTANCE_LABEL, "")),
        ticket=str(labels.get(TICKET_LABEL, "")),
        run=str(labels.get(RUN_LABEL, "")),
        phase=str(status.get("phase", "Unknown")),
    )


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

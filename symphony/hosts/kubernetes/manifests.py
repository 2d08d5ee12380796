"""The pod a run lives in and the NetworkPolicy that fences it, as plain manifests (pure
functions of the settings; `kubectl apply -f -` takes them as JSON).

The pod holds a process that only waits; the agent and every command of the run are started
in it with `kubectl exec`. Its root filesystem is read-only and only the workspace, the home
and /tmp are writable; it runs as a non-root user with every capability dropped, no privilege
escalation and the runtime's default seccomp profile, and it gets no service-account token
unless `service_account` names one.

With `daemon_address` the pod knows the daemon's name by the addresses the daemon resolved it
to (`hostAliases`), and its policy lets out to the daemon's two ports under every network:
to the daemon's pods by selector when `daemon_pod_labels` names them (a Service's address is
translated to a pod's before a policy applies, so an `ipBlock` of it would match nothing),
else to those addresses."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from symphony.base.hosts import is_ip_address
from symphony.config.kubernetes import DaemonAddress, KubernetesSettings, Toleration
from symphony.config.sandbox import Network

MANAGED_BY = "app.kubernetes.io/managed-by"
INSTANCE_LABEL = "symphony.dev/instance"
TICKET_LABEL = "symphony.dev/ticket"
RUN_LABEL = "symphony.dev/run"
WORKFLOW_LABEL = "symphony.dev/workflow"
"""On what outlives one daemon (a ticket's claim): the workflow's store, across restarts."""
ISSUE_ANNOTATION = "symphony.dev/issue-id"
TICKET_ANNOTATION = "symphony.dev/ticket"
WORKSPACE = "/workspace"
HOME = "/home/agent"
USER_ID = 10001
# Waits for the agent's commands and ends at once when the pod is deleted.
HOLD = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
DNS_PORT = 53
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def label_value(text: str) -> str:
    """`text` as a label value (63 characters of [A-Za-z0-9-_.], alphanumeric at both ends);
    a shortened one carries a hash of the whole so two long names stay apart."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    if len(cleaned) > 63:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        cleaned = cleaned[:54].rstrip("-_.") + "-" + digest
    return cleaned or "x"


def pod_name(instance: str, ticket: str, run: str) -> str:
    """A DNS label unique to the run: `symphony-<ticket>-<hash of instance, ticket, run>`."""
    digest = hashlib.sha256(f"{instance}\0{ticket}\0{run}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9-]+", "-", ticket.lower()).strip("-")[:40].strip("-")
    return f"symphony-{slug}-{digest}" if slug else f"symphony-{digest}"


def labels(instance: str, ticket: str, run: str) -> dict[str, str]:
    return {
        MANAGED_BY: "symphony",
        INSTANCE_LABEL: label_value(instance),
        TICKET_LABEL: label_value(ticket),
        RUN_LABEL: label_value(run),
    }


def instance_selector(instance: str) -> str:
    """The `-l` selector of every pod of this instance."""
    return f"{MANAGED_BY}=symphony,{INSTANCE_LABEL}={label_value(instance)}"


def claim_name(settings: KubernetesSettings, ticket: str) -> str | None:
    """The ticket's PersistentVolumeClaim (`<claim>-<ticket>`), kept between its runs."""
    if settings.workspace_claim is None:
        return None
    slug = re.sub(r"[^a-z0-9-]+", "-", ticket.lower()).strip("-")
    return f"{settings.workspace_claim}-{slug}"[:253].rstrip("-")


def claim_selector(workflow: str) -> str:
    """The `-l` selector of every claim this workflow made."""
    return f"{MANAGED_BY}=symphony,{WORKFLOW_LABEL}={label_value(workflow)}"


def claim_manifest(
    settings: KubernetesSettings, workflow: str, ticket: str, issue_id: str
) -> dict[str, Any] | None:
    """The ticket's PersistentVolumeClaim as the daemon makes it (None with `empty_dir`):
    ReadWriteOnce, `workspace_size`, the storage class named or the cluster's default, and
    labelled as this workflow's; the ticket's id and identifier in annotations (no label's
    limits), for deciding at start-up whether its ticket has ended."""
    name = claim_name(settings, ticket)
    if name is None:
        return None
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.workspace_size}},
    }
    if settings.workspace_storage_class is not None:
        spec["storageClassName"] = settings.workspace_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {
                MANAGED_BY: "symphony",
                WORKFLOW_LABEL: label_value(workflow),
                TICKET_LABEL: label_value(ticket),
            },
            "annotations": {ISSUE_ANNOTATION: issue_id, TICKET_ANNOTATION: ticket},
        },
        "spec": spec,
    }


def pod_manifest(
    settings: KubernetesSettings,
    instance: str,
    ticket: str,
    run: str,
    daemon_addresses: Sequence[str] = (),
) -> dict[str, Any]:
    """The run's pod; `daemon_addresses`: what `daemon_address` resolved to, for its name."""
    name = pod_name(instance, ticket, run)
    resources = dict(settings.resources)
    claim = claim_name(settings, ticket)
    workspace: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": claim}}
        if claim
        else {"emptyDir": {"sizeLimit": resources.get("ephemeral-storage", "10Gi")}}
    )
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": settings.service_account is not None,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": USER_ID,
            "runAsGroup": USER_ID,
            "fsGroup": USER_ID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(settings, resources)],
        "volumes": [
            {"name": "workspace", **workspace},
            {"name": "home", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if settings.service_account is not None:
        spec["serviceAccountName"] = settings.service_account
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [_toleration(t) for t in settings.tolerations]
    daemon = settings.daemon
    if daemon is not None and daemon_addresses and not is_ip_address(daemon.address):
        spec["hostAliases"] = [
            {"ip": address.split("%", 1)[0], "hostnames": [daemon.address]}
            for address in daemon_addresses
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels(instance, ticket, run),
        },
        "spec": spec,
    }


def _container(settings: KubernetesSettings, resources: dict[str, str]) -> dict[str, Any]:
    return {
        "name": "agent",
        "image": settings.image,
        "imagePullPolicy": "Always",
        "command": ["/bin/sh", "-c", HOLD],
        "workingDir": WORKSPACE,
        "env": [{"name": "HOME", "value": HOME}, {"name": "TMPDIR", "value": "/tmp"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": USER_ID,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "workspace", "mountPath": WORKSPACE},
            {"name": "home", "mountPath": HOME},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def _toleration(t: Toleration) -> dict[str, Any]:
    found: dict[str, Any] = {"operator": t.operator}
    for key, value in (("key", t.key), ("value", t.value), ("effect", t.effect),
                       ("tolerationSeconds", t.toleration_seconds)):  # fmt: skip
        if value is not None:
            found[key] = value
    return found


def daemon_rule(daemon: DaemonAddress, namespace: str, addresses: Sequence[str]) -> dict[str, Any]:
    """The egress rule to the daemon's tool server and model gateway: its pods by their
    labels (in `daemon_namespace`, else the pods' `namespace`), or else each of `addresses`
    alone."""
    peers: list[dict[str, Any]]
    if daemon.pod_labels:
        peers = [{
            "podSelector": {"matchLabels": dict(daemon.pod_labels)},
            "namespaceSelector": {
                "matchLabels": {NAMESPACE_NAME_LABEL: daemon.namespace or namespace}
            },
        }]  # fmt: skip
    else:
        peers = [{"ipBlock": {"cidr": _cidr(a)}} for a in dict.fromkeys(addresses)]
    return {"to": peers, "ports": [{"protocol": "TCP", "port": p} for p in daemon.ports]}


def _cidr(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return f"{ip}/{ip.max_prefixlen}"


def network_policy(
    pod: dict[str, Any],
    network: Network,
    allow: tuple[tuple[str, int], ...] = (),
    daemon: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod's NetworkPolicy: nothing comes in; `none` lets nothing out, `model` only DNS
    and the `(cidr, port)` pairs in `allow` (the model hosts' addresses), `full` everything
    out; and under each, `daemon` (`daemon_rule`) when the pods reach the daemon."""
    egress: list[dict[str, Any]]
    if network is Network.FULL:
        egress = [{}]
    elif network is Network.MODEL:
        dns = [{"protocol": p, "port": DNS_PORT} for p in ("UDP", "TCP")]
        egress = [{"ports": dns}] + [
            {"to": [{"ipBlock": {"cidr": cidr}}], "ports": [{"protocol": "TCP", "port": port}]}
            for cidr, port in allow
        ]
    else:
        egress = []
    if daemon is not None and network is not Network.FULL:
        egress.append(daemon)
    metadata = pod["metadata"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "labels": dict(metadata["labels"]),
        },
        "spec": {
            "podSelector": {"matchLabels": {RUN_LABEL: metadata["labels"][RUN_LABEL],
                                            INSTANCE_LABEL: metadata["labels"][INSTANCE_LABEL]}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }  # fmt: skip

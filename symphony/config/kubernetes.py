"""`worker.kubernetes:`: agent runs as pods in a cluster, reached through `kubectl` with the
user's kubeconfig (spec Appendix B). Every value here ends up in a pod manifest, so each is
checked against what the Kubernetes API accepts before a run is tried."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from symphony.base.hosts import is_ip_address
from symphony.config.fields import INVALID_CONFIG, ConfigError, integer

KUBERNETES_KEYS = frozenset(
    ("context", "namespace", "image", "service_account", "resources", "max_pods",
     "node_selector", "tolerations", "workspace", "request_timeout_ms", "daemon_address",
     "daemon_listen", "daemon_tool_port", "daemon_gateway_port", "daemon_pod_labels",
     "daemon_namespace", "workspace_size", "workspace_storage_class")
)  # fmt: skip
DAEMON_KEYS = ("daemon_listen", "daemon_tool_port", "daemon_gateway_port", "daemon_pod_labels",
               "daemon_namespace")  # fmt: skip
DEFAULT_TOOL_PORT = 8701
DEFAULT_GATEWAY_PORT = 8702
ALL_INTERFACES = "0.0.0.0"
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
DEFAULT_RESOURCES = (("cpu", "2"), ("memory", "4Gi"), ("ephemeral-storage", "10Gi"))
_QUANTITY = re.compile(r"(\d+(\.\d+)?|\.\d+)([EPTGMK]i|[numkMGTPE]|[eE][+-]?\d+)?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?" + _LABEL_NAME)
_LABEL_VALUE = re.compile(f"({_LABEL_NAME})?")
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_WORKSPACE_SIZE = "10Gi"
_TOLERATION_KEYS = frozenset(("key", "operator", "value", "effect", "toleration_seconds"))
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Toleration:
    """One of `worker.kubernetes.tolerations`: a node taint the run pods tolerate, as a pod's spec
    takes it."""

    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """Where and how a run's pod is made. `context` None: kubectl's current context (or the
    in-cluster configuration when the daemon runs in a pod). `workspace_claim` None: an
    emptyDir, gone with the pod; else the name of a PersistentVolumeClaim per ticket prefix,
    kept between runs."""

    image: str
    context: str | None = None
    namespace: str = "default"
    service_account: str | None = None
    resources: tuple[tuple[str, str], ...] = DEFAULT_RESOURCES
    max_pods: int | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = field(default_factory=tuple)
    workspace_claim: str | None = None
    workspace_size: str = DEFAULT_WORKSPACE_SIZE
    """The storage a ticket's claim asks for when the daemon makes it."""
    workspace_storage_class: str | None = None
    """The claims' storage class; None: the cluster's default class."""
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    """How long one request of kubectl's to the cluster may take (its `--request-timeout`);
    a kubectl that says nothing for longer is killed and the cluster taken as unreachable."""
    daemon: DaemonAddress | None = None
    """Where the pods reach this daemon's tool server and model gateway; None: they cannot."""

    @property
    def workspace(self) -> str:
        return f"pvc:{self.workspace_claim}" if self.workspace_claim else "empty_dir"


@dataclass(frozen=True, slots=True)
class DaemonAddress:
    """How the pods reach this daemon: `address` is what they dial (a Service in front of the
    daemon's pod, or any name or address of this machine they reach); the tool server and the
    model gateway listen on `listen` at their fixed ports, the ports a Service would forward.
    `pod_labels` (in `namespace`) select the daemon's own pods when it runs in the cluster:
    the run's NetworkPolicy lets out to them by selector, since a Service's address is
    translated to a pod's before a policy is applied; without them it lets out to the
    addresses `address` resolves to."""

    address: str
    listen: str = ALL_INTERFACES
    tool_port: int = DEFAULT_TOOL_PORT
    gateway_port: int = DEFAULT_GATEWAY_PORT
    pod_labels: tuple[tuple[str, str], ...] = ()
    namespace: str | None = None

    @property
    def ports(self) -> tuple[int, int]:
        return self.tool_port, self.gateway_port

    def url_host(self) -> str:
        """`address` as the host of a URL (an IPv6 literal in brackets)."""
        return f"[{self.address}]" if ":" in self.address else self.address


def _bad(message: str) -> ConfigError:
    return ConfigError(INVALID_CONFIG, f"worker.kubernetes.{message}")


def _name(raw: Mapping[str, Any], key: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _bad(f"{key} must be {what}, got {value!r}")
    return value


def parse_kubernetes(raw: Mapping[str, Any]) -> KubernetesSettings:
    """The `worker.kubernetes:` map; an unknown key or a value the API would refuse is an
    error naming the setting."""
    if not isinstance(raw, Mapping):
        raise ConfigError(INVALID_CONFIG, "worker.kubernetes must be a map")
    unknown = sorted(set(raw) - KUBERNETES_KEYS)
    if unknown:
        raise ConfigError(
            INVALID_CONFIG, f"worker.kubernetes has unknown key(s) {', '.join(unknown)}"
        )
    image = raw.get("image")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise _bad("image must name the image agents run in (git, the agent, a shell)")
    context = raw.get("context")
    if context is not None and (not isinstance(context, str) or not context.strip()):
        raise _bad("context must be a kubeconfig context name")
    claim = _workspace(raw.get("workspace", "empty_dir"))
    if claim is None:
        stray = [k for k in ("workspace_size", "workspace_storage_class") if raw.get(k) is not None]
        if stray:
            raise _bad(f"{stray[0]} applies only with worker.kubernetes.workspace: pvc:<claim>")
    max_pods = None
    if raw.get("max_pods") is not None:
        max_pods = integer(raw, "worker.kubernetes.max_pods", 1, 1)
    return KubernetesSettings(
        image=image,
        context=context,
        namespace=_name(raw, "namespace", _DNS_LABEL, "a namespace name") or "default",
        service_account=_name(raw, "service_account", _DNS_SUBDOMAIN, "a service account name"),
        resources=_resources(raw.get("resources")),
        max_pods=max_pods,
        node_selector=_node_selector(raw.get("node_selector")),
        tolerations=_tolerations(raw.get("tolerations")),
        workspace_claim=claim,
        workspace_size=_quantity(raw, "workspace_size", DEFAULT_WORKSPACE_SIZE),
        workspace_storage_class=_name(
            raw, "workspace_storage_class", _DNS_SUBDOMAIN, "a storage class name"
        ),
        request_timeout_ms=integer(
            raw, "worker.kubernetes.request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS, 100
        ),
        daemon=_daemon(raw),
    )


def _resources(raw: Any) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, Mapping):
        raise _bad("resources must be a map of cpu, memory, ephemeral-storage")
    merged = dict(DEFAULT_RESOURCES)
    for name, value in raw.items():
        if name not in RESOURCE_NAMES:
            raise _bad(f"resources has unknown resource {name!r} (cpu, memory, ephemeral-storage)")
        merged[name] = _positive_quantity(value, f"resources.{name}", "2, 500m or 4Gi")
    return tuple((name, merged[name]) for name in RESOURCE_NAMES)


def _quantity(raw: Mapping[str, Any], key: str, default: str) -> str:
    value = raw.get(key)
    return default if value is None else _positive_quantity(value, key, "10Gi or 500Mi")


def _positive_quantity(value: Any, key: str, examples: str) -> str:
    text = value if isinstance(value, str) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = str(value)
    quantity = _QUANTITY.fullmatch(text) if text is not None else None
    if quantity is None or float(quantity.group(1)) <= 0:
        raise _bad(f"{key} must be a positive quantity such as {examples}, got {value!r}")
    return quantity.group(0)


def _node_selector(raw: Any) -> tuple[tuple[str, str], ...]:
    return () if raw is None else _labels(raw, "node_selector")


def _labels(raw: Any, key: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, Mapping):
        raise _bad(f"{key} must be a map of label to value")
    pairs = []
    for name, value in raw.items():
        if not isinstance(name, str) or not _LABEL_KEY.fullmatch(name):
            raise _bad(f"{key} has a key that is not a label name: {name!r}")
        if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
            raise _bad(f"{key}.{name} must be a label value, got {value!r}")
        pairs.append((name, value))
    return tuple(pairs)


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _bad("tolerations must be a list")
    return tuple(_toleration(item, f"tolerations[{i}]") for i, item in enumerate(raw))


def _toleration(item: Any, where: str) -> Toleration:
    if not isinstance(item, Mapping):
        raise _bad(f"{where} must be a map with key, operator, value, effect")
    unknown = sorted(set(item) - _TOLERATION_KEYS)
    if unknown:
        raise _bad(f"{where} has unknown key(s) {', '.join(unknown)}")
    key, value, effect = item.get("key"), item.get("value"), item.get("effect")
    operator = item.get("operator", "Equal")
    if key is not None and (not isinstance(key, str) or not _LABEL_KEY.fullmatch(key)):
        raise _bad(f"{where}.key must be a taint key, got {key!r}")
    if operator not in ("Equal", "Exists"):
        raise _bad(f"{where}.operator must be Equal or Exists")
    if operator == "Exists" and value is not None:
        raise _bad(f"{where}.value must be empty with operator Exists")
    if operator == "Equal" and key is None:
        raise _bad(f"{where}.key is needed with operator Equal")
    if value is not None and (not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value)):
        raise _bad(f"{where}.value must be a label value, got {value!r}")
    if effect is not None and effect not in _EFFECTS:
        raise _bad(f"{where}.effect must be one of {', '.join(_EFFECTS)}")
    seconds = item.get("toleration_seconds")
    if seconds is not None:
        if effect != "NoExecute":
            raise _bad(f"{where}.toleration_seconds applies only to effect NoExecute")
        seconds = integer(item, f"worker.kubernetes.{where}.toleration_seconds", 0, 0)
    return Toleration(key, str(operator), value, effect, seconds)


def _workspace(raw: Any) -> str | None:
    if raw == "empty_dir":
        return None
    if isinstance(raw, str) and raw.startswith("pvc:"):
        claim = raw.removeprefix("pvc:")
        if _DNS_SUBDOMAIN.fullmatch(claim):
            return claim
    raise _bad(f"workspace must be empty_dir or pvc:<claim name>, got {raw!r}")


def _daemon(raw: Mapping[str, Any]) -> DaemonAddress | None:
    address = raw.get("daemon_address")
    if address is None:
        stray = [key for key in DAEMON_KEYS if raw.get(key) is not None]
        if stray:
            raise _bad(f"{stray[0]} applies only with worker.kubernetes.daemon_address")
        return None
    if not isinstance(address, str) or not _is_host(address):
        raise _bad(
            "daemon_address must be the host name or IP address pods reach this daemon at "
            f"(no scheme, no port), got {address!r}"
        )
    listen = raw.get("daemon_listen", ALL_INTERFACES)
    if not isinstance(listen, str) or not is_ip_address(listen):
        raise _bad(f"daemon_listen must be an IP address to listen on, got {listen!r}")
    tool_port = integer(raw, "worker.kubernetes.daemon_tool_port", DEFAULT_TOOL_PORT, 1)
    gateway_port = integer(raw, "worker.kubernetes.daemon_gateway_port", DEFAULT_GATEWAY_PORT, 1)
    for key, port in (("daemon_tool_port", tool_port), ("daemon_gateway_port", gateway_port)):
        if port > 65535:
            raise _bad(f"{key} must be a port from 1 to 65535, got {port}")
    if tool_port == gateway_port:
        raise _bad("daemon_tool_port and daemon_gateway_port must differ")
    labels = raw.get("daemon_pod_labels")
    pod_labels = _labels(labels, "daemon_pod_labels") if labels is not None else ()
    if labels is not None and not pod_labels:
        raise _bad("daemon_pod_labels must name at least one label of the daemon's pods")
    namespace = _name(raw, "daemon_namespace", _DNS_LABEL, "a namespace name")
    if namespace is not None and not pod_labels:
        raise _bad("daemon_namespace applies only with worker.kubernetes.daemon_pod_labels")
    return DaemonAddress(address.lower(), listen, tool_port, gateway_port, pod_labels, namespace)


def _is_host(text: str) -> bool:
    return is_ip_address(text) or (
        len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text.lower()) is not None
    )

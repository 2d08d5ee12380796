"""`sandbox:`: the boundary the daemon builds around everything it starts for a ticket.

The top-level block applies to every run; a stage's `sandbox:` block changes it key by key
(`stages.plan.sandbox: {network: none, workspace: read-only}`). The model and its parser are
here; `symphony.hosts.sandbox` builds the boundary from them.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from symphony.base.hosts import is_ip_address
from symphony.config.fields import INVALID_CONFIG, ConfigError, env_reference, integer, resolve_path

E = TypeVar("E", bound=enum.StrEnum)

SANDBOX_KEYS = (
    "kind",
    "network",
    "allow_hosts",
    "read_only",
    "writable",
    "memory_mb",
    "pids",
    "image",
    "workspace",
)


class SandboxKind(enum.StrEnum):
    NONE = "none"
    BWRAP = "bwrap"
    PODMAN = "podman"


class Network(enum.StrEnum):
    NONE = "none"
    """Loopback only (and the daemon's own tool server, bridged in)."""
    MODEL = "model"
    """Only `allow_hosts`: through the daemon's proxy on this machine; in a pod, as the
    addresses its NetworkPolicy lets out."""
    FULL = "full"


class WorkspaceAccess(enum.StrEnum):
    WRITABLE = "writable"
    READ_ONLY = "read-only"


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One `allow_hosts` entry: a host name, `*.suffix` or an IP literal, with an optional
    port (None: any port)."""

    host: str
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        wanted, asked = self.host, _normal_host(host)
        if wanted.startswith("*."):
            return asked.endswith(wanted[1:]) and asked != wanted[2:]
        return asked == wanted

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


DEFAULT_MEMORY_MB = 4096
DEFAULT_PIDS = 512


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    """The boundary around a run's agent, gates and hooks (`sandbox:`, a stage's block over it): the
    kind of sandbox, what it reaches on the network, what it may read and write, its limits."""

    kind: SandboxKind = SandboxKind.NONE
    network: Network = Network.FULL
    allow_hosts: tuple[HostPattern, ...] | None = None
    """What `network: model` reaches; None: the agent kind's own API hosts."""
    read_only: tuple[Path, ...] = ()
    """Besides the defaults (the system folders and the agent program's installation)."""
    writable: tuple[Path, ...] = ()
    """Besides the workspace and a private /tmp."""
    memory_mb: int = DEFAULT_MEMORY_MB
    pids: int = DEFAULT_PIDS
    image: str | None = None
    """podman: the image the container runs, whose own system folders are its toolchain;
    None: an empty root with this machine's system folders mounted read-only (as bwrap)."""
    workspace: WorkspaceAccess = WorkspaceAccess.WRITABLE

    @property
    def enabled(self) -> bool:
        return self.kind is not SandboxKind.NONE

    def for_hooks(self) -> SandboxSettings:
        """What hooks run under: this boundary with the workspace writable (a hook prepares
        the workspace)."""
        if self.workspace is WorkspaceAccess.WRITABLE:
            return self
        return replace(self, workspace=WorkspaceAccess.WRITABLE)

    def describe(self) -> str:
        """One line for `check`, the API and the evidence comment."""
        if not self.enabled:
            return "none"
        parts = [self.kind.value, f"network {self.network.value}"]
        if self.image is not None:
            parts.insert(1, f"image {self.image}")
        if self.network is Network.MODEL and self.allow_hosts is not None:
            parts.append("allows " + ", ".join(str(h) for h in self.allow_hosts))
        parts.append(f"workspace {self.workspace.value}")
        if self.writable:
            parts.append("also writable " + ", ".join(str(p) for p in self.writable))
        return ", ".join(parts)


def parse_sandbox(
    top: object,
    stage: object,
    *,
    where: str,
    base_dir: Path,
    environ: Mapping[str, str],
) -> SandboxSettings:
    """The sandbox of the top-level block `top` with a stage's block `stage` over it, key by
    key (`where` names the stage's block in errors, or `sandbox`); raises ConfigError."""
    merged: dict[str, tuple[str, Any]] = {}
    for name, block in (("sandbox", top), (where, stage)):
        if block is None:
            continue
        if not isinstance(block, Mapping):
            raise ConfigError(INVALID_CONFIG, f"{name} must be a map of settings")
        for key, value in block.items():
            merged[str(key)] = (f"{name}.{key}", value)
    kind = _enum(merged, "kind", SandboxKind, SandboxKind.NONE, environ)
    network_default = Network.FULL if kind is SandboxKind.NONE else Network.MODEL
    image = None
    if "image" in merged:
        dotted, value = merged["image"]
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(INVALID_CONFIG, f"{dotted} must name an image")
        image = value.strip()
        if kind is not SandboxKind.PODMAN:
            raise ConfigError(INVALID_CONFIG, f"{dotted} is used only with kind: podman")
    return SandboxSettings(
        kind=kind,
        network=_enum(merged, "network", Network, network_default, environ),
        allow_hosts=_hosts(merged["allow_hosts"]) if "allow_hosts" in merged else None,
        read_only=_paths(merged, "read_only", base_dir, environ),
        writable=_paths(merged, "writable", base_dir, environ),
        memory_mb=_count(merged, "memory_mb", DEFAULT_MEMORY_MB),
        pids=_count(merged, "pids", DEFAULT_PIDS),
        image=image,
        workspace=_enum(merged, "workspace", WorkspaceAccess, WorkspaceAccess.WRITABLE, environ),
    )


def _enum(
    merged: Mapping[str, tuple[str, Any]],
    key: str,
    kind: type[E],
    default: E,
    environ: Mapping[str, str],
) -> E:
    if key not in merged:
        return default
    dotted, value = merged[key]
    name = env_reference(value)
    if name is not None:
        value = environ.get(name, "").strip() or default.value  # unset: the default
    choices = [member.value for member in kind]
    if not isinstance(value, str) or value.strip() not in choices:
        raise ConfigError(
            INVALID_CONFIG, f"{dotted} must be one of {', '.join(choices)}, got {value!r}"
        )
    return kind(value.strip())


def _count(merged: Mapping[str, tuple[str, Any]], key: str, default: int) -> int:
    if key not in merged:
        return default
    dotted, value = merged[key]
    return integer({key: value}, dotted, default, 1)


def _paths(
    merged: Mapping[str, tuple[str, Any]], key: str, base_dir: Path, environ: Mapping[str, str]
) -> tuple[Path, ...]:
    if key not in merged:
        return ()
    dotted, value = merged[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be a list of paths")
    paths = tuple(resolve_path(v.strip(), base_dir, environ, dotted) for v in value)
    for path in paths:
        if path == Path("/"):
            raise ConfigError(INVALID_CONFIG, f"{dotted} cannot name / (the whole machine)")
    return paths


_HOST_NAME = re.compile(r"^(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_-]+)*$")


def _hosts(entry: tuple[str, Any]) -> tuple[HostPattern, ...]:
    dotted, value = entry
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be a list of hosts (host or host:port)")
    return tuple(parse_host_pattern(v.strip(), dotted) for v in value)


def parse_host_pattern(text: str, dotted: str) -> HostPattern:
    """`host`, `host:port`, `*.example.com`, an IP literal, `[v6]:port`; raises ConfigError."""
    host, port = text, None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ConfigError(INVALID_CONFIG, f"{dotted}: {text!r} has no closing ]")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(INVALID_CONFIG, f"{dotted}: {text!r} is not [address]:port")
            port = _port(rest[1:], text, dotted)
    elif text.count(":") == 1:
        host, raw_port = text.split(":")
        port = _port(raw_port, text, dotted)
    if is_ip_address(host):
        return HostPattern(str(ipaddress.ip_address(host)), port)
    if not _HOST_NAME.match(host):
        raise ConfigError(
            INVALID_CONFIG,
            f"{dotted}: {text!r} is not a host, host:port, *.domain or an IP address",
        )
    return HostPattern(host.lower(), port)


def _port(text: str, entry: str, dotted: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(INVALID_CONFIG, f"{dotted}: {entry!r} has no valid port")
    return int(text)


def _normal_host(host: str) -> str:
    host = host.strip().rstrip(".").lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return str(ipaddress.ip_address(host)) if is_ip_address(host) else host

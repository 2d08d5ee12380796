"""`worker:`: where agents run, on this machine or on SSH worker hosts (spec Appendix A).

Each host is a name ssh understands, with how many agents it takes and where its workspaces
are; `worker.ssh` says how the daemon connects (its config file, host keys, the variables that
cross, when a failing host is set aside). `symphony.hosts.ssh` connects by these.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from symphony.config.fields import (
    INVALID_CONFIG,
    ConfigError,
    env_patterns,
    integer,
    resolve_path,
    section,
)

if TYPE_CHECKING:
    from symphony.config.kubernetes import KubernetesSettings

WORKER_KEYS = (
    "ssh_hosts", "max_concurrent_agents_per_host", "ssh", "retry_on_same_host", "kubernetes"
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One SSH worker host (`worker.ssh_hosts`): a name ssh understands (an alias of the ssh
    config file, `user@host` or `host`), how many agents it takes, and where its workspaces
    are (None: `workspace.root`, the same path there)."""

    name: str
    max_agents: int | None = None
    workspace_root: str | None = None


@dataclass(frozen=True, slots=True)
class SshSettings:
    """`worker.ssh`: how the daemon connects to its SSH worker hosts, which of its variables cross,
    and when a failing host is set aside."""

    config_file: Path | None = None
    connect_timeout_s: int = 10
    strict_host_key_checking: str | None = None
    """`yes`, `accept-new` or `no`, passed to ssh as StrictHostKeyChecking; None: ssh's own
    configuration decides (the user's `~/.ssh/config` or `config_file`; under BatchMode an
    unknown host is refused)."""
    pass_env: tuple[str, ...] = ()
    """The daemon's variables (names, or prefixes ending in `*`) a remote agent gets; nothing
    else of the daemon's environment crosses."""
    max_failures: int = 3
    """Connection failures in a row after which a host is marked down."""
    cooloff_s: int = 60
    """How long a host marked down gets no new work before it is tried again."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Where agents run (spec Appendix A): locally when `hosts` is empty, else on SSH hosts."""

    hosts: tuple[HostSpec, ...] = ()
    max_concurrent_agents_per_host: int | None = None
    ssh: SshSettings = field(default_factory=SshSettings)
    retry_on_same_host: bool = True
    """A retry waits for the host that has the ticket's workspace, rather than starting anew
    on another."""
    kubernetes: KubernetesSettings | None = None
    """`worker.kubernetes`: each run in a pod of a cluster instead (None: not configured)."""

    def capacity(self, host: HostSpec) -> int | None:
        return host.max_agents or self.max_concurrent_agents_per_host


def parse_worker(
    raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]
) -> WorkerSettings:
    """The `worker:` section; `worker.ssh.config_file` is relative to `base_dir`."""
    hosts_raw = raw.get("ssh_hosts") or []
    if not isinstance(hosts_raw, list):
        raise ConfigError(INVALID_CONFIG, "worker.ssh_hosts must be a list of hosts")
    hosts: list[HostSpec] = []
    for index, item in enumerate(hosts_raw):
        where = f"worker.ssh_hosts[{index}]"
        if isinstance(item, str):
            item = {"host": item}
        if not isinstance(item, dict):
            raise ConfigError(INVALID_CONFIG, f"{where} must be a host name or a map with host")
        unknown = sorted(set(item) - {"host", "max_agents", "workspace_root"})
        if unknown:
            raise ConfigError(INVALID_CONFIG, f"{where} has unknown key(s) {', '.join(unknown)}")
        name = item.get("host")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.@:\[\]-]+", name.strip()):
            raise ConfigError(INVALID_CONFIG, f"{where}.host must be a host name, got {name!r}")
        name = name.strip()
        # `local` names this machine elsewhere; a leading dash would be read by ssh as an option.
        if name == "local" or name.startswith("-"):
            raise ConfigError(INVALID_CONFIG, f"{where}.host cannot be {name!r}")
        max_agents = (
            integer(item, f"{where}.max_agents", 1, 1)
            if item.get("max_agents") is not None
            else None
        )
        remote_root = item.get("workspace_root")
        if remote_root is not None:
            if not isinstance(remote_root, str) or not remote_root.startswith("/"):
                raise ConfigError(
                    INVALID_CONFIG, f"{where}.workspace_root must be an absolute path on the host"
                )
            remote_root = os.path.normpath(remote_root)
            if remote_root == "/":
                raise ConfigError(INVALID_CONFIG, f"{where}.workspace_root cannot be /")
        hosts.append(HostSpec(name, max_agents, remote_root))
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise ConfigError(INVALID_CONFIG, "worker.ssh_hosts names a host twice")
    per_host = (
        integer(raw, "worker.max_concurrent_agents_per_host", 1, 1)
        if raw.get("max_concurrent_agents_per_host") is not None
        else None
    )
    retry_on_same_host = raw.get("retry_on_same_host", True)
    if not isinstance(retry_on_same_host, bool):
        raise ConfigError(INVALID_CONFIG, "worker.retry_on_same_host must be true or false")
    kubernetes = None
    if raw.get("kubernetes") is not None:
        if hosts:
            raise ConfigError(
                INVALID_CONFIG, "worker.ssh_hosts and worker.kubernetes cannot both be set"
            )
        from symphony.config.kubernetes import parse_kubernetes  # only a cluster's workflow

        kubernetes = parse_kubernetes(raw["kubernetes"])
    return WorkerSettings(
        tuple(hosts),
        per_host,
        _ssh(section(raw, "ssh"), base_dir, environ),
        retry_on_same_host,
        kubernetes,
    )


_SSH_KEYS = frozenset(
    ("config_file", "connect_timeout_s", "strict_host_key_checking", "pass_env", "max_failures",
     "cooloff_s")
)  # fmt: skip


def _ssh(raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]) -> SshSettings:
    unknown = sorted(set(raw) - _SSH_KEYS)
    if unknown:
        raise ConfigError(INVALID_CONFIG, f"worker.ssh has unknown key(s) {', '.join(unknown)}")
    config_file = raw.get("config_file")
    if config_file is not None and (not isinstance(config_file, str) or not config_file.strip()):
        raise ConfigError(INVALID_CONFIG, "worker.ssh.config_file must be a path")
    checking = raw.get("strict_host_key_checking")
    if checking is True:
        checking = "yes"
    elif checking is False:
        checking = "no"
    if checking is not None and checking not in ("yes", "accept-new", "no"):
        raise ConfigError(
            INVALID_CONFIG, "worker.ssh.strict_host_key_checking must be yes, accept-new or no"
        )
    names = env_patterns(
        raw.get("pass_env"),
        "worker.ssh.pass_env must be a list of variable names or prefixes ending in *",
    )
    return SshSettings(
        config_file=(
            resolve_path(config_file, base_dir, environ, "worker.ssh.config_file")
            if isinstance(config_file, str)
            else None
        ),
        connect_timeout_s=integer(raw, "worker.ssh.connect_timeout_s", 10, 1),
        strict_host_key_checking=str(checking) if checking is not None else None,
        pass_env=names,
        max_failures=integer(raw, "worker.ssh.max_failures", 3, 1),
        cooloff_s=integer(raw, "worker.ssh.cooloff_s", 60, 1),
    )

"""Names every layer uses for where work runs, so none has to import the host layer for them."""

from __future__ import annotations

import ipaddress

from symphony.base.errors import ErrorCategory

LOCAL = "local"
"""The name of the daemon's own machine wherever a host is named (API, store, logs)."""

CLUSTER = "kubernetes"
"""The name of the cluster a run's pod is made in (`worker.kubernetes`): one host, whatever
the pod's name."""

HOST_UNREACHABLE = ErrorCategory.HOST_UNREACHABLE
"""The error category of a run or a command that could not reach its SSH host."""


def is_ip_address(text: str) -> bool:
    """Whether `text` is an IPv4 or IPv6 address (not a name)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (`localhost` or a loopback address)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

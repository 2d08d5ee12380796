"""What a pod with `network: model` may reach, as the `(cidr, port)` pairs of its NetworkPolicy.

A NetworkPolicy knows addresses, not names, so the daemon resolves each model host (the agent
kind's own, or `allow_hosts`) when the run's pod is made: every IPv4 address as a /32, every
IPv6 one as a /128, on the host's port (443 unless `allow_hosts` names one). An IP literal is
taken as it is. A name that does not resolve, or resolves to no address, fails that run's start
naming it: a policy without it would cut the agent off from its model, and quietly so.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

from symphony.config.sandbox import HostPattern

DEFAULT_PORT = 443


class EgressUnresolved(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def cidr(address: str) -> str:
    """`address` alone as a CIDR: /32 for IPv4, /128 for IPv6 (a zone id dropped)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return f"{ip}/{ip.max_prefixlen}"


async def allowed_addresses(hosts: Sequence[HostPattern]) -> tuple[tuple[str, int], ...]:
    """The `(cidr, port)` pairs `hosts` come to now, in their order, without repeats; raises
    EgressUnresolved naming the first host that comes to none."""
    found: dict[tuple[str, int], None] = {}
    for host in hosts:
        port = host.port if host.port is not None else DEFAULT_PORT
        for address in await _addresses(host.host):
            found[(cidr(address), port)] = None
    return tuple(found)


async def daemon_addresses(name: str) -> tuple[str, ...]:
    """The addresses `worker.kubernetes.daemon_address` comes to now, as the daemon resolves
    it (an IP literal as it is); raises EgressUnresolved naming it."""
    try:
        return tuple(await _addresses(name))
    except EgressUnresolved:
        raise EgressUnresolved(
            f"worker.kubernetes.daemon_address {name} did not resolve to an address here, so "
            "the pod's NetworkPolicy could not let it out to the daemon"
        ) from None


async def _addresses(name: str) -> list[str]:
    if name.startswith("*."):
        raise EgressUnresolved(
            f"allow_hosts {name}: a pattern has no addresses for the pod's NetworkPolicy; "
            "name each host"
        )
    try:
        return [str(ipaddress.ip_address(name))]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise EgressUnresolved(
            f"model host {name} did not resolve ({exc}), so the pod's NetworkPolicy for "
            "network: model could not let it out"
        ) from None
    addresses = [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]
    if not addresses:
        raise EgressUnresolved(
            f"model host {name} resolved to no IPv4 or IPv6 address, so the pod's "
            "NetworkPolicy for network: model would let nothing out to it"
        )
    return list(dict.fromkeys(addresses))

"""`network: model` in a pod: the model hosts resolved by the daemon when the run's pod is made,
each address alone (IPv4 /32, IPv6 /128) on the host's port, beside DNS, as a NetworkPolicy
the Kubernetes schema takes; a host that does not resolve fails the start naming it, before
anything is applied."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import kubernetes_validate
import pytest

from symphony.config.kubernetes import DaemonAddress
from symphony.config.sandbox import HostPattern, Network, parse_host_pattern
from symphony.hosts.kubernetes.egress import EgressUnresolved, allowed_addresses, cidr
from symphony.hosts.kubernetes.kubectl import Kubectl
from symphony.hosts.kubernetes.manifests import network_policy
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from tests.hosts.test_kubectl_host import READY, SETTINGS, FakeKubectl, pods_with, statuses
from tests.hosts.test_kubernetes_manifests import BASE, pod
from tests.test_deploy import VERSION

T = TypeVar("T")

DNS: Mapping[str, list[str]] = {
    "api.openai.com": ["162.159.140.245", "2606:4700:7::a29f:8cf5", "162.159.140.245"],
    "chatgpt.com": ["104.18.32.47"],
    "auth.openai.com": ["104.18.41.241"],
    "models.internal": ["10.0.0.5"],
    "nothing.example": [],
}


def resolving(make: Callable[[], Awaitable[T]]) -> T:
    """`make()` run on a loop whose getaddrinfo answers from DNS (and fails for the rest)."""

    async def getaddrinfo(host: str, port: object, **_: object) -> list[Any]:
        if host not in DNS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0))
            for a in DNS[host]
        ]

    async def main() -> T:
        asyncio.get_running_loop().getaddrinfo = getaddrinfo  # type: ignore[method-assign]
        return await make()

    return asyncio.run(main())


def hosts(*patterns: str) -> tuple[HostPattern, ...]:
    return tuple(parse_host_pattern(p, "allow_hosts") for p in patterns)


def test_each_address_is_let_out_alone_on_the_host_s_port() -> None:
    assert cidr("203.0.113.7") == "203.0.113.7/32"
    assert cidr("2606:4700:7::a29f:8cf5") == "2606:4700:7::a29f:8cf5/128"
    assert cidr("fe80::1%eth0") == "fe80::1/128"
    listed = hosts("api.openai.com", "models.internal:8443", "198.51.100.9:9000", "2001:db8::2")
    found = resolving(lambda: allowed_addresses(listed))
    assert found == (
        ("162.159.140.245/32", 443),
        ("2606:4700:7::a29f:8cf5/128", 443),
        ("10.0.0.5/32", 8443),
        ("198.51.100.9/32", 9000),  # an IP literal is not resolved
        ("2001:db8::2/128", 443),
    )


def test_the_model_policy_is_dns_and_those_addresses_and_valid_kubernetes() -> None:
    allow = resolving(lambda: allowed_addresses(hosts("api.openai.com", "models.internal:8443")))
    policy = network_policy(pod(BASE), Network.MODEL, allow)
    kubernetes_validate.validate(policy, VERSION, strict=True)
    dns = {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert policy["spec"]["egress"] == [
        dns,
        {"to": [{"ipBlock": {"cidr": "162.159.140.245/32"}}],
         "ports": [{"protocol": "TCP", "port": 443}]},
        {"to": [{"ipBlock": {"cidr": "2606:4700:7::a29f:8cf5/128"}}],
         "ports": [{"protocol": "TCP", "port": 443}]},
        {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}],
         "ports": [{"protocol": "TCP", "port": 8443}]},
    ]  # fmt: skip
    assert policy["spec"]["ingress"] == [] and policy["spec"]["policyTypes"] == [
        "Ingress",
        "Egress",
    ]


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("unknown.example", "model host unknown.example did not resolve"),
        ("nothing.example", "model host nothing.example resolved to no IPv4 or IPv6 address"),
        ("*.openai.com", "allow_hosts *.openai.com: a pattern has no addresses"),
    ],
)
def test_a_host_that_comes_to_no_address_is_named(pattern: str, said: str) -> None:
    with pytest.raises(EgressUnresolved, match=re.escape(said)):
        resolving(lambda: allowed_addresses(hosts("api.openai.com", pattern)))


def test_a_model_pod_is_applied_with_the_resolved_policy() -> None:
    fake = FakeKubectl([statuses(READY)])
    agent_hosts = hosts("api.openai.com", "chatgpt.com", "auth.openai.com")
    resolving(lambda: pods_with(fake).start("ABC-1", "r", Network.MODEL, model_hosts=agent_hosts))
    _, sent = fake.calls[0]
    assert sent is not None
    pod_sent, policy = json.loads(sent)["items"]
    blocks = [rule["to"][0]["ipBlock"]["cidr"] for rule in policy["spec"]["egress"][1:]]
    assert blocks == ["162.159.140.245/32", "2606:4700:7::a29f:8cf5/128", "104.18.32.47/32",
                      "104.18.41.241/32"]  # fmt: skip
    # The daemon's HTTP proxy is this machine's: nothing in the pod points at it.
    (container,) = pod_sent["spec"]["containers"]
    assert not [e for e in container["env"] if "proxy" in e["name"].lower()]


def test_a_model_pod_whose_host_does_not_resolve_is_never_applied() -> None:
    fake = FakeKubectl([statuses(READY)])
    with pytest.raises(PodFailed, match=r"model host unknown\.example did not resolve"):
        resolving(lambda: pods_with(fake).start("ABC-1", "r", Network.MODEL,
                                                model_hosts=hosts("unknown.example")))  # fmt: skip
    assert fake.calls == []


def test_other_networks_resolve_nothing() -> None:
    fake = FakeKubectl([statuses(READY)])
    resolving(lambda: pods_with(fake).start("ABC-1", "r", Network.NONE,
                                            model_hosts=hosts("unknown.example")))  # fmt: skip
    _, sent = fake.calls[0]
    assert sent is not None and json.loads(sent)["items"][1]["spec"]["egress"] == []


def daemon_pods(fake: FakeKubectl, address: str) -> Pods:
    settings = dataclasses.replace(SETTINGS, daemon=DaemonAddress(address))
    return Pods(Kubectl(settings, {"PATH": "/bin"}, fake), "inst-1", poll_s=0)


@pytest.mark.parametrize("network", [Network.NONE, Network.MODEL])
def test_a_pod_is_let_out_to_the_daemon_at_the_addresses_resolved_when_it_is_made(
    network: Network,
) -> None:
    fake = FakeKubectl([statuses(READY)])
    start = daemon_pods(fake, "models.internal").start
    resolving(lambda: start("ABC-1", "r", network, model_hosts=hosts("chatgpt.com")))
    _, sent = fake.calls[0]
    assert sent is not None
    pod_sent, policy = json.loads(sent)["items"]
    assert pod_sent["spec"]["hostAliases"] == [{"ip": "10.0.0.5", "hostnames": ["models.internal"]}]
    *_, daemon = policy["spec"]["egress"]
    assert daemon["to"] == [{"ipBlock": {"cidr": "10.0.0.5/32"}}]
    assert [p["port"] for p in daemon["ports"]] == [8701, 8702]


def test_a_daemon_address_that_does_not_resolve_is_named_before_anything_is_applied() -> None:
    fake = FakeKubectl([statuses(READY)])
    with pytest.raises(PodFailed, match=r"worker.kubernetes.daemon_address unknown\.example"):
        resolving(lambda: daemon_pods(fake, "unknown.example").start("ABC-1", "r", Network.NONE))
    assert fake.calls == []
    # Under network: full the pod's own DNS may know it (its policy lets everything out).
    resolving(lambda: daemon_pods(fake, "unknown.example").start("ABC-1", "r", Network.FULL))
    _, sent = fake.calls[0]
    assert sent is not None and "hostAliases" not in json.loads(sent)["items"][0]["spec"]

"""The pod and NetworkPolicy made for a run: valid Kubernetes (the bundled OpenAPI schema,
strict), locked down as the settings say, and passing the same policy scanner as the shipped
manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from symphony.config.kubernetes import parse_kubernetes
from symphony.config.sandbox import Network
from symphony.hosts.kubernetes.manifests import (
    INSTANCE_LABEL,
    RUN_LABEL,
    TICKET_LABEL,
    claim_manifest,
    daemon_rule,
    instance_selector,
    label_value,
    network_policy,
    pod_manifest,
    pod_name,
)
from tests.test_deploy import SKIPPED_FOR_ALL, SKIPPED_FOR_RUN_PODS, VERSION, failed, scan

BASE = {"image": "registry.example.com/agent-runner:1.4", "namespace": "agents"}
RICH = {
    **BASE,
    "service_account": "agent-runner",
    "resources": {"cpu": "500m", "memory": "1Gi"},
    "node_selector": {"pool": "agents"},
    "tolerations": [{"key": "dedicated", "value": "agents", "effect": "NoExecute",
                     "toleration_seconds": 30}, {"operator": "Exists"}],
    "workspace": "pvc:agent-ws",
}  # fmt: skip


def pod(raw: dict[str, Any], ticket: str = "ABC-12") -> dict[str, Any]:
    return pod_manifest(parse_kubernetes(raw), "prod-a1b2", ticket, "run-7")


@pytest.mark.parametrize("raw", [BASE, RICH])
def test_the_pod_is_valid_kubernetes(raw: dict[str, Any]) -> None:
    kubernetes_validate.validate(pod(raw), VERSION, strict=True)


def claim(raw: dict[str, Any], ticket: str = "ABC-12") -> dict[str, Any]:
    made = claim_manifest(parse_kubernetes(raw), "wf-9f8e", ticket, "issue-77")
    assert made is not None
    return made


@pytest.mark.parametrize("raw", [RICH, {**RICH, "workspace_size": "50Gi",
                                        "workspace_storage_class": "fast-ssd"}])  # fmt: skip
def test_the_ticket_s_claim_is_valid_kubernetes_and_the_pod_mounts_it(raw: dict[str, Any]) -> None:
    made = claim(raw)
    kubernetes_validate.validate(made, VERSION, strict=True)
    (volume,) = [v for v in pod(raw)["spec"]["volumes"] if v["name"] == "workspace"]
    assert volume == {"name": "workspace",
                      "persistentVolumeClaim": {"claimName": made["metadata"]["name"]}}  # fmt: skip
    assert made["metadata"]["name"] == "agent-ws-abc-12"
    assert made["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "symphony",
                                          "symphony.dev/workflow": "wf-9f8e",
                                          TICKET_LABEL: "ABC-12"}  # fmt: skip
    assert made["metadata"]["annotations"] == {"symphony.dev/issue-id": "issue-77",
                                               "symphony.dev/ticket": "ABC-12"}  # fmt: skip
    assert made["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_claim_asks_for_its_size_and_names_a_class_only_when_one_is_set() -> None:
    spec = claim(RICH)["spec"]
    assert spec["resources"] == {"requests": {"storage": "10Gi"}}
    assert "storageClassName" not in spec  # the cluster's default class
    sized = claim({**RICH, "workspace_size": "50Gi", "workspace_storage_class": "fast-ssd"})
    assert sized["spec"]["resources"] == {"requests": {"storage": "50Gi"}}
    assert sized["spec"]["storageClassName"] == "fast-ssd"
    assert claim_manifest(parse_kubernetes(BASE), "wf", "ABC-12", "1") is None  # an emptyDir


@pytest.mark.parametrize("network", list(Network))
def test_each_network_policy_is_valid_kubernetes(network: Network) -> None:
    made = network_policy(pod(BASE), network, (("203.0.113.7/32", 443),))
    kubernetes_validate.validate(made, VERSION, strict=True)


def test_the_pod_is_non_root_read_only_and_without_a_token() -> None:
    made = pod(BASE)
    spec = made["spec"]
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    resources = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"}
    assert container["resources"] == {"requests": resources, "limits": resources}
    writable = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(writable) == {"/workspace", "/home/agent", "/tmp"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["workspace"] and spec["restartPolicy"] == "Never"
    assert made["metadata"]["namespace"] == "agents"
    assert spec.get("nodeSelector") is None and spec.get("tolerations") is None


def test_the_settings_reach_the_pod() -> None:
    spec = pod(RICH)["spec"]
    assert spec["automountServiceAccountToken"] is True
    assert spec["serviceAccountName"] == "agent-runner"
    assert spec["nodeSelector"] == {"pool": "agents"}
    assert spec["tolerations"] == [
        {"operator": "Equal", "key": "dedicated", "value": "agents", "effect": "NoExecute",
         "tolerationSeconds": 30},
        {"operator": "Exists"},
    ]  # fmt: skip
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "agent-ws-abc-12"}
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {
        "cpu": "500m", "memory": "1Gi", "ephemeral-storage": "10Gi"}  # fmt: skip


def test_labels_name_the_instance_ticket_and_run_and_select_this_instance_only() -> None:
    made = pod(BASE, ticket="owner/repo#42")
    found = made["metadata"]["labels"]
    assert found[INSTANCE_LABEL] == "prod-a1b2" and found[RUN_LABEL] == "run-7"
    assert found[TICKET_LABEL] == "owner-repo-42"
    assert instance_selector("prod-a1b2").endswith(f"{INSTANCE_LABEL}=prod-a1b2")
    name = made["metadata"]["name"]
    assert name.startswith("symphony-owner-repo-42-") and len(name) <= 63
    assert name != pod_name("prod-a1b2", "owner/repo#42", "run-8")
    assert name != pod_name("other", "owner/repo#42", "run-7")


def test_long_label_values_are_shortened_apart() -> None:
    one, two = label_value("A" * 80 + "1"), label_value("A" * 80 + "2")
    assert len(one) == len(two) == 63 and one != two
    assert label_value("--x--") == "x" and label_value("///") == "x"
    kubernetes_validate.validate(pod(BASE, ticket="Z" * 200), VERSION, strict=True)


def test_the_network_policy_follows_the_sandbox_network() -> None:
    made = pod(BASE)
    selected = {RUN_LABEL: "run-7", INSTANCE_LABEL: "prod-a1b2"}
    allow = (("203.0.113.7/32", 443), ("10.0.0.5/32", 8787))
    none = network_policy(made, Network.NONE, allow)["spec"]
    assert none["podSelector"] == {"matchLabels": selected}
    assert none["policyTypes"] == ["Ingress", "Egress"] and none["egress"] == []
    assert none["ingress"] == []
    model = network_policy(made, Network.MODEL, allow)["spec"]["egress"]
    assert [r["to"] for r in model[1:]] == [[{"ipBlock": {"cidr": "203.0.113.7/32"}}],
                                            [{"ipBlock": {"cidr": "10.0.0.5/32"}}]]  # fmt: skip
    assert [r["ports"][0]["port"] for r in model] == [53, 443, 8787]
    assert network_policy(made, Network.FULL)["spec"]["egress"] == [{}]


@pytest.mark.parametrize("network", list(Network))
def test_the_run_s_manifests_pass_the_policy_scanner(tmp_path: Path, network: Network) -> None:
    # A named service account mounts its token by the workflow's own choice (CKV_K8S_38 would
    # flag it); every other setting is scanned.
    for index, raw in enumerate((BASE, {**RICH, "service_account": None})):
        made = pod(raw)
        made["metadata"]["name"] += f"-{index}"
        docs = [made, network_policy(made, network, (("203.0.113.7/32", 443),))]
        if raw is not BASE:
            docs.append(claim(raw))
        (tmp_path / f"run{index}.yaml").write_text(yaml.safe_dump_all(docs))
    report = scan(tmp_path, SKIPPED_FOR_ALL | SKIPPED_FOR_RUN_PODS)
    assert failed(report) == []
    assert report["summary"]["passed"] >= 80


OUTSIDE = {**BASE, "daemon_address": "symphony.example.com"}
INSIDE = {**BASE, "daemon_address": "symphony.symphony.svc",
          "daemon_pod_labels": {"app.kubernetes.io/name": "symphony"},
          "daemon_namespace": "symphony"}  # fmt: skip


def with_daemon(raw: dict[str, Any], network: Network) -> tuple[dict[str, Any], dict[str, Any]]:
    settings = parse_kubernetes(raw)
    assert settings.daemon is not None
    addresses = ("198.51.100.4", "2001:db8::4")
    made = pod_manifest(settings, "prod-a1b2", "ABC-12", "run-7", addresses)
    rule = daemon_rule(settings.daemon, settings.namespace, addresses)
    return made, network_policy(made, network, (("203.0.113.7/32", 443),), rule)


def test_a_pod_outside_the_daemon_s_cluster_reaches_its_two_ports_at_its_addresses() -> None:
    made, policy = with_daemon(OUTSIDE, Network.NONE)
    # The pod knows the daemon's name by what the daemon resolved: no DNS under network none.
    assert made["spec"]["hostAliases"] == [
        {"ip": "198.51.100.4", "hostnames": ["symphony.example.com"]},
        {"ip": "2001:db8::4", "hostnames": ["symphony.example.com"]},
    ]
    assert policy["spec"]["egress"] == [{
        "to": [{"ipBlock": {"cidr": "198.51.100.4/32"}}, {"ipBlock": {"cidr": "2001:db8::4/128"}}],
        "ports": [{"protocol": "TCP", "port": 8701}, {"protocol": "TCP", "port": 8702}],
    }]  # fmt: skip
    _, model = with_daemon(OUTSIDE, Network.MODEL)
    egress = model["spec"]["egress"]
    assert [r["ports"][0]["port"] for r in egress] == [53, 443, 8701]
    assert egress[-1] == policy["spec"]["egress"][0]
    _, full = with_daemon(OUTSIDE, Network.FULL)
    assert full["spec"]["egress"] == [{}]


def test_a_pod_in_the_daemon_s_cluster_reaches_the_daemon_s_pods_by_selector() -> None:
    """A Service's address is translated to a pod's before the policy applies: the rule
    names the daemon's pods, never the Service's address."""
    made, policy = with_daemon(INSIDE, Network.NONE)
    assert made["spec"]["hostAliases"][0]["hostnames"] == ["symphony.symphony.svc"]
    assert policy["spec"]["egress"] == [{
        "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "symphony"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                      "symphony"}}}],
        "ports": [{"protocol": "TCP", "port": 8701}, {"protocol": "TCP", "port": 8702}],
    }]  # fmt: skip
    same = {**INSIDE, "daemon_namespace": None}
    _, policy = with_daemon(same, Network.NONE)
    selector = policy["spec"]["egress"][0]["to"][0]["namespaceSelector"]
    assert selector == {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}


def test_a_daemon_named_by_its_address_needs_no_host_alias() -> None:
    settings = parse_kubernetes({**BASE, "daemon_address": "198.51.100.4"})
    assert "hostAliases" not in pod_manifest(settings, "i", "ABC-1", "r", ("198.51.100.4",))["spec"]
    assert "hostAliases" not in pod(OUTSIDE)["spec"]  # nothing resolved: nothing pinned


@pytest.mark.parametrize("raw", [OUTSIDE, INSIDE])
@pytest.mark.parametrize("network", list(Network))
def test_the_manifests_with_the_daemon_s_ports_are_valid_kubernetes(
    raw: dict[str, Any], network: Network
) -> None:
    for made in with_daemon(raw, network):
        kubernetes_validate.validate(made, VERSION, strict=True)

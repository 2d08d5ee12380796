"""`worker.kubernetes:` parsed into the settings pods are made from, with errors naming the
setting for values the Kubernetes API would refuse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from symphony.config.fields import ConfigError
from symphony.config.kubernetes import DaemonAddress, KubernetesSettings, Toleration
from tests.cli_runner import Cli
from tests.harness import Board
from tests.hosts.test_settings import settings_with

FULL = {
    "context": "prod-cluster",
    "namespace": "agents",
    "image": "registry.example.com/agent-runner:1.4",
    "service_account": None,
    "resources": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"},
    "max_pods": 20,
    "node_selector": {"pool": "agents"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "agents",
                     "effect": "NoSchedule"}],
    "workspace": "pvc:agent-ws",
}  # fmt: skip


def test_the_documented_settings_parse(tmp_path: Path) -> None:
    k8s = settings_with(tmp_path, worker={"kubernetes": FULL}).worker.kubernetes
    assert k8s == KubernetesSettings(
        image="registry.example.com/agent-runner:1.4",
        context="prod-cluster",
        namespace="agents",
        resources=(("cpu", "2"), ("memory", "4Gi"), ("ephemeral-storage", "10Gi")),
        max_pods=20,
        node_selector=(("pool", "agents"),),
        tolerations=(Toleration("dedicated", "Equal", "agents", "NoSchedule"),),
        workspace_claim="agent-ws",
    )
    assert k8s.workspace == "pvc:agent-ws"
    assert (k8s.workspace_size, k8s.workspace_storage_class) == ("10Gi", None)
    sized = {**FULL, "workspace_size": "50Gi", "workspace_storage_class": "fast-ssd"}
    k8s = settings_with(tmp_path, worker={"kubernetes": sized}).worker.kubernetes
    assert (k8s.workspace_size, k8s.workspace_storage_class) == ("50Gi", "fast-ssd")


def test_defaults_are_an_empty_dir_no_token_and_bounded_resources(tmp_path: Path) -> None:
    worker = {"kubernetes": {"image": "runner:1", "resources": {"cpu": 1}}}
    k8s = settings_with(tmp_path, worker=worker).worker.kubernetes
    assert (k8s.namespace, k8s.context, k8s.service_account) == ("default", None, None)
    assert k8s.workspace == "empty_dir" and k8s.max_pods is None
    assert dict(k8s.resources) == {"cpu": "1", "memory": "4Gi", "ephemeral-storage": "10Gi"}
    assert settings_with(tmp_path).worker.kubernetes is None


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"image": ""}, "worker.kubernetes.image"),
        ({"image": None}, "worker.kubernetes.image"),
        ({"namespace": "Agents_1"}, "worker.kubernetes.namespace"),
        ({"service_account": "Bad Name"}, "worker.kubernetes.service_account"),
        ({"resources": {"cpu": "two"}}, "worker.kubernetes.resources.cpu"),
        ({"resources": {"memory": "0"}}, "worker.kubernetes.resources.memory"),
        ({"resources": {"gpu": "1"}}, "worker.kubernetes.resources"),
        ({"max_pods": 0}, "worker.kubernetes.max_pods"),
        ({"node_selector": {"pool": "a b"}}, "worker.kubernetes.node_selector.pool"),
        ({"node_selector": ["pool"]}, "worker.kubernetes.node_selector"),
        ({"tolerations": [{"operator": "Maybe"}]}, "worker.kubernetes.tolerations[0].operator"),
        ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
         "worker.kubernetes.tolerations[0].value"),
        ({"tolerations": [{"key": "k", "value": "v", "toleration_seconds": 5}]},
         "worker.kubernetes.tolerations[0].toleration_seconds"),
        ({"workspace": "hostPath:/srv"}, "worker.kubernetes.workspace"),
        ({"workspace": "pvc:"}, "worker.kubernetes.workspace"),
        ({"workspace": "pvc:ws", "workspace_size": "ten"}, "worker.kubernetes.workspace_size"),
        ({"workspace": "pvc:ws", "workspace_size": "0Gi"}, "worker.kubernetes.workspace_size"),
        ({"workspace": "pvc:ws", "workspace_storage_class": "Fast SSD"},
         "worker.kubernetes.workspace_storage_class"),
        ({"workspace": "empty_dir", "workspace_size": "5Gi"},
         "worker.kubernetes.workspace_size applies only with"),
        ({"workspace": "empty_dir", "workspace_storage_class": "ssd"},
         "worker.kubernetes.workspace_storage_class applies only with"),
        ({"replicas": 2}, "worker.kubernetes has unknown key(s) replicas"),
        ({"context": ""}, "worker.kubernetes.context"),
        ({"daemon_address": "http://symphony:8701"}, "worker.kubernetes.daemon_address"),
        ({"daemon_address": "bad name"}, "worker.kubernetes.daemon_address"),
        ({"daemon_address": 10}, "worker.kubernetes.daemon_address"),
        ({"daemon_listen": "0.0.0.0"}, "worker.kubernetes.daemon_listen applies only with"),
        ({"daemon_pod_labels": {"app": "symphony"}},
         "worker.kubernetes.daemon_pod_labels applies only with"),
        ({"daemon_address": "d.svc", "daemon_listen": "everywhere"},
         "worker.kubernetes.daemon_listen must be an IP address"),
        ({"daemon_address": "d.svc", "daemon_tool_port": 0}, "worker.kubernetes.daemon_tool_port"),
        ({"daemon_address": "d.svc", "daemon_gateway_port": 70000},
         "worker.kubernetes.daemon_gateway_port"),
        ({"daemon_address": "d.svc", "daemon_gateway_port": 8701},
         "daemon_tool_port and daemon_gateway_port must differ"),
        ({"daemon_address": "d.svc", "daemon_pod_labels": {}},
         "worker.kubernetes.daemon_pod_labels must name at least one label"),
        ({"daemon_address": "d.svc", "daemon_pod_labels": {"app": "a b"}},
         "worker.kubernetes.daemon_pod_labels.app"),
        ({"daemon_address": "d.svc", "daemon_namespace": "symphony"},
         "worker.kubernetes.daemon_namespace applies only with"),
        ({"daemon_address": "d.svc", "daemon_pod_labels": {"a": "b"}, "daemon_namespace": "N_1"},
         "worker.kubernetes.daemon_namespace"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_setting(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        settings_with(tmp_path, worker={"kubernetes": {**FULL, **change}})


def test_the_daemon_address_parses_with_its_ports_and_listens_everywhere(tmp_path: Path) -> None:
    cluster = {**FULL, "daemon_address": "Symphony.symphony.svc"}
    k8s = settings_with(tmp_path, worker={"kubernetes": cluster}).worker.kubernetes
    assert k8s.daemon == DaemonAddress("symphony.symphony.svc", "0.0.0.0", 8701, 8702)
    assert k8s.daemon.url_host() == "symphony.symphony.svc"
    cluster = {**FULL, "daemon_address": "fd00::5", "daemon_listen": "::",
               "daemon_tool_port": "9001", "daemon_gateway_port": 9002,
               "daemon_pod_labels": {"app.kubernetes.io/name": "symphony"},
               "daemon_namespace": "symphony"}  # fmt: skip
    k8s = settings_with(tmp_path, worker={"kubernetes": cluster}).worker.kubernetes
    assert k8s.daemon == DaemonAddress(
        "fd00::5", "::", 9001, 9002, (("app.kubernetes.io/name", "symphony"),), "symphony"
    )
    assert k8s.daemon.url_host() == "[fd00::5]" and k8s.daemon.ports == (9001, 9002)
    assert settings_with(tmp_path, worker={"kubernetes": FULL}).worker.kubernetes.daemon is None


def test_ssh_hosts_and_a_cluster_are_one_or_the_other(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot both be set"):
        settings_with(tmp_path, worker={"ssh_hosts": ["b1"], "kubernetes": FULL})


def test_check_prints_the_cluster_settings(tmp_path: Path, symphony_cli: Cli) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(worker={"kubernetes": FULL})
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("kubernetes"))
    assert "registry.example.com/agent-runner:1.4" in line and "namespace agents" in line
    assert "context prod-cluster" in line and "cpu 2, memory 4Gi" in line
    assert "at most 20 at once" in line and "workspace pvc:agent-ws" in line
    assert "(10Gi a ticket, storage class the cluster default)" in line
    assert "no token" in line and "requests time out after 30 s" in line


def test_the_request_timeout_is_an_integer_of_at_least_100_ms(tmp_path: Path) -> None:
    quick = settings_with(tmp_path, worker={"kubernetes": {**FULL, "request_timeout_ms": 250}})
    assert quick.worker.kubernetes is not None
    assert quick.worker.kubernetes.request_timeout_ms == 250
    with pytest.raises(ConfigError, match="request_timeout_ms must be at least 100, got 50"):
        settings_with(tmp_path, worker={"kubernetes": {**FULL, "request_timeout_ms": 50}})


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"agent": {"kind": "claude"}}, "agent kind claude takes symphony's tools over MCP"),
        ({"sandbox": {"kind": "bwrap", "network": "model", "allow_hosts": ["*.openai.com"]}},
         "sandbox.allow_hosts *.openai.com: with worker.kubernetes network: model is the pod's "
         "NetworkPolicy, which lets out addresses"),
    ],
)  # fmt: skip
def test_what_no_pod_can_reach_is_refused_at_load(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        settings_with(tmp_path, worker={"kubernetes": FULL}, **change)


@pytest.mark.parametrize("kind", ["claude", "acp"])
def test_mcp_agents_run_in_pods_that_reach_the_daemon(tmp_path: Path, kind: str) -> None:
    agent: dict[str, Any] = {"kind": kind}
    with pytest.raises(ConfigError, match=r"set worker\.kubernetes\.daemon_address"):
        settings_with(tmp_path, worker={"kubernetes": FULL}, agent=agent)
    reached = {**FULL, "daemon_address": "symphony.symphony.svc"}
    settings = settings_with(tmp_path, worker={"kubernetes": reached}, agent=agent)
    assert settings.agent.kind == kind


def test_check_says_where_pods_reach_the_daemon_and_what_listens_beyond_loopback(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(worker={"kubernetes": FULL})
    result = symphony_cli("check", cwd=board.root)
    line = next(x for x in result.stdout.splitlines() if x.startswith("daemon "))
    assert "not reached from pods" in line and "loopback only" in line
    reached = {**FULL, "daemon_address": "symphony.symphony.svc",
               "daemon_pod_labels": {"app": "symphony"},
               "daemon_namespace": "symphony"}  # fmt: skip
    board.write_workflow(
        worker={"kubernetes": reached},
        agent={"kind": "claude", "env": {"ANTHROPIC_API_KEY": "sk-ant-x"}},
        sandbox={"kind": "bwrap", "network": "model"},
    )
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("daemon "))
    assert "pods reach it at symphony.symphony.svc" in line
    assert "tool server listens on 0.0.0.0:8701" in line
    assert "model gateway on 0.0.0.0:8702, beyond loopback" in line
    assert "its pods app=symphony in namespace symphony" in line
    line = next(x for x in result.stdout.splitlines() if x.startswith("pod egress"))
    assert "no model host (the agents call their model through the daemon's gateway)" in line
    assert "the daemon's ports 8701, 8702" in line
    assert "sk-ant-x" not in result.stdout


def test_network_model_is_the_pod_s_policy_and_check_says_what_it_lets_out(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    sandbox = {"kind": "bwrap", "network": "model"}
    settings = settings_with(tmp_path, worker={"kubernetes": FULL}, sandbox=sandbox)
    assert settings.sandbox.network.value == "model"
    (tmp_path / "b").mkdir()
    board = Board(tmp_path / "b")
    board.ticket("ABC-1")
    board.write_workflow(
        worker={"kubernetes": FULL},
        sandbox={**sandbox, "allow_hosts": ["api.openai.com", "models.internal:8443"]},
    )
    result = symphony_cli("check", cwd=board.root)
    line = next(x for x in result.stdout.splitlines() if x.startswith("pod egress"))
    assert "sandbox (codex): DNS and api.openai.com:443, models.internal:8443" in line
    assert "resolved when each run's pod is made" in line
    board.write_workflow(worker={"kubernetes": FULL}, sandbox=sandbox)
    result = symphony_cli("check", cwd=board.root)
    line = next(x for x in result.stdout.splitlines() if x.startswith("pod egress"))
    assert "DNS and api.openai.com:443, chatgpt.com:443, auth.openai.com:443" in line


def test_an_api_key_for_the_pods_is_refused_at_start_naming_the_setting(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    """The key would make the agent call the daemon's model gateway, which no pod reaches."""
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(
        worker={"kubernetes": FULL},
        agent={"env": {"OPENAI_API_KEY": "sk-x"}},
        sandbox={"kind": "bwrap", "network": "model"},  # model through the gateway: no pod's
    )
    result = symphony_cli("--no-tui", cwd=board.root)
    assert result.returncode == 1
    assert "worker.kubernetes: the agents would be sent OPENAI_API_KEY" in result.stderr
    assert "set worker.kubernetes.daemon_address" in result.stderr
    assert "sk-x" not in result.stderr and "Traceback" not in result.stderr
    assert board.state_of("ABC-1") == "Todo"

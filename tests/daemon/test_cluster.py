"""What the daemon decides about the cluster beyond a run's pod: a key no pod can use through
the gateway refused, and which pods `check` says a start-up deletes."""

from __future__ import annotations

import dataclasses

from symphony.base.hosts import CLUSTER
from symphony.config.kubernetes import DaemonAddress, KubernetesSettings
from symphony.config.sandbox import Network, SandboxKind, SandboxSettings
from symphony.config.sections import SshSettings, WorkerSettings
from symphony.daemon.places import Places
from symphony.gateway.access import gateway_refusal
from symphony.hosts.kubernetes.pods import ListedPod, describe_pods
from symphony.workspace.pod import PodWorkspaces
from tests.factories import make_settings


def test_a_key_the_pods_would_be_sent_is_refused_naming_where_it_comes_from() -> None:
    cluster = WorkerSettings(
        kubernetes=KubernetesSettings(image="runner:1"), ssh=SshSettings(pass_env=("OPENAI_*",))
    )
    settings = dataclasses.replace(make_settings(), worker=cluster)
    refused = gateway_refusal(settings, {"OPENAI_API_KEY": "sk-1", "PATH": "/bin"})
    assert refused is not None and "OPENAI_API_KEY" in refused and "sk-1" not in refused
    assert "worker.ssh.pass_env" in refused
    assert "set worker.kubernetes.daemon_address" in refused  # the way out, named
    assert gateway_refusal(settings, {"PATH": "/bin"}) is None  # a login of its own: fine
    assert gateway_refusal(make_settings(), {"OPENAI_API_KEY": "sk-1"}) is None  # no pods
    reached = dataclasses.replace(
        cluster, kubernetes=KubernetesSettings(image="runner:1", daemon=DaemonAddress("d.svc"))
    )
    settings = dataclasses.replace(settings, worker=reached)
    assert gateway_refusal(settings, {"OPENAI_API_KEY": "sk-1", "PATH": "/bin"}) is None


def test_check_says_an_earlier_daemon_s_pods_go_and_the_running_one_s_stay() -> None:
    listed = [
        ListedPod("symphony-a-1", "old", "A-1", "r1", "Running"),
        ListedPod("symphony-a-2", "now", "A-2", "r2", "Pending"),
        ListedPod("symphony-b-1", "other-workflow", "B-1", "r3", "Running"),
    ]
    assert describe_pods(listed, ["old", "now"], live="now") == [
        "symphony-a-1 (ticket A-1, Running): deleted at the next start: an earlier daemon's",
        "symphony-a-2 (ticket A-2, Pending): kept: the running daemon's",
    ]
    assert describe_pods(listed, ["old", "now"], live=None)[1].endswith("an earlier daemon's")


def test_a_model_pod_whose_agent_holds_a_key_lets_out_the_gateway_and_no_model_host() -> None:
    daemon = KubernetesSettings(image="runner:1", daemon=DaemonAddress("d.svc"))
    worker = WorkerSettings(kubernetes=daemon, ssh=SshSettings(pass_env=("OPENAI_*",)))
    settings = dataclasses.replace(make_settings(), worker=worker)
    model = SandboxSettings(kind=SandboxKind.BWRAP, network=Network.MODEL)

    def model_hosts_of(environ: dict[str, str]) -> list[str]:
        places = Places(settings, environ, (), "inst-1")
        run = places.for_run(settings, CLUSTER, (), ticket="A-1", run="r", sandbox=model,
                             agent_kind="codex")  # fmt: skip
        assert isinstance(run.workspaces, PodWorkspaces)
        return [h.host for h in run.workspaces._model_hosts]

    assert model_hosts_of({"PATH": "/bin", "OPENAI_API_KEY": "sk-1"}) == []
    assert "api.openai.com" in model_hosts_of({"PATH": "/bin"})  # its own login: its hosts

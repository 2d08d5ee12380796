"""The Kubernetes host's command lines, pod waits and orphan deletion, against an in-memory
`kubectl` (the runner seam): what is sent where, and what a pod's status means for its run."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from symphony.config.kubernetes import DaemonAddress, KubernetesSettings
from symphony.config.sandbox import Network
from symphony.hosts.kubernetes.host import KubectlHost, ReachRefused
from symphony.hosts.kubernetes.kubectl import Kubectl, KubectlResult
from symphony.hosts.kubernetes.manifests import INSTANCE_LABEL, pod_name
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from symphony.hosts.kubernetes.status import pod_state
from symphony.hosts.ssh import WRAPPER

SETTINGS = KubernetesSettings(image="runner:1", context="lab", namespace="agents")
UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu."}],
}  # fmt: skip
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@dataclass
class FakeKubectl:
    """Answers each command line with the first handler that takes it; records them all."""

    handlers: list[Callable[[Sequence[str], bytes | None], KubectlResult | None]] = field(
        default_factory=list
    )
    calls: list[tuple[tuple[str, ...], bytes | None]] = field(default_factory=list)

    async def __call__(
        self,
        argv: Sequence[str],
        stdin: bytes | None,
        env: Mapping[str, str],
        timeout_s: float,
        answer_s: float | None = None,
    ) -> KubectlResult:
        self.calls.append((tuple(argv), stdin))
        for handler in self.handlers:
            found = handler(argv, stdin)
            if found is not None:
                return found
        return KubectlResult(0, "", "")

    def verbs(self) -> list[str]:
        return [argv[argv.index("agents") + 1] for argv, _ in self.calls]


def statuses(
    *seen: dict[str, Any],
) -> Callable[[Sequence[str], bytes | None], KubectlResult | None]:
    left = list(seen)

    def answer(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
        if "get" not in argv or "pod" not in argv:
            return None
        status = left.pop(0) if len(left) > 1 else left[0]
        return KubectlResult(0, json.dumps({"status": status}), "")

    return answer


def pods_with(fake: FakeKubectl, instance: str = "inst-1") -> Pods:
    return Pods(Kubectl(SETTINGS, {"PATH": "/bin", "SECRET": "x"}, fake), instance, poll_s=0)


def test_a_run_s_pod_and_policy_are_applied_as_one_list_on_stdin_and_waited_for() -> None:
    fake = FakeKubectl([statuses({"phase": "Pending"}, READY)])
    host = asyncio.run(pods_with(fake).start("ABC-1", "run-7", Network.NONE))
    apply_argv, sent = fake.calls[0]
    assert apply_argv == ("kubectl", "--context", "lab", "-n", "agents", "apply", "-f", "-",
                          "--request-timeout=30000ms")  # fmt: skip
    assert sent is not None
    listed = json.loads(sent)
    assert [item["kind"] for item in listed["items"]] == ["Pod", "NetworkPolicy"]
    assert listed["items"][1]["spec"]["egress"] == []  # network: none lets nothing out
    assert host.pod == pod_name("inst-1", "ABC-1", "run-7")
    assert fake.verbs() == ["apply", "get", "get"]


def test_a_pod_pending_for_room_is_a_wait_said_as_such_never_a_failure() -> None:
    fake = FakeKubectl([statuses(UNSCHEDULABLE, UNSCHEDULABLE, UNSCHEDULABLE, READY)])
    said: list[str] = []
    asyncio.run(pods_with(fake).start("ABC-1", "r", Network.FULL, said.append))
    assert said == ["Pending: Insufficient cpu"]  # once, until it changes or time passes
    assert "delete" not in fake.verbs()


def test_an_image_that_cannot_be_pulled_fails_the_run_and_leaves_no_pod() -> None:
    pulling = {
        "phase": "Pending",
        "containerStatuses": [
            {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
        ],
    }
    fake = FakeKubectl([statuses(pulling)])
    with pytest.raises(PodFailed, match="ImagePullBackOff: not found"):
        asyncio.run(pods_with(fake).start("ABC-1", "r", Network.FULL))
    delete = fake.calls[-1][0]
    name = pod_name("inst-1", "ABC-1", "r")
    assert delete[5:] == ("delete", f"pod/{name}", f"networkpolicy/{name}",
                          "--ignore-not-found", "--wait=false",
                          "--request-timeout=30000ms")  # fmt: skip


def test_a_cluster_kubectl_cannot_reach_is_unreachable() -> None:
    refused = KubectlResult(1, "", "Unable to connect to the server: dial tcp: connection refused")
    fake = FakeKubectl([lambda argv, _: refused if "apply" in argv else None])
    with pytest.raises(PodFailed) as failed:
        asyncio.run(pods_with(fake).start("ABC-1", "r", Network.FULL))
    assert failed.value.unreachable


@pytest.mark.parametrize(
    ("status", "kind", "message"),
    [
        (READY, "ready", ""),
        (UNSCHEDULABLE, "waiting", "Pending: Insufficient cpu"),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
          "reason": "Unschedulable", "message": "0/5 nodes are available: 2 Insufficient "
          "memory, 3 Insufficient cpu. preemption: 0/5 nodes are available."}]},
         "waiting", "Pending: Insufficient memory, Insufficient cpu"),
        ({"phase": "Pending"}, "starting", "Pending"),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
          "reason": "Unschedulable", "message": '0/3 nodes are available: persistentvolumeclaim '
          '"ws-abc-1" not found. preemption: 0/3 nodes are available.'}]},
         "failed", 'persistentvolumeclaim "ws-abc-1" not found (worker.kubernetes.workspace)'),
        ({"phase": "Failed", "reason": "Evicted", "message": "low on ephemeral-storage"},
         "failed", "the pod ended (Failed): low on ephemeral-storage"),
        ({"phase": "Running", "containerStatuses": [
            {"state": {"terminated": {"reason": "OOMKilled"}}}]},
         "failed", "the pod's container ended: OOMKilled"),
    ],
)  # fmt: skip
def test_what_a_pod_s_status_means_for_its_run(
    status: dict[str, Any], kind: str, message: str
) -> None:
    assert pod_state({"status": status}) == pod_state({"status": status})
    found = pod_state({"status": status})
    assert (found.kind, found.message) == (kind, message)


def test_the_agent_starts_over_kubectl_exec_with_its_environment_on_stdin() -> None:
    host = KubectlHost(Kubectl(SETTINGS, {"PATH": "/bin", "API_KEY": "k"}), "symphony-abc-1")
    spec = host.agent_launch(
        "codex app-server", Path("/workspace"), {"OPENAI_API_KEY": "sk-secret-1", "A": "b"}
    )
    assert spec.argv == (
        "kubectl", "--context", "lab", "-n", "agents", "exec", "-i", "symphony-abc-1",
        "-c", "agent", "--", "/bin/sh", "-c", WRAPPER, "symphony", "/workspace",
        "codex app-server", "bash", "stdin",
    )  # fmt: skip
    assert "sk-secret-1" not in " ".join(spec.argv)
    encoded = base64.b64encode(b"sk-secret-1").decode()
    assert f"OPENAI_API_KEY={encoded}".encode() in spec.preamble
    assert dict(spec.env) == {"PATH": "/bin"}  # kubectl gets nothing of the agent's
    with pytest.raises(ReachRefused, match=r"set worker\.kubernetes\.daemon_address"):
        host.reach("http://127.0.0.1:4100/mcp")


def test_an_agent_in_a_pod_dials_the_daemon_address_on_the_service_s_own_port() -> None:
    daemon = DaemonAddress("symphony.symphony.svc")
    settings = dataclasses.replace(SETTINGS, daemon=daemon)
    host = KubectlHost(Kubectl(settings, {"PATH": "/bin"}), "symphony-abc-1")
    assert host.reach("http://127.0.0.1:8701/mcp") == (
        host,
        "http://symphony.symphony.svc:8701/mcp",
    )
    assert host.reach("http://127.0.0.1:8702")[1] == "http://symphony.symphony.svc:8702"
    v6 = KubectlHost(Kubectl(dataclasses.replace(SETTINGS, daemon=DaemonAddress("fd00::5")),
                             {}), "p")  # fmt: skip
    assert v6.reach("http://127.0.0.1:8701/mcp")[1] == "http://[fd00::5]:8701/mcp"
    # A service still on loopback (a reload set the address while it served a run) is not
    # where the pod's policy lets it out.
    with pytest.raises(ReachRefused, match="cannot reach the daemon's service"):
        host.reach("http://127.0.0.1:41234/mcp")


def test_a_hook_sends_its_environment_on_stdin_and_a_lost_pod_is_unreachable() -> None:
    answers = iter([
        KubectlResult(3, "out\n", "symphony-remote-pgid 42\nerr\n"),
        KubectlResult(1, "", 'Error from server (NotFound): pods "p" not found\n'),
    ])  # fmt: skip
    fake = FakeKubectl([lambda argv, stdin: next(answers) if "exec" in argv else None])
    host = KubectlHost(Kubectl(SETTINGS, {}, fake), "p")
    ran = asyncio.run(host.run_script("make", cwd=Path("/workspace"), env={"TOKEN": "t0k"},
                                      timeout_ms=5000, tail_bytes=100))  # fmt: skip
    argv, sent = fake.calls[0]
    assert argv[5:9] == ("exec", "-i", "p", "-c") and "t0k" not in " ".join(argv)
    assert sent is not None and base64.b64encode(b"t0k") in sent
    assert (ran.outcome, ran.exit_code, ran.output) == ("failed", 3, "out\nerr\n")
    lost = asyncio.run(host.run_script("make", cwd=Path("/workspace"), env={},
                                       timeout_ms=5000, tail_bytes=100))  # fmt: skip
    assert lost.exit_code == 255 and "could not reach pod p" in lost.detail


def test_start_up_deletes_only_the_pods_of_earlier_daemons_of_this_workflow() -> None:
    def pod(name: str, instance: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {INSTANCE_LABEL: instance}},
                "status": {"phase": "Running"}}  # fmt: skip

    listing = {"items": [pod("a", "old-1"), pod("b", "now"), pod("c", "other-workflow")]}
    fake = FakeKubectl([
        lambda argv, _: KubectlResult(0, json.dumps(listing), "") if "get" in argv else None
    ])  # fmt: skip
    deleted = asyncio.run(pods_with(fake, "now").delete_orphans(["old-0", "old-1"]))
    assert [p.name for p in deleted] == ["a"]
    get, delete = fake.calls[0][0], fake.calls[1][0]
    assert get[5:] == ("get", "pods", "-l", "app.kubernetes.io/managed-by=symphony", "-o", "json",
                       "--request-timeout=30000ms")  # fmt: skip
    assert delete[5:8] == ("delete", "pod/a", "networkpolicy/a")

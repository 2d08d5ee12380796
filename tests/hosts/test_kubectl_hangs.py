"""A cluster that never answers: every kubectl the daemon runs is bounded. A `kubectl` of the
test's own (a script first on PATH) hangs, sleeping forever, for the subcommands a test
chooses and answers the others; the request timeout is set small, so nothing here waits long.
What is checked: the hung kubectl is killed, the command fails as the cluster being
unreachable in words naming its context and the timeout, and nothing waits for it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from symphony.base.hosts import HOST_UNREACHABLE
from symphony.cli.check import _pods
from symphony.config.kubernetes import KubernetesSettings
from symphony.config.load import load_settings
from symphony.config.sandbox import Network
from symphony.config.sections import HooksSettings
from symphony.daemon.cluster import delete_orphan_pods
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.kubectl import Kubectl
from symphony.hosts.kubernetes.manifests import pod_name
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from symphony.workspace.local import WorkspaceError
from symphony.workspace.pod import PodWorkspaces
from tests.harness import Board

SETTINGS = KubernetesSettings(
    image="runner:1", context="lab", namespace="agents", request_timeout_ms=200
)
FAKE = r"""#!/bin/sh
# kubectl for one test: hangs when its command line holds the words in $KUBECONFIG.
echo "$*" >> "$KUBECONFIG.log"
hang=$(cat "$KUBECONFIG")
case " $* " in *" $hang "*) echo $$ >> "$KUBECONFIG.hung"; exec sleep 100000;; esac
case " $* " in
  *" get pods "*) echo '{"items": []}';;
  *" get pod "*) echo '{"status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}}';;
  *" apply "*) cat >/dev/null; echo created;;
  *" exec "*) echo "symphony-remote-pgid 7" >&2;;
esac
"""


class Hanging:
    def __init__(self, base: Path) -> None:
        self.bin = base / "bin"
        self.bin.mkdir()
        script = self.bin / "kubectl"
        script.write_text(FAKE)
        script.chmod(0o755)
        self.config = base / "kubeconfig"
        self.config.write_text("nothing")

    def hang(self, words: str) -> None:
        self.config.write_text(words)

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}:{os.environ['PATH']}", "KUBECONFIG": str(self.config)}

    def kubectl(self) -> Kubectl:
        return Kubectl(SETTINGS, self.env)

    def lines(self) -> list[str]:
        log = Path(f"{self.config}.log")
        return log.read_text().splitlines() if log.exists() else []

    def hung_alive(self) -> list[int]:
        """The hung kubectls still running (each was to be killed)."""
        hung = Path(f"{self.config}.hung")
        alive = []
        for pid in map(int, hung.read_text().split() if hung.exists() else []):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            alive.append(pid)
        return alive


@pytest.fixture
def fake(tmp_path: Path) -> Hanging:
    return Hanging(tmp_path)


def workspaces(fake: Hanging, hooks: HooksSettings | None = None) -> PodWorkspaces:
    pods = Pods(fake.kubectl(), "inst-1", poll_s=0)
    host = KubectlHost(pods.kubectl, pod_name("inst-1", "ABC-1", "r1"))
    return PodWorkspaces(pods, host, hooks or HooksSettings(), env={}, ticket="ABC-1",
                         run="r1", network=Network.FULL)  # fmt: skip


@pytest.mark.parametrize("words", ["apply", "get pod"])
def test_a_pod_start_whose_kubectl_hangs_is_host_unreachable_naming_cluster_and_timeout(
    fake: Hanging, words: str
) -> None:
    fake.hang(words)
    started = time.monotonic()
    with pytest.raises(WorkspaceError) as failed:
        asyncio.run(workspaces(fake).prepare("ABC-1"))
    assert time.monotonic() - started < 5
    assert failed.value.category == HOST_UNREACHABLE
    assert "the cluster (context lab, namespace agents) did not answer within 1.4 s" in str(
        failed.value
    )
    assert fake.hung_alive() == []  # killed, not left behind
    said = fake.lines()
    assert any("--request-timeout=200ms" in line for line in said if " apply " in line)
    assert " delete " in said[-1]  # whatever was applied is deleted (bounded too)


def test_a_hook_whose_exec_never_reaches_the_pod_is_unreachable_well_before_its_timeout(
    fake: Hanging,
) -> None:
    fake.hang("exec -i")
    hooks = HooksSettings(after_create="make setup", timeout_ms=600_000)
    started = time.monotonic()
    with pytest.raises(WorkspaceError) as failed:
        asyncio.run(workspaces(fake, hooks).prepare("ABC-1"))
    assert time.monotonic() - started < 5  # the hook's ten minutes are not waited out
    assert failed.value.category == HOST_UNREACHABLE
    assert "after_create hook: could not reach pod" in str(failed.value)
    assert "did not answer within 0.2 s" in str(failed.value)
    assert fake.hung_alive() == []


def test_symphony_s_own_commands_in_the_pod_are_bounded_and_unreachable(fake: Hanging) -> None:
    fake.hang("exec")
    host = KubectlHost(fake.kubectl(), "p")
    started = time.monotonic()
    said = asyncio.run(host.command("git rev-parse HEAD"))
    assert time.monotonic() - started < 5
    assert said.unreachable and "did not answer within 0.2 s" in said.reason()


def test_a_hung_delete_returns(fake: Hanging) -> None:
    fake.hang("delete")
    started = time.monotonic()
    assert asyncio.run(Pods(fake.kubectl(), "i").delete("symphony-abc-1-x")) is False
    assert time.monotonic() - started < 5
    assert fake.hung_alive() == []


def test_start_up_s_orphan_listing_says_the_cluster_did_not_answer(
    fake: Hanging, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.hang("get pods")
    started = time.monotonic()
    with pytest.raises(PodFailed, match=r"did not answer within 1\.4 s") as failed:
        asyncio.run(Pods(fake.kubectl(), "now").listed())
    assert failed.value.unreachable
    assert asyncio.run(delete_orphan_pods(Pods(fake.kubectl(), "now"), ["old"])) == 0
    assert time.monotonic() - started < 8
    assert fake.hung_alive() == []


def test_check_says_the_cluster_did_not_answer(
    tmp_path: Path, fake: Hanging, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    fake.hang("get pods")
    board = Board(tmp_path)
    board.write_workflow(worker={"kubernetes": {
        "image": "runner:1", "context": "lab", "namespace": "agents", "request_timeout_ms": 300,
    }})  # fmt: skip
    settings = load_settings(board.workflow, {"HOME": str(tmp_path)})
    for name, value in fake.env.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    asyncio.run(_pods(settings))
    assert time.monotonic() - started < 5
    out = capsys.readouterr().out
    assert (
        "pods          not listed: cannot list pods: the cluster (context lab, namespace "
        "agents) did not answer within 1.6 s (worker.kubernetes.request_timeout_ms)"
    ) in out

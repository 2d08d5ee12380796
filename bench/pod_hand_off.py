"""Pod hand-off benchmark: what publishing from a run's pod costs, and what holding the pod
instead would have saved.

A run's pod here is a podman container made by the suite's `kubectl` shim
(`tests/hosts/kubectl_shim`, the image `scripts/build-sandbox-image` builds), its workspace
a clone of a bare repository the shim mounts into every pod. Measured in one run, each as the
median of several:

- pod ready: `Pods.start` from `kubectl apply` to Ready;
- checkout: the clone of the ticket's branch in the pod (`PodWorkspaces.prepare` after the
  pod is Ready): with a pod per run, a fix run or a rework pays this and the pod start again;
- hand-off push: `push_before_end` in the pod (the branch read, the outgoing commits checked
  for canaries, the push with the token on stdin): what every publishing hand-off adds to the
  end of a run;
- review copy: the branch's diff read in the pod and kept here (`keep_for_review`);
- an idle pod: what a pod held after its run (the other design) uses while it waits: its
  container's memory as podman reports it, beside the requests it would keep reserved in a
  cluster (`worker.kubernetes.resources`) for as long as its ticket waits in review.

Run from the repository root as a user podman works for: `python bench/pod_hand_off.py`
(`--runs N`, default 5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog

from symphony.base.secrets import SecretMasker
from symphony.config.kubernetes import KubernetesSettings
from symphony.config.repository import CodeHostKind, RepositorySettings
from symphony.config.sandbox import Network
from symphony.config.sections import HooksSettings
from symphony.daemon.publish import push_before_end
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.kubectl import Kubectl
from symphony.hosts.kubernetes.manifests import pod_name
from symphony.hosts.kubernetes.pods import Pods
from symphony.workspace.pod import CloneSource, PodWorkspaces

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / "tests" / "hosts" / "kubectl_shim"
IMAGE = "localhost/symphony-kube-test:1"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]


async def timed(what: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await what()
    return time.perf_counter() - started


def lab(base: Path) -> tuple[dict[str, str], Path]:
    shared, state = base / "shared", base / "state"
    shared.mkdir(parents=True)
    state.mkdir()
    shared.chmod(0o777)
    config = base / "kubeconfig.json"
    config.write_text(json.dumps({"state": str(state), "mount": str(shared)}))
    seed, bare = base / "seed", shared / "remote.git"
    subprocess.run([*GIT, "init", "-q", "-b", "main", str(seed)], check=True)
    for n in range(50):
        (seed / f"module_{n}.py").write_text(f"VALUE = {n}\n" * 40)
    subprocess.run([*GIT, "-C", str(seed), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(seed), "commit", "-qm", "Start"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    if os.geteuid() == 0:  # the pod's user pushes to it
        for path in [bare, *bare.rglob("*")]:
            os.chown(path, 10001, 10001)
    env = {"PATH": f"{SHIM}:{os.environ['PATH']}", "KUBECONFIG": str(config),
           "HOME": str(base)}  # fmt: skip
    return env, bare


async def one_run(env: dict[str, str], bare: Path, n: int) -> dict[str, float]:
    kubectl = Kubectl(KubernetesSettings(image=IMAGE, namespace="bench"), env)
    pods = Pods(kubectl, "bench", poll_s=0.05)
    ticket, run = f"B-{n}", f"run-{n}"
    host = KubectlHost(kubectl, pod_name("bench", ticket, run))
    workspaces = PodWorkspaces(
        pods, host, HooksSettings(), env={}, ticket=ticket, run=run, network=Network.FULL,
        clone=CloneSource(str(bare), "agent/{{ issue.identifier }}", "main"),
        kept=bare.parent.parent / "kept",
    )  # fmt: skip
    figures: dict[str, float] = {}
    started = time.perf_counter()
    workspace = await workspaces.prepare(ticket)
    figures["pod ready + checkout"] = time.perf_counter() - started
    edit = 'echo "VALUE = -1" >> module_1.py && git -c user.name=a -c user.email=a@b commit -qam x'
    await host.command(f'cd -- "$1" && {edit}', str(workspace.path))
    repository = RepositorySettings(CodeHostKind.LOCAL, "pulls", "", "", None, str(bare))

    async def push() -> object:
        return await push_before_end(
            repository, workspace.path, None, base="main", git=workspaces.git, env={},
            masker=SecretMasker(), canaries=("cnr0000",),
        )  # fmt: skip

    figures["hand-off push"] = await timed(push)
    assert workspace.base is not None
    figures["review copy"] = await timed(
        lambda: workspaces.keep_for_review(ticket, workspace, workspace.base or "", {})
    )
    stats = subprocess.run(["podman", "stats", "--no-stream", "--format", "json", host.pod],
                           capture_output=True, text=True)  # fmt: skip
    with_memory = json.loads(stats.stdout or "[]")
    if with_memory:
        figures["idle pod memory MB"] = _megabytes(with_memory[0].get("mem_usage", "0B / 0B"))
    await workspaces.after_run(workspace)
    return figures


def _megabytes(usage: str) -> float:
    used = usage.split("/")[0].strip()
    units = {"kB": 1e-3, "KB": 1e-3, "MB": 1.0, "GB": 1e3, "B": 1e-6}
    for unit, scale in units.items():
        if used.endswith(unit):
            return float(used[: -len(unit)]) * scale
    return 0.0


async def main(runs: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="pod-bench-", dir=REPO / ".tmp"))
    try:
        env, bare = lab(base)
        results: dict[str, list[float]] = {}
        for n in range(runs):
            for name, value in (await one_run(env, bare, n)).items():
                results.setdefault(name, []).append(value)
        for name, values in results.items():
            median = statistics.median(values)
            shown = f"{median:.0f} MB" if name.endswith("MB") else f"{median * 1000:.0f} ms"
            print(f"{name.removesuffix(' MB'):24} {shown}")
        print(f"{'held pod reserves':24} {KubernetesSettings(image=IMAGE).resources} "
              "for as long as its ticket waits in review")  # fmt: skip
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", "--filter",
                        f"label=kubectl-shim.cluster={base / 'state'}"],
                       capture_output=True)  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args().runs))

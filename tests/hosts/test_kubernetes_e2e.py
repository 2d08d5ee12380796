"""Agents in pods, through the real CLI and a `kubectl` backed by real podman
(`tests/hosts/kubectl_shim`): three tickets with `max_pods: 2` (one waits, and one pod waits
for room in the cluster, said as such), a daemon killed with a pod running whose restart
leaves nothing behind, a run with `network: none` that cannot reach this machine, a run with
`network: model` that goes to its end under the policy it was given (which podman does not
enforce: it has no NetworkPolicy), an ACP agent in a pod that calls a symphony tool over MCP at
`daemon_address`, a pod that
runs under what its manifest says (the shim plays it with `podman kube play`), and the real
`codex app-server` completing a turn in a pod against a fake model on this machine.

The pods run a small Debian image with git, sh and python3 (`scripts/build-sandbox-image`),
and the scripted agent from a folder the shim mounts into every pod, or the pinned codex's
static binary mounted read-only (`npm ci --prefix tests/e2e`). Needs podman and runc
(scripts/test installs them): skipped without them, failed under SYMPHONY_REQUIRE_SANDBOX=1.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from symphony.config.kubernetes import KubernetesSettings
from symphony.config.sandbox import Network
from symphony.config.sections import HooksSettings
from symphony.hosts.kubernetes.kubectl import Kubectl
from symphony.hosts.kubernetes.manifests import instance_selector, network_policy, pod_manifest
from symphony.hosts.kubernetes.pods import Pods
from symphony.hosts.kubernetes.status import pod_state
from symphony.store import Store
from symphony.workspace.pod import PodWorkspaces
from tests.e2e.conftest import CODEX_MISSING, CODEX_NATIVE, codex_command
from tests.e2e.fake_model import CallTool, FakeModel, Say, Shell, Step
from tests.harness import Board, Daemon, wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "tests" / "hosts" / "kubectl_shim"
IMAGE = "localhost/symphony-kube-test:1"
INSTANCE_LABEL = "symphony.dev/instance"


def require_podman() -> None:
    problem = None
    if shutil.which("podman") is None:
        problem = "podman is not installed (scripts/test installs podman and runc)"
    elif subprocess.run(["podman", "image", "exists", IMAGE]).returncode != 0:
        built = subprocess.run([str(REPO / "scripts" / "build-sandbox-image"), IMAGE],
                               capture_output=True, text=True, timeout=1800)  # fmt: skip
        if built.returncode != 0:
            problem = f"the pods' image could not be built: {built.stderr.strip()[-300:]}"
    if problem is None:
        return
    if os.environ.get("SYMPHONY_REQUIRE_SANDBOX"):
        pytest.fail(problem)
    pytest.skip(problem)


@dataclass
class Cluster:
    """A folder holding the shim's cluster: its kubeconfig, its state, the folder mounted in
    every pod (the scripted agent, its records) and the daemon's HOME, outside /tmp."""

    base: Path

    @property
    def shared(self) -> Path:
        return self.base / "shared"

    @property
    def kubeconfig(self) -> Path:
        return self.base / "kubeconfig.json"

    @property
    def capacity(self) -> Path:
        return self.base / "capacity"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": f"{SHIM}:{os.environ['PATH']}",
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(self.base / "home"),
            **extra,
        }

    def records(self) -> list[dict[str, Any]]:
        path = self.shared / "agents.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return [r for r in lines if r.get("_fake") == "started"]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    require_podman()
    base = REPO / ".tmp" / f"kube-{uuid.uuid4().hex[:8]}"
    for folder in ("shared", "state", "home"):
        (base / folder).mkdir(parents=True)
    shared = base / "shared"
    shared.chmod(0o777)  # the pods' user writes the agent's records there
    shutil.copy(REPO / "tests" / "fakes" / "fake_app_server.py", shared)
    lab = Cluster(base)
    lab.kubeconfig.write_text(json.dumps({
        "state": str(base / "state"), "capacity": str(lab.capacity), "mount": str(shared),
        "log": str(base / "state" / "kubectl.log"),
    }))  # fmt: skip
    try:
        yield lab
    finally:
        for pod in pods_of(lab):
            subprocess.run(["podman", "pod", "rm", "-f", "-t", "0", pod["Name"]],
                           capture_output=True)  # fmt: skip
        for volume in volumes_of(lab):
            subprocess.run(["podman", "volume", "rm", "-f", volume], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def volumes_of(lab: Cluster) -> list[str]:
    """The podman volumes of this test's cluster's claims."""
    listed = subprocess.run(
        ["podman", "volume", "ls", "--format", "{{.Name}}",
         "--filter", f"label=kubectl-shim.cluster={lab.base / 'state'}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return listed.stdout.split()


def write_workflow(board: Board, lab: Cluster, max_pods: int, **sections: Any) -> None:
    board.write_workflow(
        codex={"command": f"python3 {lab.shared / 'fake_app_server.py'}",
               "read_timeout_ms": 20_000},
        worker={"kubernetes": {"image": IMAGE, "namespace": "agents", "max_pods": max_pods},
                "ssh": {"pass_env": ["FAKE_AGENT_*"]}},
        polling_ms=300,
        **sections,
    )  # fmt: skip


def handing_off(lab: Cluster) -> dict[str, str]:
    """The environment of a scripted agent that moves its ticket to Human Review at once."""
    return lab.env(
        FAKE_AGENT_SCENARIO="tool", FAKE_AGENT_TOOL="local_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )  # fmt: skip


def pods_of(lab: Cluster) -> list[dict[str, Any]]:
    """The podman pods of this test's cluster (the shim's own label): `Name`, `Status`."""
    listed = subprocess.run(
        ["podman", "pod", "ps", "--format", "json",
         "--filter", f"label=kubectl-shim.cluster={lab.base / 'state'}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return list(json.loads(listed.stdout or "[]"))


def policies_kept_in(lab: Cluster, applied: list[dict[str, Any]]) -> Callable[[], bool]:
    """A wait condition: whether the shim has kept a NetworkPolicy it was given (podman has
    none to enforce), each one read added to `applied`."""

    def kept() -> bool:
        for path in (lab.base / "state").glob("policy-*.json"):
            with contextlib.suppress(OSError, ValueError):
                applied.append(json.loads(path.read_text()))
        return bool(applied)

    return kept


def test_three_tickets_with_max_pods_two_one_waits_and_a_pod_pending_for_room_is_no_failure(
    tmp_path: Path, cluster: Cluster
) -> None:
    lab = cluster
    lab.capacity.write_text("1")  # room for one pod: the second is Pending, Insufficient cpu
    board = Board(tmp_path)
    for n in range(1, 4):
        board.ticket(f"ABC-{n}", priority=n)
    write_workflow(board, lab, max_pods=2)
    env = lab.env(
        FAKE_AGENT_SCENARIO="slow,tool", FAKE_AGENT_DURATION_MS="1500",
        FAKE_AGENT_TOOL="local_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
        FAKE_AGENT_RECORD=str(lab.shared / "agents.jsonl"),
        DAEMON_ONLY_SECRET="tok_do_not_cross_4242",
    )  # fmt: skip
    daemon = Daemon(board, env, "--port", "0")
    peak_running, peak_pods, pending_said = 0, 0, set()
    pending_rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        url = daemon.url()

        def all_done() -> bool:
            nonlocal peak_running, peak_pods
            state = httpx.get(f"{url}api/v1/state").json()
            peak_running = max(peak_running, len(state["running"]))
            peak_pods = max(peak_pods, sum(1 for p in pods_of(lab) if p["Status"] == "Running"))
            pending_said.update(r["last_message"] for r in state["running"]
                                if (r["last_message"] or "").startswith("Pending"))  # fmt: skip
            (row,) = state["hosts"]  # the cluster, as a worker host
            if row["pending"]:
                pending_rows.append(row)
            if pending_said:
                lab.capacity.write_text("2")  # room for a second pod, once one waited
            return all(board.state_of(f"ABC-{n}") == "Human Review" for n in range(1, 4))

        assert wait_until(all_done, 120), "".join(daemon.lines)
        elapsed = time.monotonic() - started
    finally:
        assert daemon.stop() == 0
    log = "".join(daemon.lines)
    assert peak_running == 2  # max_pods: the third ticket waited for a pod
    assert pending_said == {"Pending: Insufficient cpu"}  # the wait, said as such
    row = pending_rows[0]
    assert (row["host"], row["namespace"], row["max_pods"]) == ("kubernetes", "agents", 2)
    assert row["pending_reasons"] == ["Insufficient cpu"] and row["reached"] is True
    assert "retrying" not in log, log  # no run failed
    runs = lab.records()
    assert len(runs) == 3, runs  # one run per ticket: the pending pod was not a failure
    assert sorted(r["cwd"] for r in runs) == [f"/workspace/ABC-{n}" for n in range(1, 4)]
    names = set(runs[0]["env_names"])
    assert "DAEMON_ONLY_SECRET" not in names and "FAKE_AGENT_SCENARIO" in names
    assert "SYMPHONY_ISSUE_IDENTIFIER" in names
    assert peak_pods <= 2
    # Every pod was deleted when its run ended; no secret went on a command line.
    assert wait_until(lambda: not pods_of(lab), 20), pods_of(lab)
    commands = (lab.base / "state" / "kubectl.log").read_text()
    assert "tok_do_not_cross_4242" not in commands and "FAKE_AGENT_TOOL_ARGS" not in commands
    print(f"three tickets through pods in {elapsed:.1f} s")


def test_a_daemon_killed_with_a_pod_running_leaves_nothing_behind_after_its_restart(
    tmp_path: Path, cluster: Cluster
) -> None:
    lab = cluster
    board = Board(tmp_path)
    board.ticket("ABC-1")
    write_workflow(board, lab, max_pods=2)
    env = lab.env(FAKE_AGENT_SCENARIO="hang", FAKE_AGENT_RECORD=str(lab.shared / "agents.jsonl"))
    first = Daemon(board, env)
    try:
        assert wait_until(lambda: len(lab.records()) == 1, 60), "".join(first.lines)
        first.wait_for("agent turn_started")
    finally:
        first.kill9()
    (orphan,) = [p["Name"] for p in pods_of(lab)]
    assert [p["Status"] for p in pods_of(lab)] == ["Running"]  # kill -9 left the pod running
    checked = subprocess.run(
        [sys.executable, "-m", "symphony", "check"], cwd=board.root, env={**os.environ, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    said = [line.strip() for line in checked.stdout.splitlines()]
    assert "pods          1 of this workflow's in namespace agents" in said, checked.stdout
    assert f"{orphan} (ticket ABC-1, Running): deleted at the next start: an earlier daemon's" in (
        said
    )
    second = Daemon(board, env)
    try:
        second.wait_for("deleted pods an earlier daemon left running", timeout=60)
        assert wait_until(lambda: len(lab.records()) == 2, 60), "".join(second.lines)
        assert orphan not in [p["Name"] for p in pods_of(lab)]
        assert len(pods_of(lab)) == 1  # the restarted run's own pod, and only it
    finally:
        assert second.stop() == 0
    assert wait_until(lambda: not pods_of(lab), 20), pods_of(lab)
    assert not list((lab.base / "state").glob("policy-*.json"))  # the policies went too


def test_a_run_with_network_none_cannot_reach_this_machine(
    tmp_path: Path, cluster: Cluster
) -> None:
    lab = cluster
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    here = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    board = Board(tmp_path)
    board.ticket("ABC-1")
    probe = (
        f'ls /sys/class/net > {lab.shared}/net.txt; python3 -c "import socket; '
        f"socket.create_connection(('{here}', {port}), 3)\" 2>/dev/null "
        f"&& echo reached > {lab.shared}/reach.txt || echo unreachable > {lab.shared}/reach.txt"
    )
    write_workflow(board, lab, max_pods=1, hooks={"after_create": probe},
                   sandbox={"kind": "bwrap", "network": "none"})  # fmt: skip
    env = handing_off(lab)
    daemon = Daemon(board, env)
    try:
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 60), "".join(
            daemon.lines
        )
    finally:
        assert daemon.stop() == 0
        listener.close()
    assert (lab.shared / "net.txt").read_text().split() == ["lo"]
    assert (lab.shared / "reach.txt").read_text().strip() == "unreachable"


def test_a_run_with_network_model_runs_to_the_end_under_its_resolved_policy(
    tmp_path: Path, cluster: Cluster
) -> None:
    """The daemon resolves `allow_hosts` into the pod's policy and the run goes to its end. The
    shim has no NetworkPolicy to enforce (podman has none): it leaves a model pod on podman's
    network, so what the policy lets out is checked as applied, never as enforced here."""
    lab = cluster
    board = Board(tmp_path)
    board.ticket("ABC-1")
    write_workflow(board, lab, max_pods=1, hooks={"after_create": "sleep 2"},
                   sandbox={"kind": "bwrap", "network": "model",
                            "allow_hosts": ["localhost:8443"]})  # fmt: skip
    env = handing_off(lab)
    applied: list[dict[str, Any]] = []
    policy_applied = policies_kept_in(lab, applied)

    daemon = Daemon(board, env)
    try:
        assert wait_until(policy_applied, 60), "".join(daemon.lines)
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 60), "".join(
            daemon.lines
        )
        assert wait_until(lambda: not pods_of(lab), 30), pods_of(lab)
    finally:
        assert daemon.stop() == 0
    dns, *hosts = applied[0]["spec"]["egress"]
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert {"to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}],
            "ports": [{"protocol": "TCP", "port": 8443}]} in hosts  # fmt: skip
    assert all(rule["ports"] == [{"protocol": "TCP", "port": 8443}] for rule in hosts)
    log = "".join(daemon.lines)
    assert 'event="worker done"' in log and "retrying" not in log, log


def test_the_real_codex_in_a_pod_completes_a_turn_against_a_model_on_this_machine(
    tmp_path: Path, cluster: Cluster
) -> None:
    """The pinned `codex app-server` (its static binary, mounted read-only at /opt/codex) runs
    in the pod with its home under /home/agent and reaches a fake model served here, as the
    pod's network (`full`) lets it: podman names this machine `host.containers.internal`."""
    if CODEX_NATIVE is None:
        if os.environ.get("CI"):
            pytest.fail(CODEX_MISSING)
        pytest.skip(CODEX_MISSING)
    lab = cluster
    config = json.loads(lab.kubeconfig.read_text())
    config["read_only"] = {"/opt/codex": str(CODEX_NATIVE.parents[1])}
    lab.kubeconfig.write_text(json.dumps(config))
    board = Board(tmp_path)
    board.ticket("ABC-1", title="Say where you run")
    steps: list[Step] = [
        Shell('printf "%s %s\\n" "$(pwd)" "$(id -u)" > where.txt'),
        CallTool("local_move_issue", {"state": "Human Review"}),
        Say("ABC-1 is ready for review"),
    ]
    with FakeModel(steps, host="0.0.0.0") as model:
        codex = codex_command(
            f"http://host.containers.internal:{model.port}/v1", codex=Path("/opt/codex/bin/codex")
        )
        home = "/home/agent/.codex"
        board.write_workflow(
            codex={"command": f"mkdir -p {home} && PATH=/opt/codex/codex-path:$PATH "
                              f"CODEX_HOME={home} RUST_LOG=warn exec {codex}",
                   "approval_policy": "never", "read_timeout_ms": 60_000,
                   "turn_timeout_ms": 120_000},
            worker={"kubernetes": {"image": IMAGE, "namespace": "agents", "max_pods": 1}},
            sandbox={"kind": "bwrap", "network": "full"},
            # The workspace ends with the pod: what the agent left is copied out first.
            hooks={"after_run": f"cp where.txt {lab.shared} && ls {home} > {lab.shared}/home.txt"},
            polling_ms=300,
        )  # fmt: skip
        daemon = Daemon(board, lab.env())
        try:
            assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 120), "".join(
                daemon.lines
            )
            assert wait_until(lambda: not pods_of(lab), 30), pods_of(lab)  # the run is over
        finally:
            assert daemon.stop() == 0
    log = "".join(daemon.lines)
    assert model.script_errors == [] and model.unexpected_requests == []
    first = model.requests[0]
    assert "Work on ABC-1:" in first.prompt and "Say where you run" in first.prompt
    assert first.headers["host"] == f"host.containers.internal:{model.port}"
    assert len(model.requests) == 3  # the command's output, then the move's, came back
    moved = json.loads(model.requests[-1].tool_outputs()[-1])
    assert moved["state"] == "Human Review" and moved["changed"] is True
    # The shell command codex ran was in the pod's workspace, as the pod's user.
    assert (lab.shared / "where.txt").read_text() == "/workspace/ABC-1 10001\n"
    assert "sessions" in (lab.shared / "home.txt").read_text().split()  # its CODEX_HOME
    assert 'event="turn completed"' in log and "retrying" not in log, log
    assert 'event="worker done"' in log and 'reason="state is now Human Review"' in log, log


def shim(lab: Cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The shim's `kubectl -n agents ARGS`, as the daemon runs it."""
    argv = [str(SHIM / "kubectl"), "-n", "agents", *args]
    env = {**os.environ, **lab.env()}
    return subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True)


# What the pod's process is allowed, as it sees it: user, capabilities, no_new_privs, the root
# mount's options, which volumes it may write, its memory and cpu limits (cgroup v1 or v2), any
# service-account token or service variable.
PROBE = r"""
echo "ids $(id -u) $(id -g)"
grep -E '^(CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
echo "root $(awk '$2 == "/" {split($4, o, ","); print o[1]}' /proc/mounts | tail -1)"
for d in / /workspace /home/agent /tmp; do
  if touch "$d/probe" 2>/dev/null; then echo "writes $d"; fi
done
cg=/sys/fs/cgroup; echo "memory $(cat $cg/memory.max $cg/memory/memory.limit_in_bytes 2>/dev/null)"
echo "cpu $(cat $cg/cpu.max $cg/cpu/cpu.cfs_quota_us 2>/dev/null | cut -d' ' -f1)"
ls /var/run/secrets/kubernetes.io 2>/dev/null && echo token
env | grep -c '_SERVICE_HOST=' || true
"""


def test_a_pod_runs_under_the_security_context_volumes_and_limits_of_its_manifest(
    cluster: Cluster,
) -> None:
    lab = cluster
    settings = KubernetesSettings(
        image=IMAGE, namespace="agents", resources=(("cpu", "500m"), ("memory", "512Mi"))
    )
    pod = pod_manifest(settings, "inst-1", "ABC-1", "run-1")
    name = pod["metadata"]["name"]
    listed = {"kind": "List", "items": [pod, network_policy(pod, Network.NONE)]}
    assert shim(lab, "apply", "-f", "-", stdin=json.dumps(listed)).returncode == 0
    got = shim(lab, "get", "pods", "-l", instance_selector("inst-1"), "-o", "json")
    (item,) = json.loads(got.stdout)["items"]
    assert pod_state(item).kind == "ready"
    assert item["metadata"]["labels"] == pod["metadata"]["labels"]
    said = shim(lab, "exec", name, "-c", "agent", "--", "/bin/sh", "-c", PROBE).stdout.split("\n")
    assert "ids 10001 10001" in said, said
    assert "CapBnd:\t0000000000000000" in said and "NoNewPrivs:\t1" in said
    assert "Seccomp:\t2" in said  # podman's default filter
    assert "root ro" in said
    assert [x for x in said if x.startswith("writes")] == [
        "writes /workspace", "writes /home/agent", "writes /tmp"
    ]  # fmt: skip
    assert f"memory {512 * 2**20}" in said and "cpu 50000" in said  # half a cpu per 100 ms
    assert "token" not in said and said[-2] == "0"  # no service account, no service variables
    # A manifest whose container would run as root under runAsNonRoot is refused, as the
    # kubelet refuses it (podman itself would run it).
    as_root = copy.deepcopy(pod)
    as_root["metadata"]["name"] = "as-root"
    del as_root["spec"]["securityContext"]["runAsUser"]
    del as_root["spec"]["containers"][0]["securityContext"]["runAsUser"]
    assert shim(lab, "apply", "-f", "-", stdin=json.dumps(as_root)).returncode == 0
    refused = pod_state(json.loads(shim(lab, "get", "pod", "as-root", "-o", "json").stdout))
    assert refused.kind == "failed" and "runAsNonRoot" in refused.message
    deleted = shim(lab, "delete", f"pod/{name}", "pod/as-root", f"networkpolicy/{name}")
    assert deleted.returncode == 0
    assert wait_until(lambda: not pods_of(lab), 20), pods_of(lab)
    assert json.loads(shim(lab, "get", "pods", "-l", "app.kubernetes.io/managed-by=symphony",
                           "-o", "json").stdout)["items"] == []  # fmt: skip


def test_the_pod_s_workspace_is_a_clone_of_the_repository_on_the_ticket_s_branch(
    tmp_path: Path, cluster: Cluster
) -> None:
    lab = cluster
    source = lab.base / "source"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(source)], check=True)
    (source / "README").write_text("hello\n")
    subprocess.run([*git, "-C", str(source), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "the start"], check=True)
    bare = lab.shared / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True)
    if os.geteuid() == 0:  # the pod's user clones it: git wants its own repository
        for path in [bare, *bare.rglob("*")]:
            os.chown(path, 10001, 10001)
    board = Board(tmp_path)
    board.ticket("ABC-1")
    record = (
        f"{{ git branch --show-current; git log -1 --format=%s; cat README; }} "
        f"> {lab.shared}/checkout.txt"
    )
    worktree = {"root": "workspaces", "strategy": "worktree", "repository": str(bare),
                "branch": "agent/{{ issue.identifier }}"}  # fmt: skip
    write_workflow(board, lab, max_pods=1, hooks={"after_create": record}, workspace=worktree)
    env = handing_off(lab)
    daemon = Daemon(board, env)
    try:
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 60), "".join(
            daemon.lines
        )
    finally:
        assert daemon.stop() == 0
    said = (lab.shared / "checkout.txt").read_text().splitlines()
    assert said == ["agent/ABC-1", "the start", "hello"]
    assert not (board.root / "workspaces" / "ABC-1").exists()  # nothing made on this machine


def bare_repository(lab: Cluster) -> Path:
    """A bare repository with one commit on main, at the same path here and in every pod (the
    folder the shim mounts), owned by the pods' user, who pushes to it."""
    source = lab.base / "seed"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(source)], check=True)
    (source / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run([*git, "-C", str(source), "add", "calc.py"], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "Start"], check=True)
    bare = lab.shared / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True)
    if os.geteuid() == 0:  # the pod's user clones it and pushes to it
        for path in [bare, *bare.rglob("*")]:
            os.chown(path, 10001, 10001)
    return bare


def branch_log(bare: Path, branch: str) -> list[str]:
    said = subprocess.run(
        ["git", "--git-dir", str(bare), "log", "--format=%H %an %s", f"refs/heads/{branch}"],
        capture_output=True, text=True,
    )  # fmt: skip
    return said.stdout.splitlines() if said.returncode == 0 else []


def test_a_stage_run_in_a_pod_publishes_its_branch_and_a_rework_goes_on_from_it(
    tmp_path: Path, cluster: Cluster
) -> None:
    lab = cluster
    bare = bare_repository(lab)
    shutil.copy(REPO / "examples" / "quickstart" / "demo_agent.py", lab.shared)
    board = Board(tmp_path)
    board.ticket("ABC-1", title="Let `calc.py` subtract")
    board.write_workflow(
        tracker={"kind": "local", "provider": {"path": "board"},
                 "terminal_states": ["Done", "Cancelled"]},
        codex={"command": f"python3 {lab.shared / 'demo_agent.py'}", "read_timeout_ms": 20_000},
        worker={"kubernetes": {"image": IMAGE, "namespace": "agents", "max_pods": 1},
                "ssh": {"pass_env": ["DEMO_AGENT_*"]}},
        polling_ms=300,
        prompt="Stage: {{ stage }}\nWork on {{ issue.identifier }}: {{ issue.title }}\n"
               "{% for c in comments %}{{ c.body }}\n{% endfor %}",
        workspace={"root": "workspaces", "strategy": "worktree", "repository": str(bare),
                   "base": "main", "branch": "agent/{{ issue.identifier }}"},
        stages={"implement": {
            "states": ["Todo", "Rework"], "on_success": "Human Review", "evidence": True,
            "verify": [{"name": "committed", "run": 'test -z "$(git status --porcelain)"'}],
            "publish": {"base": "main", "labels": ["agent"]},
        }},
        escalation_state="Needs Attention",
        repository={"kind": "local", "path": "pulls", "remote": str(bare)},
        follow={"interval_ms": 300, "on_changes_requested": "Rework", "on_merged": "Done"},
    )  # fmt: skip
    env = lab.env(DEMO_AGENT_DELAY_MS="0")
    daemon = Daemon(board, env, "--port", "0")
    pull_file = board.root / "pulls" / "1.md"
    try:
        url = daemon.url()
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 90), "".join(
            daemon.lines
        )
        # The review page reads the evidence and the diff the hand-off kept, the pod gone.
        review = httpx.get(f"{url}api/v1/ABC-1/review").json()
        assert review["evidence"]["workspace"]["branch"] == "agent/ABC-1", review
        merge = review["evidence"]["workspace"]["merge"]  # checked in the pod, onto its clone's
        assert merge == {"onto": "origin/main", "clean": True, "files": []}, merge
        paths = [f["path"] for f in review["diff"]["files"]]
        assert paths == ["NOTES/ABC-1.md", "calc.py"], review["diff"]
        # The pod pushed the agent's commit; the daemon opened the pull request from it.
        first = branch_log(bare, "agent/ABC-1")
        assert first and first[0].split()[1] == "symphony-demo", first
        head = first[0].split()[0]
        assert wait_until(pull_file.exists, 20)
        front = yaml.safe_load(pull_file.read_text().split("---")[1])
        assert (front["branch"], front["base"], front["state"]) == ("agent/ABC-1", "main", "open")
        assert "**Evidence** for ABC-1" in pull_file.read_text()
        assert "pull_request:" in (board.tickets / "ABC-1.md").read_text()
        assert wait_until(lambda: not pods_of(lab), 20), pods_of(lab)  # no pod held meanwhile
        # A reviewer asks for changes: the Rework run's new pod goes on from the pushed branch,
        # and its hand-off pushes on top (never forced: a fresh start would be refused).
        text = pull_file.read_text().replace("review: none", "review: changes_requested", 1)
        pull_file.write_text(text.replace('review_comment: ""', "review_comment: Subtract too.", 1))
        assert wait_until(lambda: len(branch_log(bare, "agent/ABC-1")) > len(first), 90), "".join(
            daemon.lines
        )
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 60)
    finally:
        assert daemon.stop() == 0
    log = "".join(daemon.lines)
    second = branch_log(bare, "agent/ABC-1")
    assert second[-len(first) :] == first  # the first run's commits are still there
    assert "publish_failed" not in log and "Needs Attention" not in board.state_of("ABC-1")
    assert log.count("branch pushed before the workspace ended") == 2, log
    assert head != second[0].split()[0]
    assert len(list((board.root / "pulls").glob("*.md"))) == 1  # one pull request, updated
    assert wait_until(lambda: not pods_of(lab), 20), pods_of(lab)


async def test_before_a_push_every_process_the_run_left_in_its_pod_is_ended(
    cluster: Cluster,
) -> None:
    lab = cluster
    kubectl = Kubectl(KubernetesSettings(image=IMAGE, namespace="agents"), lab.env())
    pods = Pods(kubectl, "inst-leftovers", poll_s=0.1)
    host = await pods.start("ABC-1", "run-1", Network.NONE)
    workspaces = PodWorkspaces(pods, host, HooksSettings(), env={}, ticket="ABC-1", run="run-1",
                               network=Network.NONE)  # fmt: skip
    pids = "for p in /proc/[0-9]*; do cat $p/cmdline | tr '\\0' ' '; echo; done"
    try:
        left = await host.command("setsid sleep 600 >/dev/null 2>&1 < /dev/null & echo left")
        assert left.returncode == 0 and left.out.strip() == "left"
        before = (await host.command(pids)).out
        assert "sleep 600" in before, before
        await workspaces.end_leftovers()
        after = await host.command(pids)
        assert after.returncode == 0  # the pod still runs: its waiting process was spared
        assert "sleep 600" not in after.out, after.out
    finally:
        await pods.delete(host.pod)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        port: int = sock.getsockname()[1]
        return port


def test_an_acp_agent_in_a_pod_calls_a_symphony_tool_over_mcp_at_the_daemon_address(
    tmp_path: Path, cluster: Cluster
) -> None:
    """With `daemon_address` the tool server listens where pods reach it: an ACP agent in a pod
    is given `http://<daemon_address>:<port>/mcp` with its session's token, calls
    `local_move_issue` over MCP from inside the pod, and the daemon moves the ticket. Under
    `network: none` the pod's policy lets out the daemon's two ports alone (the shim leaves a
    pod with any egress on podman's network, which reaches this machine)."""
    lab = cluster
    shutil.copy(REPO / "tests" / "fakes" / "fake_acp_agent.py", lab.shared)
    here = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    tool_port, gateway_port = free_port(), free_port()
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(
        agent={"kind": "acp"},
        acp={"command": f"python3 {lab.shared / 'fake_acp_agent.py'}", "read_timeout_ms": 20_000},
        worker={"kubernetes": {"image": IMAGE, "namespace": "agents", "max_pods": 1,
                               "daemon_address": here, "daemon_tool_port": tool_port,
                               "daemon_gateway_port": gateway_port},
                "ssh": {"pass_env": ["FAKE_ACP_*"]}},
        sandbox={"kind": "bwrap", "network": "none"},
        polling_ms=300,
    )  # fmt: skip
    record = lab.shared / "acp.jsonl"
    env = lab.env(
        FAKE_ACP_PROMPT="mcp_call:local_move_issue", FAKE_ACP_RECORD=str(record),
        FAKE_ACP_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )  # fmt: skip
    applied: list[dict[str, Any]] = []
    policy_applied = policies_kept_in(lab, applied)

    daemon = Daemon(board, env)
    try:
        assert wait_until(policy_applied, 60), "".join(daemon.lines)
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 90), "".join(
            daemon.lines
        )
        assert wait_until(lambda: not pods_of(lab), 30), pods_of(lab)
        entries = [json.loads(x) for x in record.read_text().splitlines() if x.strip()]
        (opened,) = [e for e in entries if e.get("method") == "session/new"]
        (server,) = opened["params"]["mcpServers"]
        token = server["headers"][0]["value"].removeprefix("Bearer ")
        # The run has ended: the listener beyond loopback refuses its session's token.
        refused = httpx.post(f"http://{here}:{tool_port}/mcp", json={},
                             headers={"authorization": f"Bearer {token}"})  # fmt: skip
        assert refused.status_code == 401
    finally:
        assert daemon.stop() == 0
    (called,) = [e for e in entries if "mcp_answer" in e]
    assert called["mcp_url"] == f"http://{here}:{tool_port}/mcp"  # dialled from the pod
    assert called["mcp_answer"]["result"]["isError"] is False, called
    assert len(token) > 30
    # The policy lets out the daemon's two ports at its address, and nothing else.
    assert applied[0]["spec"]["egress"] == [{
        "to": [{"ipBlock": {"cidr": f"{here}/32"}}],
        "ports": [{"protocol": "TCP", "port": p} for p in (tool_port, gateway_port)],
    }]  # fmt: skip
    log = "".join(daemon.lines)
    assert token not in log and token not in (lab.base / "state" / "kubectl.log").read_text()


def move(board: Board, identifier: str, state: str) -> None:
    """A person moves the ticket on the local board."""
    path = board.tickets / f"{identifier}.md"
    front, body = path.read_text().split("---", 2)[1:]
    data = yaml.safe_load(front)
    data["state"] = state
    path.write_text(f"---\n{yaml.safe_dump(data, sort_keys=False)}---{body}")


def claim(lab: Cluster, name: str) -> dict[str, Any] | None:
    got = shim(lab, "get", "pvc", name, "-o", "json", "--ignore-not-found")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout) if got.stdout.strip() else None


def test_a_ticket_s_claim_is_kept_between_its_runs_and_deleted_once_it_is_done(
    tmp_path: Path, cluster: Cluster
) -> None:
    """`workspace: pvc:ws`: the daemon makes ABC-1's claim with its first run; its second run
    (the ticket moved back to Todo) mounts it and finds the checkout on its branch, with the
    commit and the file the first run left there (nothing was pushed: only the claim held
    them); moved to Done, the claim is deleted. ABC-2's claim, made by a person beforehand,
    is mounted as it is and left alone."""
    lab = cluster
    bare = bare_repository(lab)
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.ticket("ABC-2")
    theirs = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
              "metadata": {"name": "ws-abc-2", "namespace": "agents", "labels": {"team": "qa"}},
              "spec": {"accessModes": ["ReadWriteOnce"],
                       "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    assert shim(lab, "apply", "-f", "-", stdin=json.dumps(theirs)).returncode == 0
    record = (
        f"{{ git branch --show-current; git log --format=%s; cat left.txt 2>/dev/null "
        f'|| echo "nothing left"; echo ---; }} >> {lab.shared}/runs-"$(basename "$PWD")".txt; '
        'test -f left.txt || { echo "left by the first run" > left.txt && '
        'git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m "first run"; }'
    )
    board.write_workflow(
        codex={"command": f"python3 {lab.shared / 'fake_app_server.py'}",
               "read_timeout_ms": 20_000},
        worker={"kubernetes": {"image": IMAGE, "namespace": "agents", "max_pods": 2,
                               "workspace": "pvc:ws", "workspace_size": "1Gi"},
                "ssh": {"pass_env": ["FAKE_AGENT_*"]}},
        workspace={"root": "workspaces", "strategy": "worktree", "repository": str(bare),
                   "base": "main", "branch": "agent/{{ issue.identifier }}"},
        hooks={"after_create": record},
        polling_ms=300,
    )  # fmt: skip
    env = handing_off(lab)
    runs = lab.shared / "runs-ABC-1.txt"
    daemon = Daemon(board, env)
    try:
        reviewed = lambda: all(board.state_of(t) == "Human Review" for t in ("ABC-1", "ABC-2"))  # noqa: E731
        assert wait_until(reviewed, 90), "".join(daemon.lines)
        ours = claim(lab, "ws-abc-1")
        assert ours is not None, "".join(daemon.lines)
        assert wait_until(lambda: not pods_of(lab), 30), pods_of(lab)
        move(board, "ABC-1", "Todo")  # a second run of the ticket, in a new pod
        assert wait_until(lambda: runs.exists() and runs.read_text().count("---") == 2, 90), (
            "".join(daemon.lines)
        )
        assert wait_until(lambda: board.state_of("ABC-1") == "Human Review", 60)
        assert wait_until(lambda: not pods_of(lab), 30), pods_of(lab)
        checked = subprocess.run(
            [sys.executable, "-m", "symphony", "check"], cwd=board.root,
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        said = [line.strip() for line in checked.stdout.splitlines()]
        assert "claims        1 of this workflow's in namespace agents" in said, checked.stdout
        assert "ws-abc-1 (ticket ABC-1, Human Review, Bound): kept" in said, checked.stdout
        move(board, "ABC-1", "Done")
        move(board, "ABC-2", "Done")
        assert wait_until(lambda: claim(lab, "ws-abc-1") is None, 30), "".join(daemon.lines)
        daemon.wait_for("was not made by this workflow: kept", timeout=30)
    finally:
        assert daemon.stop() == 0
    first, second = runs.read_text().split("---\n")[:2]
    assert first.splitlines() == ["agent/ABC-1", "Start", "nothing left"]
    # The claim's checkout went on: the same branch, the first run's commit and file.
    assert second.splitlines() == ["agent/ABC-1", "first run", "Start", "left by the first run"]
    assert branch_log(bare, "agent/ABC-1") == []  # nothing was pushed: the claim held it all
    labels = ours["metadata"]["labels"]
    store = Store.read_only(board.root / ".symphony" / "state.db")
    assert store is not None
    try:
        workflow = store.workflow_id()
    finally:
        store.close()
    assert labels == {
        "app.kubernetes.io/managed-by": "symphony",
        "symphony.dev/workflow": workflow,
        "symphony.dev/ticket": "ABC-1",
    }
    assert ours["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
    assert "storageClassName" not in ours["spec"]  # the cluster's default class
    # The person's claim is as they made it, its volume still there; ABC-1's volume is gone.
    left = claim(lab, "ws-abc-2")
    assert left is not None and left["metadata"]["labels"] == {"team": "qa"}
    assert wait_until(lambda: len(volumes_of(lab)) == 1, 30), volumes_of(lab)
    assert (lab.shared / "runs-ABC-2.txt").read_text().splitlines()[0] == "agent/ABC-2"

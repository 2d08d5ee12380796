"""Agents on SSH worker hosts, through the real CLI against real sshd servers on 127.0.0.1
(`tests/hosts/sshd.py`): tickets spread over two hosts by capacity, workspaces, hooks and
gates on the host, a host that dies mid-run (its run fails with the reason and retries there
once it is back, after being marked down meanwhile), a stall that kills the agent's whole
process group on the host, and an environment that carries nothing of the daemon's but what
`pass_env` names."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from symphony.config.sandbox import SandboxKind
from tests.harness import Board, Daemon, is_alive, wait_until
from tests.hosts.sandbox_lab import require_sandbox
from tests.hosts.sshd import REPO, SshLab

pytestmark = pytest.mark.slow

AGENTS = ("tests/fakes/fake_app_server.py", "examples/quickstart/demo_agent.py")


@pytest.fixture(scope="module")
def lab() -> Iterator[SshLab]:
    lab = SshLab()
    # The remote user runs copies of the scripted agents it can read.
    for agent in AGENTS:
        shutil.copy(REPO / agent, lab.base / Path(agent).name)
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def fresh(lab: SshLab) -> Iterator[SshLab]:
    """Both hosts up, their workspace roots and the shared folder empty."""
    for name, server in lab.servers.items():
        if server.proc is None:
            lab.start(name)
        for child in server.workspace_root.iterdir():
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()
    for child in lab.shared.iterdir():
        child.unlink()
    yield lab


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def started(path: Path) -> list[dict[str, Any]]:
    return [r for r in records(path) if r.get("_fake") == "started"]


def worker_section(lab: SshLab, hosts: list[Any]) -> dict[str, Any]:
    return {
        "ssh_hosts": hosts,
        "ssh": {
            "config_file": str(lab.ssh_config),
            "connect_timeout_s": 5,
            "pass_env": ["FAKE_AGENT_*", "DEMO_AGENT_*"],
            "max_failures": 2,
            "cooloff_s": 2,
        },
    }


def write_workflow(board: Board, lab: SshLab, hosts: list[Any], **sections: Any) -> None:
    board.write_workflow(
        codex={
            "command": f"{lab.python()} {lab.base / 'fake_app_server.py'}",
            "read_timeout_ms": 10_000,
        },
        worker=worker_section(lab, hosts),
        polling_ms=300,
        **sections,
    )


def shared_connections(pid: int) -> list[str]:
    """The ssh connection masters a daemon process left running (their control sockets are
    in its `symphony-ssh-mux-` folder; the daemon's pid is not in their name, so any)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if "symphony-ssh-mux-" in line and "[mux]" in line:
                    found.append(line)
    return found


def host_of(record: dict[str, Any], lab: SshLab) -> str:
    return next(
        name
        for name, server in lab.servers.items()
        if record["cwd"].startswith(str(server.workspace_root))
    )


def test_tickets_spread_over_two_hosts_by_capacity_with_hooks_there_and_no_daemon_secrets(
    tmp_path: Path, fresh: SshLab
) -> None:
    lab = fresh
    board = Board(tmp_path)
    for n in range(1, 5):
        board.ticket(f"ABC-{n}", priority=n)
    hosts = [
        {"host": "w1", "max_agents": 1, "workspace_root": str(lab.servers["w1"].workspace_root)},
        {"host": "w2", "max_agents": 1, "workspace_root": str(lab.servers["w2"].workspace_root)},
    ]
    hook = 'id -un > created-by.txt; echo "$SYMPHONY_ISSUE_IDENTIFIER" > id.txt'
    write_workflow(board, lab, hosts, hooks={"after_create": hook})
    record = lab.shared / "agents.jsonl"
    env = {
        "FAKE_AGENT_SCENARIO": "slow,tool",
        "FAKE_AGENT_DURATION_MS": "1500",
        "FAKE_AGENT_TOOL": "local_move_issue",
        "FAKE_AGENT_TOOL_ARGS": json.dumps({"state": "Human Review"}),
        "FAKE_AGENT_RECORD": str(record),
        "DAEMON_ONLY_SECRET": "tok_do_not_cross_4242",
    }
    daemon = Daemon(board, env, "--port", "0")
    try:
        url = daemon.url()
        peak: dict[str, int] = {}

        def all_done() -> bool:
            state = httpx.get(f"{url}api/v1/state").json()
            for row in state["hosts"]:
                peak[row["host"]] = max(peak.get(row["host"], 0), row["running"])
            return all(board.state_of(f"ABC-{n}") == "Human Review" for n in range(1, 5))

        assert wait_until(all_done, 60), "".join(daemon.lines)
        hosts_row = httpx.get(f"{url}api/v1/state").json()["hosts"]
        metrics = httpx.get(f"{url}metrics").text
    finally:
        assert daemon.stop() == 0
    # The connection symphony's own commands shared with each host ended with the daemon.
    assert wait_until(lambda: not shared_connections(daemon.proc.pid), 5), shared_connections(
        daemon.proc.pid
    )
    runs = started(record)
    by_host = {name: [r for r in runs if host_of(r, lab) == name] for name in lab.servers}
    assert len(by_host["w1"]) >= 1 and len(by_host["w2"]) >= 1, runs  # both hosts worked
    assert peak == {"w1": 1, "w2": 1}  # never more than a host's max_agents
    assert {row["host"] for row in hosts_row} == {"w1", "w2"}
    assert all(row["status"] == "up" and row["capacity"] == 1 for row in hosts_row)
    assert 'symphony_host_up{host="w1"} 1' in metrics
    for n in range(1, 5):
        identifier = f"ABC-{n}"
        where = [
            s.workspace_root / identifier
            for s in lab.servers.values()
            if (s.workspace_root / identifier).is_dir()
        ]
        assert len(where) == 1, identifier  # made on exactly one host, by the hook there
        assert (where[0] / "created-by.txt").read_text().strip() == lab.user
        assert (where[0] / "id.txt").read_text().strip() == identifier
    assert not (board.root / "workspaces").exists()  # nothing was made on this machine
    # The agent's environment: the host's basics, what pass_env names, symphony's own.
    names = set(runs[0]["env_names"])
    assert "DAEMON_ONLY_SECRET" not in names and "FAKE_AGENT_SCENARIO" in names
    assert "SYMPHONY_ISSUE_IDENTIFIER" in names and "SSH_CONNECTION" not in names
    assert runs[0]["cwd"].startswith(str(lab.base))


def test_a_host_that_dies_mid_run_fails_the_run_and_it_retries_there_once_back(
    tmp_path: Path, fresh: SshLab
) -> None:
    lab = fresh
    board = Board(tmp_path)
    board.ticket("ABC-1")
    root = str(lab.servers["w1"].workspace_root)
    write_workflow(
        board, lab, [{"host": "w1", "workspace_root": root}],
        agent={"max_retry_backoff_ms": 500},
    )  # fmt: skip
    record = lab.shared / "agents.jsonl"
    env = {"FAKE_AGENT_SCENARIO": "hang", "FAKE_AGENT_RECORD": str(record)}
    daemon = Daemon(board, env, "--port", "0")
    try:
        url = daemon.url()
        assert wait_until(lambda: len(started(record)) == 1, 30), "".join(daemon.lines)
        daemon.wait_for("agent turn_started")
        lab.kill("w1")
        (failed,) = daemon.wait_for("event=failed", timeout=30)
        assert "lost the connection to w1" in failed
        # Retries cannot connect: after max_failures (2) the host is marked down.
        daemon.wait_for("host marked down", timeout=30)
        hosts = httpx.get(f"{url}api/v1/state").json()["hosts"]
        assert hosts[0]["status"] == "down" and hosts[0]["error"]
        assert 'symphony_host_up{host="w1"} 0' in httpx.get(f"{url}metrics").text
        lab.start("w1")
        assert wait_until(lambda: len(started(record)) == 2, 40), "".join(daemon.lines)
    finally:
        assert daemon.stop() == 0
    first, second = started(record)
    assert first["cwd"] == second["cwd"] == f"{root}/ABC-1"  # back on the host with its workspace


def test_a_stalled_agent_is_stopped_with_its_whole_process_group_on_the_host(
    tmp_path: Path, fresh: SshLab
) -> None:
    lab = fresh
    board = Board(tmp_path)
    board.ticket("ABC-1")
    write_workflow(
        board, lab, [{"host": "w2", "workspace_root": str(lab.servers["w2"].workspace_root)}],
    )  # fmt: skip
    text = board.workflow.read_text()
    config = yaml.safe_load(text.split("---")[1])
    config["codex"]["stall_timeout_ms"] = 1500
    board.workflow.write_text(f"---\n{yaml.safe_dump(config)}---\n{text.split('---', 2)[2]}")
    record = lab.shared / "agents.jsonl"
    env = {
        "FAKE_AGENT_SCENARIO": "hang",
        "FAKE_AGENT_RECORD": str(record),
        "FAKE_AGENT_SPAWN_CHILD": "1",
        "FAKE_AGENT_IGNORE_EOF": "1",
        "FAKE_AGENT_IGNORE_SIGTERM": "1",
    }
    daemon = Daemon(board, env)
    try:
        assert wait_until(lambda: any(r.get("_fake") == "child" for r in records(record)), 30), (
            "".join(daemon.lines)
        )
        pids = [started(record)[0]["pid"]] + [
            r["pid"] for r in records(record) if r.get("_fake") == "child"
        ]
        assert all(is_alive(pid) for pid in pids)
        daemon.wait_for("stopping run", timeout=30)
        # Deaf to SIGTERM and to its closed stdin, agent and child still end: the group is
        # killed on the host, not only the ssh client here.
        assert wait_until(lambda: not any(is_alive(pid) for pid in pids), 20), pids
    finally:
        assert daemon.stop() == 0


def test_gates_run_on_the_host_in_the_ticket_s_workspace(tmp_path: Path, fresh: SshLab) -> None:
    from tests.stage_flow import StageBoard

    lab = fresh
    board = StageBoard(tmp_path)
    board.ticket("DEMO-1", state="Ready")
    root = str(lab.servers["w1"].workspace_root)
    gate = {"name": "on-host", "run": "id -un > gate-user.txt && test -f NOTES/DEMO-1.md"}
    board.write_workflow(implement={"verify": [gate]})
    config = yaml.safe_load(board.workflow.read_text().split("---")[1])
    config["codex"] = {
        "command": f"{lab.python()} {lab.base / 'demo_agent.py'}",
        "read_timeout_ms": 10_000,
    }
    config["worker"] = worker_section(lab, [{"host": "w1", "workspace_root": root}])
    config["polling"] = {"interval_ms": 300}
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
    daemon = Daemon(board, {"DEMO_AGENT_DELAY_MS": "0"})
    try:
        assert wait_until(lambda: board.state_of("DEMO-1") == "Human Review", 60), "".join(
            daemon.lines
        )
    finally:
        assert daemon.stop() == 0
    workspace = Path(root) / "DEMO-1"
    assert (workspace / "gate-user.txt").read_text().strip() == lab.user
    assert (workspace / "NOTES" / "DEMO-1.md").is_file()  # the agent worked there too
    assert "| on-host |" in board.text("DEMO-1")  # and the hand-off's evidence says so


async def test_a_remote_ticket_s_evidence_and_footprint_are_what_git_says_on_the_host(
    tmp_path: Path, fresh: SshLab
) -> None:
    from tests.stage_flow import StageBoard, StageRun

    lab = fresh
    board = StageBoard(tmp_path)
    board.ticket("DEMO-1", state="Ready")
    root = str(lab.servers["w1"].workspace_root)
    # A repository with one commit, made by the hook on the host; the agent commits its notes
    # and leaves one file uncommitted.
    hook = (
        "git init -q && echo base > README && git add README && "
        "git -c user.name=t -c user.email=t@example.com commit -q -m start"
    )
    gate = {"name": "leave-one", "run": "echo draft > draft.txt"}
    board.write_workflow(
        implement={"verify": [gate], "evidence": True}, hooks={"after_create": hook}
    )
    config = yaml.safe_load(board.workflow.read_text().split("---")[1])
    config["codex"] = {
        "command": f"{lab.python()} {lab.base / 'demo_agent.py'}",
        "read_timeout_ms": 10_000,
    }
    config["worker"] = worker_section(lab, [{"host": "w1", "workspace_root": root}])
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
    run = StageRun(board.workflow, {"DEMO_AGENT_DELAY_MS": "0"}, timeout=60)
    try:
        await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Human Review")
        footprint = run.orchestrator.state.footprints["DEMO-1"]
        run.orchestrator.request_refresh()  # the review page reads what the last poll saw
        await run.until(lambda: run.orchestrator.board.row("DEMO-1") is not None)
        review = await run.orchestrator.view.review_detail("DEMO-1")
    finally:
        await run.stop()
    workspace = f"{root}/DEMO-1"

    def on_host(*args: str) -> str:
        done = subprocess.run(
            ["ssh", "-F", str(lab.ssh_config), "-o", "BatchMode=yes", "w1",
             shlex.join(["git", "-C", workspace, *args])],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return done.stdout

    start = on_host("rev-list", "--max-parents=0", "HEAD").strip()
    commits = on_host("log", "--format=%h %s", f"{start}..HEAD").splitlines()
    stat = on_host("diff", "--stat", f"{start}...HEAD").rstrip()
    changed = set(on_host("diff", "--name-only", f"{start}...HEAD").split())
    assert commits and stat
    text = board.text("DEMO-1")
    assert "— symphony · evidence" in text
    for commit in commits:
        assert f"- {commit}" in text, text
    assert stat.splitlines()[-1].strip() in text
    assert "Not committed: 1 path." in text  # draft.txt, as `git status` there has it
    assert footprint.changed == frozenset({*changed, "draft.txt"})
    # The review page reads the evidence and the diff on the host too.
    assert review is not None and review["workspace_host"] == "w1"
    assert review["evidence"]["workspace"]["commits"] == [c for c in commits]
    assert {f["path"] for f in review["diff"]["files"]} == changed
    assert review["open_command"].startswith("ssh -t w1 ")
    assert (Path(workspace) / ".symphony" / "evidence.json").is_file()


def test_a_restart_after_kill_9_ends_what_the_old_daemon_left_running_on_the_host(
    tmp_path: Path, fresh: SshLab
) -> None:
    lab = fresh
    board = Board(tmp_path)
    board.ticket("ABC-1")
    write_workflow(
        board, lab, [{"host": "w1", "workspace_root": str(lab.servers["w1"].workspace_root)}]
    )
    record = lab.shared / "agents.jsonl"
    env = {
        "FAKE_AGENT_SCENARIO": "hang",
        "FAKE_AGENT_RECORD": str(record),
        "FAKE_AGENT_IGNORE_EOF": "1",  # it would outlive its connection
    }
    first = Daemon(board, env)
    try:
        assert wait_until(lambda: len(started(record)) == 1, 30), "".join(first.lines)
        first.wait_for("agent turn_started")
        first.kill9()
    finally:
        first.proc.kill()
    old = started(record)[0]["pid"]
    assert is_alive(old)
    second = Daemon(board, env)
    try:
        (line,) = second.wait_for("stopped agents an earlier daemon left running", timeout=30)
        assert "host=w1" in line
        assert wait_until(lambda: not is_alive(old), 10)
        assert wait_until(lambda: len(started(record)) == 2, 30)  # the run goes on, anew
        log = "".join(second.lines)
        assert log.index("stopped agents an earlier daemon") < log.index("event=dispatching")
    finally:
        assert second.stop() == 0


def test_the_dashboard_shows_each_host_with_its_load(tmp_path: Path, fresh: SshLab) -> None:
    from playwright.sync_api import expect

    from tests.observability.test_dashboard_browser import _page

    lab = fresh
    board = Board(tmp_path)
    board.ticket("ABC-1")
    hosts = [
        {"host": name, "max_agents": 2, "workspace_root": str(server.workspace_root)}
        for name, server in lab.servers.items()
    ]
    write_workflow(board, lab, hosts)
    record = lab.shared / "agents.jsonl"
    daemon = Daemon(
        board, {"FAKE_AGENT_SCENARIO": "hang", "FAKE_AGENT_RECORD": str(record)}, "--port", "0"
    )
    try:
        url = daemon.url()
        assert wait_until(lambda: len(started(record)) == 1, 30), "".join(daemon.lines)
        busy = host_of(started(record)[0], lab)
        with _page("dashboard-hosts", 900) as page:
            page.goto(url)
            expect(page.locator("#hosts-section")).to_be_visible()
            expect(page.locator("#hosts tbody tr")).to_have_count(2)
            row = page.locator(f'#hosts tr[data-host="{busy}"]')
            expect(row).to_contain_text("up")
            expect(row).to_contain_text("1 / 2")
    finally:
        assert daemon.stop() == 0


@pytest.mark.parametrize("kind", ["bwrap", "podman"])
def test_a_sandbox_on_a_host_keeps_a_hostile_agent_and_its_hooks_in_their_workspace(
    tmp_path: Path, fresh: SshLab, kind: str
) -> None:
    require_sandbox(SandboxKind(kind))
    lab = fresh
    board = Board(tmp_path)
    board.ticket("ABC-1")
    root = lab.servers["w1"].workspace_root
    other = root / "ABC-9"
    other.mkdir()
    (other / "secret.txt").write_text("another ticket's work")
    other.chmod(0o777)
    (other / "secret.txt").chmod(0o666)
    probes = {
        "read": [str(other / "secret.txt"), str(lab.base / "user_key")],
        "write": [str(lab.shared / "escaped.txt"), str(other / "pwned")],
        "leave": f"ssh-sandbox-leftover-{os.getpid()}",
    }
    # Where the agent's program lives on the host is mounted read-only: a folder of its own
    # (the lab's base folder holds the workspace roots, which a sandbox never mounts).
    programs = lab.base / "programs"
    programs.mkdir(exist_ok=True)
    programs.chmod(0o755)
    shutil.copy(REPO / AGENTS[0], programs / "fake_app_server.py")
    board.write_workflow(
        worker=worker_section(lab, [{"host": "w1", "workspace_root": str(root)}]),
        polling_ms=300,
        agent={"max_turns": 1},
        codex={"command": f"{lab.python()} {programs / 'fake_app_server.py'}",
               "read_timeout_ms": 10_000},
        hooks={"after_create": 'echo "$SYMPHONY_SANDBOX" > hook.txt; ls -A "$HOME" >> hook.txt'},
        sandbox={"kind": kind, "network": "none"},
    )  # fmt: skip
    env = {"FAKE_AGENT_SCENARIO": "probe", "FAKE_AGENT_PROBES": json.dumps(probes)}
    daemon = Daemon(board, env)
    workspace = root / "ABC-1"
    try:
        assert wait_until(lambda: (workspace / "probe.json").exists(), 60), "".join(daemon.lines)
    finally:
        daemon.stop()
    results = json.loads((workspace / "probe.json").read_text())
    for attempt, outcome in results.items():
        if attempt.startswith("read"):
            assert outcome != "ok", f"{attempt} succeeded inside the host's sandbox"
    assert not (lab.shared / "escaped.txt").exists() and not (other / "pwned").exists()
    # The hook ran in the sandbox too, with an empty home.
    assert (workspace / "hook.txt").read_text().splitlines() == [kind]
    leftover = probes["leave"]
    assert wait_until(lambda: not _running(leftover), 10), f"{leftover} outlived the run"


def _running(marker: str) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[0] == marker.encode():
                    return True
            except OSError:
                pass
    return False


async def test_the_group_kill_works_where_the_hosts_sh_is_dash(fresh: SshLab) -> None:
    """Only the group kill can end these: nothing of them carries the run's mark. Debian's
    /bin/sh (dash, as on this machine's hosts) refuses `kill -TERM -- -PGID`."""
    from symphony.config.sections import HostSpec, SshSettings
    from symphony.hosts.ssh import SshHost

    assert Path("/bin/sh").resolve().name == "dash"
    server = fresh.servers["w1"]
    host = SshHost(HostSpec("w1", workspace_root=str(server.workspace_root)),
                   SshSettings(config_file=fresh.ssh_config), dict(os.environ),
                   str(server.workspace_root))  # fmt: skip
    started = await host.command(
        "setsid sh -c 'trap \"\" TERM; sleep 300 & sleep 300 & wait' </dev/null >/dev/null 2>&1 &"
        " echo $!"
    )
    pgid = int(started.out.strip())

    def group_alive() -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True

    assert wait_until(group_alive, 5)
    await host.end_group(pgid, 1.0, None)
    assert wait_until(lambda: not group_alive(), 10), f"group {pgid} survived"


async def test_the_users_ssh_settings_decide_about_an_unknown_host_key(
    fresh: SshLab, tmp_path: Path
) -> None:
    """With `worker.ssh.strict_host_key_checking` unset, an ssh config's `accept-new` and an
    empty known_hosts let runs start (and learn the key); without it ssh refuses, in its words."""
    from symphony.config.sections import HostSpec, SshSettings
    from symphony.hosts.ssh import SshHost

    server = fresh.servers["w1"]
    lines = fresh.ssh_config.read_text().replace(str(fresh.base / "known_hosts"),
                                                 str(tmp_path / "known_hosts"))  # fmt: skip

    def host(config: str) -> SshHost:
        path = tmp_path / "ssh_config"
        path.write_text(config)
        return SshHost(HostSpec("w1", workspace_root=str(server.workspace_root)),
                       SshSettings(config_file=path), dict(os.environ), "/x")  # fmt: skip

    (tmp_path / "known_hosts").write_text("")
    refused = await host(lines).command("echo reached")
    assert refused.returncode != 0 and "Host key verification failed" in refused.err
    accept_new = lines.replace("Host w1\n", "Host w1\n  StrictHostKeyChecking accept-new\n")
    accepting = await host(accept_new).command("echo reached")
    assert accepting.returncode == 0 and accepting.out.strip() == "reached", accepting.err
    assert (tmp_path / "known_hosts").read_text().strip()  # the key was learned

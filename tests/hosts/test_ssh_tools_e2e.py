"""Agents that take symphony's tools over MCP, on SSH worker hosts: the real `claude` binary and
the real ACP adapter (against the fake Anthropic API) run on a host of the real sshd lab and
report their stage through the daemon's tool server, forwarded to the host's loopback over the
run's own connection; the forward ends with the run; a host whose sshd forbids forwarding fails
the run with that reason, and `symphony check` says so for that host."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.hosts.ssh import FORWARD_PORTS
from tests.e2e.conftest import CLAUDE_BIN, E2E_DIR, processes_using
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.harness import Board, Daemon, wait_until
from tests.hosts.sshd import SshLab
from tests.stage_flow import two_stages

pytestmark = pytest.mark.slow

ADAPTER = E2E_DIR / "node_modules" / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"
REPORT_PLAN = json.dumps({"outcome": "done", "summary": "Planned.", "plan": "1. Do it there."})
PLAN_PROMPT = (
    "Plan {{ issue.identifier }}. "
    f"<<tool mcp__symphony__report_outcome {REPORT_PLAN}>> <<text The plan is reported.>>"
)


@pytest.fixture(scope="module")
def lab() -> Iterator[SshLab]:
    if not os.access(CLAUDE_BIN, os.X_OK) or not ADAPTER.exists():
        message = "claude or the ACP adapter is not installed; run npm ci --prefix tests/e2e"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    lab = SshLab(("w1", "w2", "w3"), sshd_options={"w3": "AllowTcpForwarding no\n"})
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def claude_config(lab: SshLab, tmp_path: Path) -> Iterator[Path]:
    """A CLAUDE_CONFIG_DIR the host's user owns; no process that names it outlives the test."""
    folder = lab.base / f"claude-{tmp_path.name}"
    folder.mkdir()
    os.chown(folder, lab.uid, -1)
    yield folder
    assert wait_until(lambda: not processes_using(folder, "CLAUDE_CONFIG_DIR"), 15), (
        processes_using(folder, "CLAUDE_CONFIG_DIR")
    )


def write_workflow(board: Board, lab: SshLab, host: str, agent: str) -> Path:
    root = lab.servers[host].workspace_root / board.root.name
    root.mkdir()
    os.chown(root, lab.uid, -1)
    config: dict[str, Any] = {
        "tracker": {"kind": "local", "provider": {"path": "board"}},
        "polling": {"interval_ms": 60_000},
        "workspace": {"root": "workspaces"},
        "agent": {"max_retry_backoff_ms": 1000},
        "claude": {"command": str(CLAUDE_BIN), "model": "claude-sonnet-4-5"},
        "acp": {"command": f"node {ADAPTER}", "read_timeout_ms": 30_000},
        "stages": two_stages(plan={"agent": agent, "prompt": PLAN_PROMPT}),
        "escalation_state": "Needs Attention",
        "worker": {
            "ssh_hosts": [{"host": host, "workspace_root": str(root)}],
            "ssh": {
                "config_file": str(lab.ssh_config),
                "connect_timeout_s": 5,
                "pass_env": ["ANTHROPIC_*", "CLAUDE_CONFIG_DIR"],
            },
        },
    }
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
    return root


def loopback_listeners() -> set[int]:
    """The ports in the forward range that something listens on at 127.0.0.1 (the hosts of
    the lab are this machine)."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port = local.split(":")
        if state == "0A" and address == "0100007F" and int(port, 16) in FORWARD_PORTS:
            ports.add(int(port, 16))
    return ports


@pytest.mark.parametrize(("agent", "host"), [("claude", "w1"), ("acp", "w2")])
def test_an_agent_on_a_host_reports_its_stage_through_the_forwarded_tool_server(
    tmp_path: Path, lab: SshLab, claude_config: Path, agent: str, host: str
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    root = write_workflow(board, lab, host, agent)
    before = loopback_listeners()
    with FakeAnthropic() as anthropic:
        env = {
            "ANTHROPIC_BASE_URL": anthropic.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-fake-key",
            "CLAUDE_CONFIG_DIR": str(claude_config),
        }
        daemon = Daemon(board, env)
        seen: set[int] = set()
        environments: list[bytes] = []

        def planned() -> bool:
            # The address Claude was given for its tools (its MCP configuration).
            for found in processes_using(claude_config, "CLAUDE_CONFIG_DIR"):
                seen.update(int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)/mcp", found.command))
                with contextlib.suppress(OSError):  # the host's side: its user's processes
                    if Path(f"/proc/{found.pid}").stat().st_uid == lab.uid:
                        environments.append(Path(f"/proc/{found.pid}/environ").read_bytes())
            return board.state_of("ABC-1") == "Plan Review"

        try:
            assert wait_until(planned, 90), "".join(daemon.lines)
        finally:
            assert daemon.stop() == 0
    text = (board.root / "board" / "ABC-1.md").read_text()
    # The plan came over the tool server: nothing else reaches the board from the agent.
    assert "— symphony · plan" in text and "1. Do it there." in text
    assert anthropic.requests
    # The model was called through the daemon's gateway, forwarded to the host like the tools:
    # the key was swapped in on the way and never reached the host's processes.
    assert {r["api_key"] for r in anthropic.requests} == {"sk-ant-fake-key"}
    assert environments and not any(b"sk-ant-fake-key" in e for e in environments)
    model_at = {
        re.search(rb"ANTHROPIC_BASE_URL=http://127\.0\.0\.1:(\d+)/", e) for e in environments
    }
    assert None not in model_at
    assert {int(m.group(1)) for m in model_at if m} <= set(FORWARD_PORTS), model_at
    results = [r for request in anthropic.requests for r in request["tool_results"]]
    assert results and all("error" not in r.lower() for r in results), results
    # It ran on the host, as the host's user, in the workspace there.
    workspace = root / "ABC-1"
    assert workspace.is_dir() and workspace.stat().st_uid == lab.uid
    assert not (board.root / "workspaces").exists()
    # Its tools were at a forwarded port on the host, not at the daemon's own server.
    assert seen and seen <= set(FORWARD_PORTS) and not seen & before, seen
    # The forward ended with the run.
    assert loopback_listeners() <= before
    assert "would not forward" not in "".join(daemon.lines)


def test_a_host_that_forbids_forwarding_fails_the_run_with_the_reason_and_check_says_so(
    tmp_path: Path, lab: SshLab, claude_config: Path
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    write_workflow(board, lab, "w3", "claude")
    checked = subprocess.run(
        [sys.executable, "-m", "symphony", "check"],
        cwd=board.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "forward       w3 refused (claude takes tools over MCP" in checked.stdout
    assert "w3 refuses remote port forwarding" in checked.stdout
    with FakeAnthropic() as anthropic:
        env = {"ANTHROPIC_BASE_URL": anthropic.base_url, "ANTHROPIC_API_KEY": "sk-ant-fake"}
        daemon = Daemon(board, env)
        try:
            (failed,) = daemon.wait_for("event=failed", timeout=60)[:1]
        finally:
            assert daemon.stop() == 0
    assert "w3 would not forward symphony's tool server or model gateway" in failed, failed
    assert not anthropic.requests  # no agent started without its tools
    assert board.state_of("ABC-1") == "Todo"

    # The same check passes on a host that carries the forward.
    (tmp_path / "ok").mkdir()
    write_workflow(Board(tmp_path / "ok"), lab, "w1", "claude")
    fine = subprocess.run(
        [sys.executable, "-m", "symphony", "check"],
        cwd=tmp_path / "ok",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "forward       w1 ok" in fine.stdout, fine.stdout + fine.stderr

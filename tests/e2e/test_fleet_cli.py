"""`symphony serve` through the real CLI with real signals: two workflows in one process,
their log lines named, the fleet's API, and a kill -9 and restart that loses nothing in
either workflow."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.harness import Board, wait_until

pytestmark = pytest.mark.slow


class Fleet:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "symphony", "serve", "alpha", "beta", "--port", "0"],
            cwd=root, env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        threading.Thread(target=lambda: self.lines.extend(stream), daemon=True).start()

    def logged(self, needle: str) -> list[str]:
        return [line for line in list(self.lines) if needle in line]

    def url(self) -> str:
        assert wait_until(lambda: bool(self.logged("http server listening")), 30), self.lines
        match = re.search(r"url=(\S+)", self.logged("http server listening")[0])
        assert match is not None
        return match.group(1)


def two_workflows(root: Path, *, tickets: int) -> None:
    """`alpha/` and `beta/` under `root`, each a local board with `tickets` tickets (A-1,
    B-1, ...) and its WORKFLOW.md."""
    for name in ("alpha", "beta"):
        (root / name).mkdir()
        board = Board(root / name)
        for n in range(1, tickets + 1):
            board.ticket(f"{name[0].upper()}-{n}")
        board.write_workflow()


def test_a_fleet_runs_two_workflows_and_a_kill_9_loses_nothing_in_either(tmp_path: Path) -> None:
    import os

    two_workflows(tmp_path, tickets=2)
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_SCENARIO": "busy"}
    first = Fleet(tmp_path, env)
    try:
        url = first.url()
        assert wait_until(lambda: len(first.logged("agent turn_started")) >= 4, 60), first.lines
        overview = httpx.get(f"{url}api/v1/fleet").json()
        assert {w["name"]: w["running"] for w in overview["workflows"]} == {"alpha": 2, "beta": 2}
        named = {re.search(r"workflow=(\w+)", line).group(1)  # type: ignore[union-attr]
                 for line in first.logged("agent turn_started")}  # fmt: skip
        assert named == {"alpha", "beta"}
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        second = Fleet(tmp_path, env)
        try:
            assert wait_until(lambda: len(second.logged("event=recovered")) == 2, 60), second.lines
            recovered = second.logged("event=recovered")
            assert all("recovered 2 run(s)" in line for line in recovered), recovered
            assert {re.search(r"workflow=(\w+)", line).group(1)  # type: ignore[union-attr]
                    for line in recovered} == {"alpha", "beta"}  # fmt: skip
            assert wait_until(lambda: len(second.logged("agent turn_started")) >= 4, 60)
        finally:
            second.proc.send_signal(signal.SIGTERM)
            assert second.proc.wait(60) == 0
        assert wait_until(lambda: bool(second.logged("stopped")), 10)
    finally:
        first.proc.kill()


def test_on_a_terminal_the_fleet_draws_one_table_of_every_workflow(tmp_path: Path) -> None:
    import os
    import pty
    import select

    two_workflows(tmp_path, tickets=1)
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_SCENARIO": "busy",
           "COLUMNS": "160", "LINES": "50", "TERM": "xterm"}  # fmt: skip
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "symphony", "serve", "alpha", "beta"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=follower,
    )  # fmt: skip
    os.close(follower)
    seen = b""

    def drawn() -> bool:
        nonlocal seen
        while select.select([leader], [], [], 0.1)[0]:
            try:
                seen += os.read(leader, 65536)
            except OSError:
                break
        text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen).decode(errors="replace")
        return "fleet: 2 of 10 agent slots" in text and "A-1" in text and "B-1" in text

    try:
        assert wait_until(drawn, 60), seen[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        # Read on while it stops: a terminal nobody reads would block its writes.
        wait_until(lambda: drawn() is not None and proc.poll() is not None, 60)
        os.close(leader)
        proc.kill()
    assert proc.wait(10) == 0

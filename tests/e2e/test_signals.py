"""Both ways to run the daemon, `symphony WORKFLOW.md` and `symphony serve`, as real
processes on a real pseudo-terminal: closing the terminal stops them gracefully, `nohup` keeps
them running past it, and SIGHUP without a hung-up terminal reloads the workflow."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.harness import Board, is_alive, wait_until

pytestmark = pytest.mark.slow

COMMANDS = {
    "one workflow": lambda workflow: [sys.executable, "-m", "symphony", str(workflow)],
    "serve": lambda workflow: [sys.executable, "-m", "symphony", "serve", str(workflow)],
}


class Daemon:
    """The daemon's process, its log (stderr to a file: the terminal is only its controlling
    one) and the master side of its terminal, when it has one."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, master: int | None) -> None:
        self.proc, self.log, self.master = proc, log, master

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def logged(self, needle: str, timeout: float = 30) -> bool:
        return wait_until(lambda: needle in self.text(), seconds=timeout)

    def close_terminal(self) -> None:
        assert self.master is not None
        os.close(self.master)  # the kernel hangs the terminal up: SIGHUP to its session
        self.master = None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def start(
    board: Board,
    command: str,
    *,
    terminal: bool,
    ignore_hangup: bool = False,
    env: dict[str, str] | None = None,
) -> Daemon:
    log = board.root / "daemon.log"
    master = slave = None
    if terminal:
        master, slave = pty.openpty()

    def child() -> None:
        os.setsid()  # its own session, so the terminal below becomes its controlling one
        if slave is not None:
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        # As from a shell: hang-ups not ignored, unless `nohup` asked for it.
        signal.signal(signal.SIGHUP, signal.SIG_IGN if ignore_hangup else signal.SIG_DFL)

    with log.open("wb") as err:
        proc = subprocess.Popen(
            COMMANDS[command](board.workflow),
            cwd=board.root,
            env=dict(os.environ, FAKE_AGENT_SCENARIO="hang", **(env or {})),
            stdin=slave if slave is not None else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=child,
        )
    if slave is not None:
        os.close(slave)
    return Daemon(proc, log, master)


@pytest.fixture
def board(tmp_path: Path) -> Board:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(hooks={"after_run": "echo ran > ../after_run.marker"})
    return board


@pytest.mark.parametrize("command", COMMANDS)
def test_closing_the_terminal_stops_the_daemon_gracefully(board: Board, command: str) -> None:
    record = board.root / "agent.jsonl"
    env = {"FAKE_AGENT_RECORD": str(record), "FAKE_AGENT_SPAWN_CHILD": "1"}
    daemon = start(board, command, terminal=True, env=env)
    try:
        assert daemon.logged("turn_started"), daemon.text()
        assert wait_until(lambda: len(agent_pids(record)) == 2)
        pids = agent_pids(record)
        daemon.close_terminal()
        assert daemon.proc.wait(timeout=30) == 0, daemon.text()
    finally:
        daemon.proc.kill()
    text = daemon.text()
    assert "signal=SIGHUP" in text and "event=stopped" in text, text
    assert (board.workspaces / "after_run.marker").read_text().strip() == "ran"
    assert not [pid for pid in pids if is_alive(pid)]  # the agent and its child ended too


def agent_pids(record: Path) -> list[int]:
    """The fake agent's own pid and its child's, from its record file."""
    if not record.exists():
        return []
    rows = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    return [row["pid"] for row in rows[:1]] + [
        row["pid"] for row in rows if row.get("_fake") == "child"
    ]


@pytest.mark.parametrize("command", COMMANDS)
def test_under_nohup_the_daemon_outlives_its_terminal(board: Board, command: str) -> None:
    daemon = start(board, command, terminal=True, ignore_hangup=True)
    try:
        assert daemon.logged("turn_started"), daemon.text()
        daemon.close_terminal()
        # The hang-up was sent (or ignored) when the close returned; a SIGTERM now is the
        # signal that stops it, and the one named in the stop.
        assert is_alive(daemon.proc.pid)
        assert daemon.stop() == 0, daemon.text()
    finally:
        daemon.proc.kill()
    text = daemon.text()
    assert "signal=SIGTERM" in text and "signal=SIGHUP" not in text, text


@pytest.mark.parametrize("command", COMMANDS)
def test_sighup_reloads_the_workflow_and_the_run_goes_on(board: Board, command: str) -> None:
    daemon = start(board, command, terminal=False)
    try:
        assert daemon.logged("turn_started"), daemon.text()
        daemon.proc.send_signal(signal.SIGHUP)
        assert daemon.logged("reloading"), daemon.text()
        assert daemon.proc.poll() is None  # a reload, not a stop
        assert daemon.stop() == 0, daemon.text()
    finally:
        daemon.proc.kill()
    text = daemon.text()
    assert "signal=SIGHUP" in text and "signal=SIGTERM" in text, text
    stopping = [line for line in text.splitlines() if "stopping:" in line]
    assert stopping and all("signal=SIGTERM" in line for line in stopping), text

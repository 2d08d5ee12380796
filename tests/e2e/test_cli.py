"""The `symphony` command as a real process, where being one is what is tested: the daemon's
lifecycle under real signals (spec §17.7), its log formats, and the report reading the store
while another process holds it open and writes to it.

What the commands print is tested in-process in tests/cli/test_cli.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from symphony import core
from symphony.core.outcomes import HANDOFF, OutcomeRecord
from symphony.store import Store
from tests.harness import Board, is_alive, wait_until

pytestmark = pytest.mark.slow

SYMPHONY = [sys.executable, "-m", "symphony"]


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


def test_report_reads_the_store_while_a_daemon_process_holds_and_writes_it(board: Board) -> None:
    board.write_workflow()
    now = datetime.now(UTC)
    store, _ = Store.open(board.root / ".symphony" / "state.db")
    try:
        for n, ticket in enumerate(("A-1", "A-2")):
            state = core.SchedulerState()
            state.new_outcomes.append(
                OutcomeRecord(now, HANDOFF, str(n), ticket, {"seconds": 60.0})
            )
            store.save(state, 0.0, now)
            result = subprocess.run(
                [sys.executable, "-m", "symphony", "report", "--since", "7d"],
                cwd=board.root, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert f"handed to review               {n + 1}" in result.stdout
    finally:
        store.close()


def _start_daemon(
    board: Board,
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], Any] | None = None,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SYMPHONY, str(board.workflow), *args],
        cwd=board.root,
        env=dict(os.environ, FAKE_AGENT_SCENARIO="hang", **(env or {})),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )


def _read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 20) -> list[str]:
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} not logged; got:\n{''.join(lines)}")


def test_sigterm_stops_agents_runs_after_run_and_exits_zero(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(hooks={"after_run": "echo ran > ../after_run.marker"})
    proc = _start_daemon(board, "--logs-root", str(board.root / "logs"))
    try:
        lines = _read_until(proc, "turn_started")
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert (board.workspaces / "after_run.marker").read_text().strip() == "ran"
    dispatch = next(line for line in lines if "dispatching" in line)
    assert "issue_identifier=ABC-1" in dispatch and "issue_id=ABC-1" in dispatch
    assert any("turn_started" in line and "session_id=" in line for line in lines)
    issue_log = (board.root / "logs" / "ABC-1.log").read_text()
    assert "dispatching" in issue_log and "session_started" in issue_log


def test_a_daemon_logging_into_its_workflows_folder_stops_on_sigint(board: Board) -> None:
    """`symphony WORKFLOW.md 2> symphony.log` beside the workflow: every log line is a change in
    the folder the daemon watches for WORKFLOW.md edits, also while it stops; the watch must
    still end when stopping cancels it."""
    board.ticket("ABC-1")
    board.write_workflow()
    log_file = board.root / "symphony.log"
    with log_file.open("w") as log:
        proc = subprocess.Popen(
            [*SYMPHONY, str(board.workflow), "--no-tui"], cwd=board.root,
            env=dict(os.environ, FAKE_AGENT_SCENARIO="hang"), stderr=log,
        )  # fmt: skip
        try:
            assert wait_until(lambda: "turn_started" in log_file.read_text(), seconds=30)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0, log_file.read_text()
        finally:
            proc.kill()


def test_json_log_format_emits_one_object_per_line(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    proc = _start_daemon(board, "--log-format", "json")
    try:
        lines = _read_until(proc, "dispatching")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    finally:
        proc.kill()
    records = [json.loads(line) for line in lines]
    dispatch = next(r for r in records if r["event"] == "dispatching")
    assert dispatch["issue_identifier"] == "ABC-1" and dispatch["level"] == "info"
    assert proc.returncode == 0


def _record(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _agent_pids(record: Path) -> list[int]:
    """The fake agent's own pid and its child's, from its record file."""
    rows = _record(record)
    pids = [rows[0]["pid"]]
    pids += [row["pid"] for row in rows if row.get("_fake") == "child"]
    return pids


def _read_until_all(proc: subprocess.Popen[str], *needles: str) -> list[str]:
    lines: list[str] = []
    for needle in needles:
        lines += _read_until(proc, needle)
    return lines


def test_sighup_is_ignored_when_the_daemon_was_started_detached(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    proc = _start_daemon(board, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        _read_until(proc, "turn_started")
        # Pending together, SIGHUP (1) is delivered before SIGTERM (15): had it been handled,
        # it would be the signal named in the stop.
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "signal=SIGTERM" in rest and "signal=SIGHUP" not in rest


def test_second_sigint_says_still_stopping_and_third_kills_everything(board: Board) -> None:
    board.ticket("ABC-1")
    # The after_run hook holds the graceful stop up; its sleep must not outlive a forced stop.
    board.write_workflow(
        hooks={"after_run": "sleep 60 & echo $! > ../hook-sleep.pid; wait"},
    )
    record = board.root / "agent.jsonl"
    proc = _start_daemon(
        board,
        "--log-level",
        "debug",
        env={
            "FAKE_AGENT_RECORD": str(record),
            "FAKE_AGENT_SPAWN_CHILD": "1",
            "FAKE_AGENT_IGNORE_EOF": "1",
        },
    )
    try:
        _read_until(proc, "turn_started")
        assert wait_until(lambda: len(_agent_pids(record)) == 2)
        pids = _agent_pids(record)
        proc.send_signal(signal.SIGINT)
        _read_until_all(proc, "stopping: agents are being stopped", "hook=after_run")
        assert wait_until(lambda: (board.workspaces / "hook-sleep.pid").exists())
        proc.send_signal(signal.SIGINT)
        _read_until(proc, "still stopping")
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "forced stop" in rest
    pids.append(int((board.workspaces / "hook-sleep.pid").read_text()))
    assert wait_until(lambda: not [pid for pid in pids if is_alive(pid)])

"""The `symphony` command and its host lifecycle (spec §17.7), run as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_orchestrator import Board

SYMPHONY = [sys.executable, "-m", "symphony"]


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYMPHONY, *args],
        cwd=cwd,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


def test_missing_default_workflow_in_cwd_is_a_clean_error(tmp_path: Path) -> None:
    result = run_cli(cwd=tmp_path)
    assert result.returncode == 1
    assert "missing_workflow_file" in result.stderr
    assert str(tmp_path / "WORKFLOW.md") in result.stderr
    assert "Traceback" not in result.stderr


def test_nonexistent_explicit_workflow_path_is_a_clean_error(tmp_path: Path) -> None:
    result = run_cli("nope/WORKFLOW.md", cwd=tmp_path)
    assert result.returncode == 1 and "nope/WORKFLOW.md" in result.stderr


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("tracker: [broken", "workflow_parse_error"),
        ("- a\n- list", "workflow_front_matter_not_a_map"),
        ("tracker:\n  kind: jira", "unsupported_tracker_kind"),
        ("tracker:\n  kind: local\n  provider:\n    path: missing-board", "invalid_tracker_config"),
        ("tracker:\n  kind: local\nworkspace:\n  root: /", "is the file system root"),
        ("tracker:\n  kind: local\nworkspace:\n  root: .", "is the folder of WORKFLOW.md"),
    ],
)
def test_invalid_workflow_fails_startup_with_a_readable_reason(
    tmp_path: Path, front: str, expected: str
) -> None:
    (tmp_path / "WORKFLOW.md").write_text(f"---\n{front}\n---\nprompt\n")
    for args in ((), ("check",)):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 1
        assert expected in result.stderr and "Traceback" not in result.stderr


def test_default_workflow_in_cwd_is_used_by_check(board: Board) -> None:
    board.ticket("ABC-1", priority=1)
    board.ticket("ABC-2", blocked_by=["ABC-1"])
    board.ticket("ABC-3", state="Done")
    board.write_workflow()
    result = run_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("ABC-1" in line and "would dispatch" in line for line in lines)
    assert any("ABC-2" in line and "blocked" in line for line in lines)
    assert "ABC-3" not in result.stdout


def test_render_prints_the_prompt_a_ticket_would_get(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(
        prompt="Fix {{ issue.identifier }} ({{ issue.title }}) attempt={{ attempt }}"
    )
    result = run_cli("render", "ABC-1", "--attempt", "2", cwd=board.root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Fix ABC-1 (Ticket ABC-1) attempt=2"
    missing = run_cli("render", "ABC-9", cwd=board.root)
    assert missing.returncode == 1 and "ABC-9" in missing.stderr


def test_render_with_unknown_variable_reports_the_template_error(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(prompt="{{ issue.nope }}")
    result = run_cli("render", "ABC-1", cwd=board.root)
    assert result.returncode == 1 and "template_render_error" in result.stderr


def _start_daemon(board: Board, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, FAKE_AGENT_SCENARIO="hang")
    return subprocess.Popen(
        [*SYMPHONY, str(board.workflow), *args],
        cwd=board.root,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
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


@pytest.mark.slow
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


@pytest.mark.slow
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

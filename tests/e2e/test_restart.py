"""Restarts through the real CLI, with real signals: `kill -9` at bad moments, two daemons at
once, a damaged state file, a graceful restart, a kill while an agent is limited. Agents are
the scripted fake in real subprocesses (each one records itself, and whether another agent was
alive in its workspace when it started, `FAKE_AGENT_CHECK_OVERLAP`), and for the limit the real
codex against the fake model."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.adapters.daemon import DEMO_AGENT
from tests.e2e.conftest import codex_command
from tests.e2e.fake_model import CallTool, Fail, FakeModel, ModelRequest, Say, Step
from tests.harness import Board, Daemon, is_alive, wait_until
from tests.stage_flow import two_stages

pytestmark = pytest.mark.slow


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def agents(path: Path) -> list[dict[str, Any]]:
    return [r for r in records(path) if r.get("_fake") == "started"]


def when(line: str) -> float:
    match = re.search(r"ts=(\S+)", line)
    assert match is not None, line
    return datetime.fromisoformat(match.group(1)).timestamp()


def saved(board: Board, query: str) -> dict[str, Any]:
    """(identifier, value) rows of `query` as the daemon's store holds them now; empty while
    there is no store or it cannot be read."""
    path = board.root / ".symphony" / "state.db"
    if not path.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
            rows = db.execute(query).fetchall()
    except sqlite3.Error:
        return {}
    return {identifier: value for identifier, value in rows}


def saved_tokens(board: Board) -> dict[str, int]:
    """Each ticket's tokens as the daemon's store holds them now."""
    return saved(board, "SELECT identifier, total_tokens FROM ticket_totals")


def saved_messages(board: Board) -> dict[str, str | None]:
    """Each running ticket's last agent message as the daemon's store holds it now."""
    return saved(board, "SELECT identifier, last_message FROM runs")


def busy_board(board: Board, count: int = 3) -> dict[str, str]:
    for n in range(1, count + 1):
        board.ticket(f"ABC-{n}")
    board.write_workflow()
    return {
        "FAKE_AGENT_SCENARIO": "busy",
        "FAKE_AGENT_RECORD": str(board.root / "agents.jsonl"),
        "FAKE_AGENT_SPAWN_CHILD": "1",
        "FAKE_AGENT_IGNORE_EOF": "1",  # an agent that outlives its daemon, as seen in the field
        "FAKE_AGENT_CHECK_OVERLAP": "1",
    }


def test_kill_9_with_three_agents_running_never_lets_two_agents_serve_one_ticket(
    tmp_path: Path,
) -> None:
    board = Board(tmp_path)
    env = busy_board(board)
    record = board.root / "agents.jsonl"
    first = Daemon(board, env)
    try:
        first.wait_for("agent turn_started", 3)
        old = [a["pid"] for a in agents(record)]
        assert wait_until(
            lambda: len([r for r in records(record) if r.get("_fake") == "child"]) == 3
        )
        old += [r["pid"] for r in records(record) if r.get("_fake") == "child"]
        # What the agents reported is saved within a second, though they go quiet after it.
        assert wait_until(
            lambda: saved_tokens(board) == {"ABC-1": 150, "ABC-2": 150, "ABC-3": 150}, 10
        ), saved_tokens(board)
        first.kill9()
        assert all(is_alive(pid) for pid in old), "the old agents outlive their daemon"
        second = Daemon(board, env, "--port", "0")
        try:
            second.wait_for("agent turn_started", 3)
            assert not [pid for pid in old if is_alive(pid)]
            (recovered,) = second.wait_for("event=recovered")
            assert "recovered 3 run(s)" in recovered and "stopped 3 orphaned" in recovered
            assert len(agents(record)) == 6  # each ticket ran again, once
            assert [r for r in records(record) if r.get("_fake") == "overlap"] == []
            # The order that makes it safe: orphans stopped before the first new dispatch.
            log = "".join(second.lines)
            assert log.index("stopped agents an earlier daemon left running") < log.index(
                "event=dispatching"
            )
            state = httpx.get(f"{second.url()}api/v1/state").json()
            tokens = {row["issue_identifier"]: row["total_tokens"] for row in state["tickets"]}
            # 150 tokens before the kill and 150 since, for each ticket: nothing lost.
            assert wait_until(
                lambda: (
                    {
                        row["issue_identifier"]: row["total_tokens"]
                        for row in httpx.get(f"{second.url()}api/v1/state").json()["tickets"]
                    }
                    == {"ABC-1": 300, "ABC-2": 300, "ABC-3": 300}
                )
            ), tokens
        finally:
            assert second.stop() == 0
    finally:
        first.proc.kill()


def test_kill_9_during_a_failure_backoff_keeps_the_original_due_time(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(agent={"max_retry_backoff_ms": 300_000})
    env = {"FAKE_AGENT_SCENARIO": "fail"}
    first = Daemon(board, env)
    try:
        (retrying,) = first.wait_for("event=retrying")
        assert "attempt=1" in retrying and "delay_s=10.0" in retrying
        due = when(retrying) + 10.0
        time.sleep(2)  # well inside the backoff
        first.kill9()
    finally:
        first.proc.kill()
    second = Daemon(board, env)
    try:
        (dispatch,) = second.wait_for("event=dispatching", timeout=30)
        assert "attempt=1" in dispatch  # the retry, not a fresh first run
        assert abs(when(dispatch) - due) < 1.0, when(dispatch) - due
    finally:
        second.stop()


def test_kill_9_right_after_a_stage_move_neither_repeats_it_nor_runs_the_ticket_twice(
    tmp_path: Path,
) -> None:
    board = Board(tmp_path)
    board.ticket("DEMO-1")
    config = {
        "tracker": {
            "kind": "local",
            "provider": {"path": "board"},
            "terminal_states": ["Done", "Cancelled"],
        },
        "polling": {"interval_ms": 500},
        "workspace": {"root": "workspaces"},
        "agent": {"env_passthrough": ["DEMO_AGENT_*"]},
        "codex": {"command": f"{sys.executable} {DEMO_AGENT}"},
        "stages": two_stages(),
        "escalation_state": "Needs Attention",
    }
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
    ticket = board.tickets / "DEMO-1.md"
    env = {"DEMO_AGENT_DELAY_MS": "0"}
    first = Daemon(board, env)
    try:
        # Killed the moment the daemon's move lands on the board, before it can confirm it.
        assert wait_until(lambda: "state: Plan Review" in ticket.read_text(), 30)
        first.kill9()
    finally:
        first.proc.kill()
    second = Daemon(board, env)
    try:
        second.wait_for("event=started")
        # The outbox goes first, then polls: let a few pass; nothing may run in a checkpoint.
        ticks = len(second.wait_for("event=started"))
        time.sleep(2.5)
        assert ticks == 1
    finally:
        second.stop()
    text = ticket.read_text()
    assert board.state_of("DEMO-1") == "Plan Review"
    assert text.count("— symphony · plan") == 1
    assert text.count("— symphony · done") == 1
    dispatches = [ln for ln in first.lines + second.lines if "event=dispatching" in ln]
    assert len(dispatches) == 1


def test_two_daemons_started_at_once_on_one_workflow_run_exactly_one(tmp_path: Path) -> None:
    board = Board(tmp_path)
    env = busy_board(board, count=1)
    both = [Daemon(board, env), Daemon(board, env)]
    try:
        assert wait_until(lambda: any(d.proc.poll() is not None for d in both), 20)
        (loser,) = [d for d in both if d.proc.poll() is not None]
        (winner,) = [d for d in both if d is not loser]
        assert loser.proc.returncode == 1
        loser.wait_for("daemon_already_running")
        (message,) = loser.wait_for("another symphony daemon")
        assert f"pid {winner.proc.pid}" in message and "Traceback" not in "".join(loser.lines)
        winner.wait_for("agent turn_started")
        assert len(agents(board.root / "agents.jsonl")) == 1
    finally:
        for daemon in both:
            daemon.stop()


def test_a_garbage_state_file_is_moved_aside_and_the_daemon_works(tmp_path: Path) -> None:
    board = Board(tmp_path)
    env = busy_board(board, count=1)
    state = board.root / ".symphony" / "state.db"
    state.parent.mkdir()
    state.write_bytes(os.urandom(8192))
    daemon = Daemon(board, env)
    try:
        (said,) = daemon.wait_for("could not be read")
        assert "level=error" in said and "moved to" in said
        daemon.wait_for("agent turn_started")
    finally:
        assert daemon.stop() == 0
    assert list(state.parent.glob("state.db.corrupt-*"))


def _first_prompt(record: Path, agent_index: int) -> str:
    """The text of the first turn/start the `agent_index`th agent received."""
    agent_lines = records(record)
    starts = [i for i, r in enumerate(agent_lines) if r.get("_fake") == "started"]
    begin = starts[agent_index]
    end = starts[agent_index + 1] if agent_index + 1 < len(starts) else len(agent_lines)
    for message in agent_lines[begin:end]:
        if message.get("method") == "turn/start":
            return "".join(part.get("text", "") for part in message["params"]["input"])
    raise AssertionError("no turn/start recorded")


def _methods(record: Path, agent_index: int) -> list[str]:
    agent_lines = records(record)
    starts = [i for i, r in enumerate(agent_lines) if r.get("_fake") == "started"]
    end = starts[agent_index + 1] if agent_index + 1 < len(starts) else len(agent_lines)
    return [str(m.get("method")) for m in agent_lines[starts[agent_index] : end] if "method" in m]


@pytest.mark.parametrize("resume", ["works", "fails"])
def test_a_graceful_restart_continues_the_interrupted_run(tmp_path: Path, resume: str) -> None:
    board = Board(tmp_path)
    env = busy_board(board, count=1)
    env.pop("FAKE_AGENT_IGNORE_EOF")
    if resume == "fails":
        env["FAKE_AGENT_RESUME"] = "fail"
    record = board.root / "agents.jsonl"
    first = Daemon(board, env)
    try:
        first.wait_for("agent turn_started")
        # Stopped once the agent's word is saved (agent progress is saved within a second):
        # the restart's prompt quotes it.
        said = lambda: "still working on it" in (saved_messages(board).get("ABC-1") or "")  # noqa: E731
        assert wait_until(said, 10), saved_messages(board)
        assert first.stop() == 0
    finally:
        first.proc.kill()
    second = Daemon(board, env)
    try:
        (dispatch,) = second.wait_for("event=dispatching")
        assert "attempt=1" in dispatch
        second.wait_for("agent turn_started")
        methods = _methods(record, 1)
        prompt = _first_prompt(record, 1)
        if resume == "works":
            assert "thread/resume" in methods and "thread/start" not in methods
            # The standing instruction on fenced text opens every run's first prompt.
            assert "\n\nThe daemon was restarted while you were working on ABC-1" in prompt
        else:
            assert methods.index("thread/resume") < methods.index("thread/start")
            assert prompt.split("\n\n", 1)[1].startswith("Work on ABC-1")
            assert "interrupted by a restart" in prompt and "still working on it" in prompt
    finally:
        assert second.stop() == 0


def test_kill_9_while_codex_is_limited_keeps_the_pause_and_its_reset(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    """The real codex meets a spent usage window that resets 20 s later; the daemon is killed
    once the pause is saved. The restarted daemon holds the same pause to the same second:
    nothing asks the model before the reset, and after it every ticket finishes."""
    board = Board(tmp_path)
    for identifier in ("ABC-1", "ABC-2"):
        board.ticket(identifier)
    reset = int(time.time()) + 20
    reset_at = time.monotonic() + (reset - time.time())  # the fake model's clock
    refused = Fail(
        429,
        body={"error": {"type": "usage_limit_reached", "message": "The usage limit has been "
                        "reached", "resets_at": reset}},
        headers={"x-codex-primary-used-percent": "100",
                 "x-codex-primary-window-minutes": "300",
                 "x-codex-primary-reset-at": str(reset)},
    )  # fmt: skip
    first_call = [True]

    def script(request: ModelRequest) -> list[Step]:
        if first_call[0]:
            first_call[0] = False
            return [refused]
        if request.step == 0:
            return [CallTool("local_move_issue", {"state": "Human Review"})]
        return [Say("ready for review")]

    pauses = lambda: saved(board, "SELECT agent_kind, pause FROM agent_pauses")  # noqa: E731
    with FakeModel(script) as model:
        board.write_workflow(
            polling_ms=1000,
            agent={"max_concurrent_agents": 1},
            codex={
                "command": codex_command(model.base_url),
                "approval_policy": "never",
                "read_timeout_ms": 30_000,
                "turn_timeout_ms": 60_000,
            },
        )
        first = Daemon(board, codex_env)
        try:
            assert wait_until(lambda: "codex" in pauses(), 60), "".join(first.lines)
            first.kill9()
        finally:
            first.proc.kill()
        saved_pause = json.loads(pauses()["codex"])
        assert saved_pause["until"] == datetime.fromtimestamp(reset, UTC).isoformat()
        assert time.time() < reset - 5, "the kill came too late to prove anything"
        second = Daemon(board, codex_env, "--port", "0")
        try:
            state = httpx.get(f"{second.url()}api/v1/state").json()
            (limit,) = state["limits"]
            assert limit["agent"] == "codex" and limit["until"] == saved_pause["until"]
            assert limit["reset_named"] and limit["limit"] == "usage limit"
            assert wait_until(
                lambda: all(board.state_of(i) == "Human Review" for i in ("ABC-1", "ABC-2")),
                90,
            ), "".join(second.lines)
            second.wait_for('event="agent resumed" agent=codex')
            # The limited run's retry, still the first attempt, goes first after the reset.
            (dispatch, *_) = second.wait_for("event=dispatching")
            assert "issue_identifier=ABC-1" in dispatch and "attempt=0" in dispatch, dispatch
            assert "resumed after its agent's limit" in dispatch
        finally:
            assert second.stop() == 0
    assert model.script_errors == [] and model.unexpected_requests == []
    _, *rest = model.requests
    # Neither daemon asked the model between the refusal and the reset.
    assert rest and all(r.at >= reset_at - 0.5 for r in rest), [r.at - reset_at for r in rest]
    # The ticket that met the limit continued its own thread after the restart.
    resumed = [r for r in rest if any("ABC-1" in t for t in r.user_texts)]
    assert resumed and len(resumed[0].user_texts) >= 2
    # The restored pause is no new limit, and nothing failed: no retry was charged.
    log = "".join(second.lines)
    assert 'event="agent limited"' not in log and "event=retrying" not in log, log

"""The orchestrator end to end: a local board, real workspaces and hooks, and a scripted agent
speaking the app-server protocol in a real subprocess (spec §7, §8, §16, §17.4)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from symphony import core
from symphony.agents.registry import CODEX
from symphony.config.load import load_settings
from symphony.config.sections import HooksSettings
from symphony.daemon.orchestrator import Orchestrator
from symphony.store import Store
from symphony.workspace.environment import BASE_NAMES
from symphony.workspace.local import WorkspaceManager
from tests.harness import FAKE_AGENT, FAKE_ENV, Board, Running, pid_alive, scenario_env, start

pytestmark = pytest.mark.slow


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


async def test_tickets_dispatch_in_parallel_and_reach_human_review_through_the_tool(
    board: Board,
) -> None:
    board.ticket("ABC-1")
    board.ticket("ABC-2", state="In Progress")
    board.ticket("ABC-3", state="Done")
    board.write_workflow(codex={"command": f"{sys.executable} {FAKE_AGENT}"})
    env = scenario_env(
        "tool",
        FAKE_AGENT_TOOL="local_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
        FAKE_AGENT_DELAY_MS="300",
    )
    run = start(board, env, watch=False)
    try:
        await run.until(
            lambda: (
                board.state_of("ABC-1") == "Human Review"
                and board.state_of("ABC-2") == "Human Review"
                and not run.orchestrator.state.running
            )
        )
        # The continuation retry sees Human Review (not active) and releases the claim.
        await run.until(lambda: not run.orchestrator.state.claimed)
    finally:
        await run.stop()
    assert run.max_running == 2
    assert board.state_of("ABC-3") == "Done"
    assert (board.workspaces / "ABC-1").is_dir() and (board.workspaces / "ABC-2").is_dir()
    snapshot = run.orchestrator.snapshot()
    assert snapshot["agent_totals"]["total_tokens"] > 0
    assert snapshot["agent_totals"]["seconds_running"] > 0


async def test_ticket_totals_outlive_the_daemon_and_long_quiet_tickets_are_forgotten(
    board: Board, tmp_path: Path
) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    env = scenario_env(
        "tool",
        FAKE_AGENT_TOOL="local_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )
    store, _ = Store.open(tmp_path / "state.db")
    quiet = core.SchedulerState()
    quiet.ticket_totals["id-OLD"] = core.TicketTotals("OLD-1", 10, 5, 15, 1.0)
    quiet.changed_totals.add("id-OLD")
    store.save(quiet, 0.0, datetime.now(UTC) - timedelta(days=120))
    run = start(board, env, watch=False, store=store)
    try:
        await run.until(lambda: board.state_of("ABC-1") == "Human Review")
        await run.until(lambda: not run.orchestrator.state.claimed)
    finally:
        await run.stop()
    spent = run.orchestrator.state.ticket_totals["ABC-1"].total_tokens
    assert spent > 0
    # 120 days quiet is past the default 90: gone. The ticket that just ran is kept.
    saved = store.load(datetime.now(UTC))
    assert set(saved.ticket_totals) == {"ABC-1"}
    assert saved.ticket_totals["ABC-1"].total_tokens == spent
    assert run.orchestrator.snapshot()["tickets"][0]["issue_identifier"] == "ABC-1"


async def test_ticket_moved_to_terminal_state_stops_its_run_and_removes_the_workspace(
    board: Board,
) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    run = start(board, scenario_env("hang"), watch=False)
    try:
        await run.until(
            lambda: (
                run.orchestrator.state.running.get("ABC-1") is not None
                and run.orchestrator.state.running["ABC-1"].pid is not None
            )
        )
        pid = run.orchestrator.state.running["ABC-1"].pid
        assert (board.workspaces / "ABC-1").is_dir()
        board.ticket("ABC-1", state="Done")
        run.orchestrator.request_refresh()
        await run.until(
            lambda: not run.orchestrator.state.running and not (board.workspaces / "ABC-1").exists()
        )
        assert not run.orchestrator.state.retry_attempts
        assert "ABC-1" not in run.orchestrator.state.claimed
        assert pid is not None and not pid_alive(pid)
    finally:
        await run.stop()


async def test_ticket_moved_to_non_active_state_stops_its_run_and_keeps_the_workspace(
    board: Board,
) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    run = start(board, scenario_env("hang"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running)
        board.ticket("ABC-1", state="Backlog")
        run.orchestrator.request_refresh()
        await run.until(lambda: not run.orchestrator.state.running)
        assert (board.workspaces / "ABC-1").is_dir()
        assert not run.orchestrator.state.retry_attempts
    finally:
        await run.stop()


async def test_crashing_agent_ends_its_attempt_with_a_scheduled_retry(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    run = start(board, scenario_env("crash"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
        retry = run.orchestrator.state.retry_attempts["ABC-1"]
        assert retry.attempt == 1 and "port_exit" in (retry.error or "")
        row = run.orchestrator.snapshot()["retrying"][0]
        assert row["issue_identifier"] == "ABC-1" and 9 < row["due_in_seconds"] <= 10
    finally:
        await run.stop()


async def test_stalled_agent_is_killed_and_retried(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(codex={"stall_timeout_ms": 300}, polling_ms=100)
    run = start(board, scenario_env("hang"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
        retry = run.orchestrator.state.retry_attempts["ABC-1"]
        assert "stalled" in (retry.error or "") and retry.attempt == 1
        assert not run.orchestrator.state.running
    finally:
        await run.stop()


async def test_template_error_fails_only_the_attempt(board: Board) -> None:
    board.ticket("ABC-1")
    # It passes the load-time check; the local board gives native_ref no such key.
    board.write_workflow(prompt="Work on {{ issue.native_ref.no_such_key }}")
    run = start(board, scenario_env("complete"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
        assert "template_render_error" in (
            run.orchestrator.state.retry_attempts["ABC-1"].error or ""
        )
    finally:
        await run.stop()


async def test_hanging_hook_fails_the_attempt_not_the_daemon(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(hooks={"before_run": "sleep 30", "timeout_ms": 200})
    run = start(board, scenario_env("complete"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
        assert "hook_timeout" in (run.orchestrator.state.retry_attempts["ABC-1"].error or "")
    finally:
        await run.stop()


async def test_invalid_reload_keeps_last_good_settings_and_pauses_dispatch_until_fixed(
    board: Board,
) -> None:
    board.write_workflow(polling_ms=100)
    run = start(board, scenario_env("hang"), watch=False)
    try:
        good = run.orchestrator.settings
        board.workflow.write_text("---\ntracker: [broken\n---\nprompt\n")
        await run.until(lambda: run.orchestrator.health.workflow_error is not None)
        assert "workflow_parse_error" in (run.orchestrator.health.workflow_error or "")
        assert run.orchestrator.settings is good
        board.ticket("ABC-1")
        for _ in range(3):  # several ticks pass without a dispatch
            ticks = run.orchestrator.health.last_tick_at
            await run.until(lambda t=ticks: run.orchestrator.health.last_tick_at != t)
        assert not run.orchestrator.state.running
        board.write_workflow(polling_ms=100)
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running)
        assert run.orchestrator.health.workflow_error is None
        events = [row["event"] for row in reversed(run.orchestrator.snapshot()["activity"])]
        assert events[:2] == ["workflow_rejected", "workflow_valid"]
        rejected = run.orchestrator.snapshot()["activity"][-1]
        assert "workflow_parse_error" in rejected["message"] and rejected["level"] == "error"
    finally:
        await run.stop()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda text: text.replace("root: workspaces", "root: /"),
            "workspace.root / is the file system root",
        ),
        (
            lambda text: text.replace(
                "Work on {{ issue.identifier }}", "Work on {{ issue.titel }}"
            ),
            "template_unknown_variable",
        ),
    ],
    ids=["workspace-root-slash", "prompt-unknown-field"],
)
async def test_reload_that_fails_a_load_time_check_is_refused_and_last_good_kept(
    board: Board, edit: Callable[[str], str], expected: str
) -> None:
    board.write_workflow(polling_ms=100)
    run = start(board, scenario_env("hang"), watch=False)
    try:
        good = run.orchestrator.settings
        board.workflow.write_text(edit(board.workflow.read_text()))
        await run.until(lambda: run.orchestrator.health.workflow_error is not None)
        error = run.orchestrator.health.workflow_error or ""
        assert expected in error
        assert run.orchestrator.settings is good
        assert run.orchestrator.snapshot()["health"]["workflow_error"] == error  # the banner
    finally:
        await run.stop()


async def test_workflow_edit_is_applied_without_restart(board: Board) -> None:
    board.ticket("ABC-1")
    board.ticket("ABC-2")
    board.write_workflow(agent={"max_concurrent_agents": 1})
    run = start(board, scenario_env("hang"), watch=True)
    try:
        await run.until(lambda: len(run.orchestrator.state.running) == 1)
        board.write_workflow(agent={"max_concurrent_agents": 2})
        # The file watcher triggers the reload: the 60 s poll interval is never reached.
        await run.until(lambda: run.orchestrator.settings.agent.max_concurrent_agents == 2)
        run.orchestrator.request_refresh()
        await run.until(lambda: len(run.orchestrator.state.running) == 2)
    finally:
        await run.stop()


async def test_shutdown_stops_agents_and_runs_after_run_hooks(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow(hooks={"after_run": "echo done > ../after_run.marker"})
    run = start(board, scenario_env("hang"), watch=False)
    await run.until(
        lambda: (
            "ABC-1" in run.orchestrator.state.running
            and run.orchestrator.state.running["ABC-1"].pid is not None
        )
    )
    pid = run.orchestrator.state.running["ABC-1"].pid
    await run.stop()
    assert (board.workspaces / "after_run.marker").read_text().strip() == "done"
    assert pid is not None and not pid_alive(pid)
    assert not run.orchestrator.state.running


async def test_startup_cleanup_removes_workspaces_of_terminal_tickets(board: Board) -> None:
    board.ticket("ABC-1", state="Done")
    board.ticket("ABC-2", state="Backlog")
    board.ticket("victim", state="Done")
    workspaces = WorkspaceManager(board.workspaces, HooksSettings(), env={})
    for key in ("ABC-1", "ABC-2"):
        await workspaces.prepare(key)
    # A folder of the same name as a Done ticket that symphony never made.
    (board.workspaces / "victim").mkdir()
    (board.workspaces / "victim" / "notes.txt").write_text("mine")
    board.write_workflow()
    run = start(board, scenario_env("hang"), watch=False)
    try:
        await run.until(lambda: run.orchestrator.health.last_tick_at is not None)
    finally:
        await run.stop()
    assert not (board.workspaces / "ABC-1").exists()
    assert (board.workspaces / "ABC-2").is_dir()
    assert (board.workspaces / "victim" / "notes.txt").read_text() == "mine"


async def test_terminal_ticket_keeps_a_folder_symphony_did_not_create(board: Board) -> None:
    board.ticket("victim")
    (board.workspaces / "victim").mkdir(parents=True)
    (board.workspaces / "victim" / "notes.txt").write_text("mine")
    board.write_workflow(polling_ms=100)
    run = start(board, scenario_env("hang"), watch=False)
    try:
        # The dispatch fails without touching the folder, and retries.
        await run.until(lambda: "victim" in run.orchestrator.state.retry_attempts)
        error = run.orchestrator.state.retry_attempts["victim"].error or ""
        assert "workspace_not_owned" in error
        board.ticket("victim", state="Done")
        await run.until(lambda: "victim" not in run.orchestrator.state.claimed, timeout=30)
    finally:
        await run.stop()
    assert (board.workspaces / "victim" / "notes.txt").read_text() == "mine"


async def test_continuation_turns_run_on_one_session_up_to_max_turns(board: Board) -> None:
    board.ticket("ABC-1")
    record = board.root / "record.jsonl"
    board.write_workflow(agent={"max_turns": 3})
    run = start(board, scenario_env("complete", FAKE_AGENT_RECORD=str(record)), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
    finally:
        await run.stop()
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    turns = [m for m in sent if m.get("method") == "turn/start"]
    starts = [m for m in sent if m.get("method") == "thread/start"]
    assert len(starts) == 1 and len(turns) == 3
    assert "Work on ABC-1" in turns[0]["params"]["input"][0]["text"]
    assert "Work on ABC-1" not in turns[1]["params"]["input"][0]["text"]
    assert run.orchestrator.state.retry_attempts["ABC-1"].kind.value == "continuation"


async def test_no_variable_outside_the_allowlist_reaches_an_agent_or_a_hook(board: Board) -> None:
    board.ticket("ABC-1")
    record = board.root / "record.jsonl"
    board.write_workflow(
        agent={"env_passthrough": [*FAKE_ENV, "GOPATH"], "env": {"CI": "true"}},
        hooks={"after_create": f"env > {board.root / 'hook-env.txt'}"},
    )
    env = {
        **{name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ},
        "FAKE_AGENT_SCENARIO": "complete",
        "FAKE_AGENT_RECORD": str(record),
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "DATABASE_URL": "postgres://u:p@db/prod",
        "OPENAI_API_KEY": "sk-model",
        "GOPATH": "/go",
    }
    run = start(board, env, watch=False)
    try:
        await run.until(lambda: record.exists() and '"env_names"' in record.read_text())
    finally:
        await run.stop()
    (started,) = [
        json.loads(line) for line in record.read_text().splitlines() if '"env_names"' in line
    ]
    names = set(started["env_names"])
    assert {"AWS_SECRET_ACCESS_KEY", "DATABASE_URL"}.isdisjoint(names)
    assert {"OPENAI_API_KEY", "GOPATH", "CI", "SYMPHONY_ISSUE_IDENTIFIER"} <= names
    # What the agent has of the daemon's environment (its login shell may add its own).
    allowed = {*BASE_NAMES, *CODEX.env_names, "GOPATH", "FAKE_AGENT_SCENARIO", "FAKE_AGENT_RECORD"}
    assert names & set(env) <= allowed
    hook = (board.root / "hook-env.txt").read_text()
    # The model's credential is the agent's alone; hooks run the repository's scripts.
    assert "aws-secret" not in hook and "sk-model" not in hook and "GOPATH=/go" in hook


class FailingOnce:
    """Wraps a real tracker; its first candidate read fails the way a buggy adapter would."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failed = False

    async def fetch_issues_by_states(self, states: Any) -> Any:
        if "Todo" in states and not self.failed:
            self.failed = True
            raise KeyError("surprise")
        return await self.inner.fetch_issues_by_states(states)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_an_adapter_bug_costs_one_poll_not_the_daemon(board: Board) -> None:
    from symphony.tracker.contract import TrackerContext, create_tracker

    board.ticket("ABC-1")
    board.write_workflow(polling_ms=100)
    env = scenario_env("hang")
    settings = load_settings(board.workflow, env)
    tracker = FailingOnce(create_tracker(settings.tracker, TrackerContext(board.root, env)))
    run = Running(Orchestrator(settings, environ=env, tracker=tracker, watch=False))
    try:
        await run.until(lambda: run.orchestrator.health.tracker_error is not None)
        assert "tracker_internal" in (run.orchestrator.health.tracker_error or "")
        assert "KeyError" in (run.orchestrator.health.tracker_error or "")
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running)
        assert run.orchestrator.health.tracker_error is None
        snapshot = run.orchestrator.snapshot()
        candidates = snapshot["health"]["tracker_requests"]["candidates"]
        assert candidates["errors"] == {"tracker_internal": 1} and candidates["count"] >= 2
        events = [(row["event"], row["level"]) for row in reversed(snapshot["activity"])]
        assert events[:3] == [
            ("tracker_failed", "error"),
            ("tracker_recovered", "info"),
            ("dispatched", "info"),
        ]
    finally:
        await run.stop()


async def test_handed_off_ticket_moved_to_done_later_has_its_workspace_removed(
    board: Board,
) -> None:
    board.ticket("ABC-1")
    board.write_workflow(polling_ms=100)
    env = scenario_env(
        "tool",
        FAKE_AGENT_TOOL="local_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )
    run = start(board, env, watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.kept_workspaces)
        assert (board.workspaces / "ABC-1").is_dir()
        board.ticket("ABC-1", state="Done")  # the reviewer accepts the work
        await run.until(lambda: not (board.workspaces / "ABC-1").exists())
        assert not run.orchestrator.state.kept_workspaces
    finally:
        await run.stop()


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [("input", "turn_input_required"), ("fail", "turn_failed"), ("malformed", None)],
)
async def test_misbehaving_agent_ends_its_attempt_with_a_clear_reason(
    board: Board, scenario: str, reason: str | None
) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    run = start(board, scenario_env(scenario), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
        retry = run.orchestrator.state.retry_attempts["ABC-1"]
    finally:
        await run.stop()
    if reason is None:  # garbage and an 11 MB line are survived: the turn completes
        assert retry.kind.value == "continuation"
    else:
        assert retry.kind.value == "failure" and reason in (retry.error or "")


class DiscoveringTracker(FailingOnce):
    """A tracker that names its own states, as Kaiten does with column types."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.failed = True  # no injected read failure
        self.discoveries = 0

    async def discover_states(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        self.discoveries += 1
        return ("Todo", "In Progress"), ("Done",)


async def test_states_left_to_the_tracker_are_discovered_before_polling(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    import symphony_adapters.local
    from symphony.tracker.contract import TrackerContext, create_tracker

    leaves_states_to_the_tracker = dataclasses.replace(
        symphony_adapters.local.ADAPTER,
        states_from_tracker=True,
        default_active_states=None,
        default_terminal_states=None,
    )
    monkeypatch.setattr(symphony_adapters.local, "ADAPTER", leaves_states_to_the_tracker)
    board.ticket("ABC-1")
    board.ticket("ABC-2", state="Done")
    await WorkspaceManager(board.workspaces, HooksSettings(), env={}).prepare("ABC-2")
    board.write_workflow()
    text = board.workflow.read_text()
    board.workflow.write_text(
        text.replace("  active_states:\n  - Todo\n  - In Progress\n", "").replace(
            "  terminal_states:\n  - Done\n  - Cancelled\n", ""
        )
    )
    env = scenario_env("hang")
    settings = load_settings(board.workflow, env)
    assert settings.tracker.active_states == () and settings.tracker.terminal_states == ()
    tracker = DiscoveringTracker(create_tracker(settings.tracker, TrackerContext(board.root, env)))
    run = Running(Orchestrator(settings, environ=env, tracker=tracker, watch=False))
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running)
        assert run.orchestrator.settings.tracker.active_states == ("Todo", "In Progress")
        assert not (board.workspaces / "ABC-2").exists()  # startup cleanup knew "Done"
        assert tracker.discoveries == 1
    finally:
        await run.stop()


class CancelsBeforeStart(Orchestrator):
    """Stops the daemon in the instant between creating a worker task and its first step."""

    def _perform(self, effects: Sequence[core.Effect]) -> None:
        super()._perform(effects)
        for effect in effects:
            if isinstance(effect, core.StartWorker):
                self._performer.workers[effect.issue.id].cancel()
                self.stop()


async def test_shutdown_does_not_wait_for_a_worker_cancelled_before_it_ran(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    env = scenario_env("hang")
    orchestrator = CancelsBeforeStart(load_settings(board.workflow, env), environ=env, watch=False)
    await asyncio.wait_for(orchestrator.run(), 10)
    assert not orchestrator.state.running and not orchestrator.state.claimed

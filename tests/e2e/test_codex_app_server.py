"""Symphony driving the real `codex app-server` (npm @openai/codex, pinned) end to end.

Codex runs for real, offline: its model is `FakeModel`, a local Responses API server that plays
a per-test script (run a shell command, call the board's `local_move_issue` tool, answer, fail,
stall). What these tests observe is what codex really did: files it wrote in each workspace,
ticket files moved through the dynamic tool, token totals it reported, how its process ended.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from symphony.agents import PORT_EXIT, AgentError, AgentLaunch
from symphony.agents.codex import AppServerSession
from symphony.base.events import AgentEvent
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.codex import CodexSettings
from symphony.config.pricing import Price
from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.github.fake_github import FakeGitHub, serve
from tests.e2e.conftest import codex_command, processes_using
from tests.e2e.fake_model import (
    CallTool,
    Fail,
    FakeModel,
    Hold,
    ModelRequest,
    Say,
    Shell,
    Stall,
    Step,
    Together,
)
from tests.harness import Board, Running, pid_alive, start

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
"""Bound on every wait: generous for a loaded 2-core box, far above what a pass needs."""

MOVE_TOOL = "local_move_issue"
GITHUB_TOKEN = "ghp_e2e_token_value_0002"
_IDENTIFIER = re.compile(r"\bWork on ([A-Z][A-Z0-9]*-\d+)\b")


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


def codex_settings(model: FakeModel, **overrides: Any) -> dict[str, Any]:
    """The `codex` section of WORKFLOW.md: the real binary against `model`."""
    return {
        "command": codex_command(model.base_url),
        "approval_policy": "never",
        "thread_sandbox": "workspace-write",
        "read_timeout_ms": 30_000,
        "turn_timeout_ms": 60_000,
        **overrides,
    }


def ticket_of(request: ModelRequest) -> str:
    """The identifier the workflow prompt (`Work on <ID>: ...`) names."""
    for text in reversed(request.user_texts):
        match = _IDENTIFIER.search(text)
        if match:
            return match.group(1)
    raise LookupError(f"no ticket identifier in prompt {request.prompt!r}")


def assert_model_healthy(model: FakeModel) -> None:
    assert model.script_errors == []
    assert model.unexpected_requests == []


async def test_two_tickets_run_in_parallel_through_real_codex_and_reach_human_review(
    board: Board, codex_env: dict[str, str]
) -> None:
    board.ticket("ABC-1")
    board.ticket("ABC-2", state="In Progress")

    def script(request: ModelRequest) -> list[Step]:
        identifier = ticket_of(request)
        return [
            # Neither conversation gets its first answer until both have asked.
            Together("first call", 2, Shell(f"printf %s {identifier} > {identifier}.txt")),
            CallTool(MOVE_TOOL, {"state": "Human Review"}),
            Say(f"{identifier} is ready for review"),
        ]

    with FakeModel(script) as model:
        board.write_workflow(codex=codex_settings(model))
        run = start(board, codex_env, watch=False)
        try:
            await run.until(
                lambda: (
                    board.state_of("ABC-1") == "Human Review"
                    and board.state_of("ABC-2") == "Human Review"
                    and not run.orchestrator.state.running
                ),
                timeout=TIMEOUT_S,
            )
            snapshot = run.orchestrator.snapshot()
        finally:
            await run.stop()

    assert_model_healthy(model)
    assert run.max_running == 2
    assert model.broken_rendezvous == [], "the two conversations never overlapped"
    for identifier, other in (("ABC-1", "ABC-2"), ("ABC-2", "ABC-1")):
        workspace = board.workspaces / identifier
        assert (workspace / f"{identifier}.txt").read_text() == identifier
        assert not (workspace / f"{other}.txt").exists()
        # The model saw the board's answer to its tool call: the move really happened.
        last = [r for r in model.requests if ticket_of(r) == identifier][-1]
        moved = json.loads(last.tool_outputs()[-1])
        assert moved["state"] == "Human Review" and moved["changed"] is True
    assert len(model.requests) == 6
    assert all(MOVE_TOOL in request.tool_names for request in model.requests)
    totals = snapshot["agent_totals"]
    assert totals["total_tokens"] > 0
    assert totals["total_tokens"] == model.reported_total_tokens


def daemon_has_seen(runs: list[Running], issue_id: str, state: str) -> bool:
    """Whether the daemon (once started) has looked at the ticket since it moved to `state`,
    as the tracker spells it, or has let it go."""
    if not runs:
        return False
    entry = runs[0].orchestrator.state.running.get(issue_id)
    return entry is None or entry.stop_reason is not None or entry.issue.state == state


def record_stops(run: Running) -> set[str]:
    """The reasons of every stop the daemon decides for a run from now on."""
    stops: set[str] = set()
    running = run.orchestrator.state.running
    run.orchestrator.view.add_listener(
        lambda: stops.update(
            e.stop_reason.value for e in running.values() if e.stop_reason is not None
        )
    )
    return stops


async def test_a_move_made_by_the_runs_own_tool_call_lets_its_turn_finish(
    board: Board, codex_env: dict[str, str]
) -> None:
    board.ticket("ABC-1")
    runs: list[Running] = []
    steps: list[Step] = [
        CallTool(MOVE_TOOL, {"state": "Human Review"}),
        # The watched board shows the move within milliseconds: the model's next request is
        # held until the daemon has seen it, so the race is played every time.
        Hold(
            lambda: daemon_has_seen(runs, "ABC-1", "Human Review"),
            CallTool("local_add_comment", {"body": "Moved for review; summary follows."}),
        ),
        Say("ABC-1 is ready for review"),
    ]
    with FakeModel(steps) as model:
        board.write_workflow(codex=codex_settings(model))
        run = start(board, codex_env, watch=True)
        runs.append(run)
        state = run.orchestrator.state
        stops = record_stops(run)
        try:
            await run.until(lambda: bool(run.dispatched) and not state.running, timeout=TIMEOUT_S)
        finally:
            await run.stop()

    assert_model_healthy(model)
    assert model.broken_rendezvous == []
    assert board.state_of("ABC-1") == "Human Review"
    # Every answer reached the model: the move's, the comment's, and the turn ended itself.
    assert len(model.requests) == 3
    outputs = [json.loads(o) for o in model.requests[-1].tool_outputs()]
    assert outputs[0]["state"] == "Human Review"
    assert "Moved for review" in (board.tickets / "ABC-1.md").read_text()
    assert stops == set(), "the daemon stopped the run its own move had made inactive"


async def test_on_github_an_agent_that_moves_first_gets_its_other_calls_answered(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    github = FakeGitHub(token=GITHUB_TOKEN)
    github.add(1, labels=["status:todo"])
    runs: list[Running] = []
    steps: list[Step] = [
        CallTool("github_move_issue", {"state": "Human Review"}),
        Hold(
            lambda: daemon_has_seen(runs, "1", "status:human-review"),
            CallTool("github_add_comment", {"body": "Ready: see the linked pull request."}),
        ),
        CallTool("github_link_pull_request", {"url": "https://127.0.0.1/acme/widgets/pull/7"}),
        Say("done"),
    ]
    with serve(github), FakeModel(steps) as model:
        tracker = {
            "kind": "github",
            "provider": {"repository": "acme/widgets", "api_url": github.base},
            "active_states": ["Todo", "In Progress"],
            "terminal_states": ["Done", "Cancelled"],
        }
        workflow = write_workflow(tmp_path, tracker, polling_ms=100)
        text = workflow.read_text()
        front = yaml.safe_load(text.split("---")[1])
        front["codex"] = codex_settings(model)
        workflow.write_text(f"---\n{yaml.safe_dump(front)}---\n{text.split('---', 2)[2]}")
        run = start_daemon(workflow, {**codex_env, "GITHUB_TOKEN": GITHUB_TOKEN}, poll_s=0.2)
        runs.append(run)
        state = run.orchestrator.state
        stops = record_stops(run)
        try:
            await run.until(lambda: bool(run.dispatched) and not state.running, timeout=TIMEOUT_S)
        finally:
            await run.stop()

    assert_model_healthy(model)
    assert model.broken_rendezvous == []
    assert stops == set(), "the daemon stopped the run its own move had made inactive"
    assert github.labels_of(1) == ["status:human-review"]
    assert len(model.requests) == 4  # each of the three calls was answered
    assert [json.loads(o).get("error") for o in model.requests[-1].tool_outputs()] == [None] * 3
    assert any("linked pull request" in body for body in github.comments_of(1))


async def test_approval_request_under_untrusted_is_accepted_and_the_command_runs(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    events: list[AgentEvent] = []
    script: list[Step] = [Shell("echo approved > approved.txt"), Say("wrote approved.txt")]
    with FakeModel(script) as model:
        settings = CodexSettings(**codex_settings(model, approval_policy="untrusted"))
        session = AppServerSession(
            AgentLaunch(
                workspace=workspace, settings=settings, env=codex_env, on_event=events.append
            )
        )
        try:
            await asyncio.wait_for(session.start(), TIMEOUT_S)
            result = await asyncio.wait_for(
                session.run_turn("Write approved.txt", title="ABC-1: approval"), TIMEOUT_S
            )
        finally:
            await session.stop()

    assert_model_healthy(model)
    approvals = [event for event in events if event.kind == "approval_auto_approved"]
    assert len(approvals) == 1
    assert "item/commandExecution/requestApproval" in (approvals[0].message or "")
    assert "approved.txt" in (approvals[0].message or "")
    assert (workspace / "approved.txt").read_text() == "approved\n"
    assert result.message == "wrote approved.txt"


async def test_model_refusing_the_request_fails_the_attempt_and_schedules_a_retry(
    board: Board, codex_env: dict[str, str]
) -> None:
    board.ticket("ABC-1")
    # A 400 is the request's fault; a 5xx is the provider's limit (tests/e2e/test_codex_limits).
    with FakeModel([Fail(400)]) as model:
        board.write_workflow(codex=codex_settings(model))
        run = start(board, codex_env, watch=False)
        try:
            await run.until(
                lambda: "ABC-1" in run.orchestrator.state.retry_attempts, timeout=TIMEOUT_S
            )
            retry = run.orchestrator.state.retry_attempts["ABC-1"]
        finally:
            await run.stop()

    assert_model_healthy(model)
    assert retry.attempt == 1
    assert (retry.error or "").startswith("turn 1: turn_failed: ")
    assert len(model.requests) == 1  # no hidden retries: request_max_retries=0
    assert board.state_of("ABC-1") == "Todo"


async def test_stalled_model_stream_is_stopped_by_stall_detection_and_retried_with_backoff(
    board: Board, codex_env: dict[str, str], codex_home: Path
) -> None:
    board.ticket("ABC-1")
    with FakeModel([Stall()]) as model:
        board.write_workflow(codex=codex_settings(model, stall_timeout_ms=2000), polling_ms=500)
        run = start(board, codex_env, watch=False)
        running = run.orchestrator.state.running
        try:
            # Codex is waiting on the model's stalled stream.
            await run.until(
                lambda: (
                    bool(model.requests) and "ABC-1" in running and running["ABC-1"].pid is not None
                ),
                timeout=TIMEOUT_S,
            )
            stalled = running["ABC-1"]
            pid = stalled.pid
            # Normally the first run; on a box so loaded that codex's startup alone outlasted
            # the stall timeout, a later one.
            expected_attempt = (stalled.attempt or 0) + 1
            await run.until(
                lambda: (
                    "ABC-1" not in running
                    and run.orchestrator.state.retry_attempts.get("ABC-1") is not None
                    and run.orchestrator.state.retry_attempts["ABC-1"].attempt == expected_attempt
                ),
                timeout=TIMEOUT_S,
            )
            retry = run.orchestrator.state.retry_attempts["ABC-1"]
            row = run.orchestrator.snapshot()["retrying"][0]
            leftovers = processes_using(codex_home)
        finally:
            await run.stop()

    assert_model_healthy(model)
    assert len(model.requests) == 1  # codex made one request and waited on it
    assert retry.attempt == expected_attempt
    assert (retry.error or "").startswith("stalled")
    backoff_s = 10 * 2 ** (expected_attempt - 1)  # 10 s for the usual attempt 1
    assert row["issue_identifier"] == "ABC-1"
    assert backoff_s - 2 <= row["due_in_seconds"] <= backoff_s
    assert pid is not None and not pid_alive(pid)
    # Neither the agent's process group nor the codex binary survived the stop.
    assert [p for p in leftovers if p.pgid == pid or "app-server" in p.command] == []


def rust_backtraces(env: dict[str, str], *, enabled: bool) -> dict[str, str]:
    """`env` with Rust backtraces pinned on or off, whatever the machine sets."""
    env = {name: value for name, value in env.items() if name != "RUST_LIB_BACKTRACE"}
    env["RUST_BACKTRACE"] = "1" if enabled else "0"
    return env


async def test_startup_error_of_codex_is_reported_not_waited_out(
    board: Board, codex_env: dict[str, str]
) -> None:
    board.ticket("ABC-1")
    read_timeout_ms = 60_000
    with FakeModel([Say("never asked")]) as model:
        board.write_workflow(
            codex={
                **codex_settings(model, read_timeout_ms=read_timeout_ms),
                # codex 0.171 refuses the chat wire API when it starts.
                "command": codex_command(model.base_url, wire_api="chat"),
            }
        )
        started = time.monotonic()
        run = start(board, rust_backtraces(codex_env, enabled=False), watch=False)
        try:
            await run.until(
                lambda: "ABC-1" in run.orchestrator.state.retry_attempts, timeout=TIMEOUT_S
            )
            elapsed = time.monotonic() - started
            retry = run.orchestrator.state.retry_attempts["ABC-1"]
        finally:
            await run.stop()

    assert model.requests == []
    assert retry.attempt == 1
    error = retry.error or ""
    assert error.startswith("agent startup: port_exit: the agent exited with code 1")
    assert 'wire_api = "chat"` is no longer supported' in error
    assert elapsed < read_timeout_ms / 1000 / 3


async def test_startup_error_reason_survives_a_rust_backtrace_on_stderr(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    with FakeModel([Say("never asked")]) as model:
        settings = CodexSettings(
            **{**codex_settings(model), "command": codex_command(model.base_url, wire_api="chat")}
        )
        session = AppServerSession(
            AgentLaunch(
                workspace=tmp_path, settings=settings, env=rust_backtraces(codex_env, enabled=True)
            )
        )
        try:
            with pytest.raises(AgentError) as failure:
                await asyncio.wait_for(session.start(), TIMEOUT_S)
        finally:
            await session.stop()

    assert failure.value.category == PORT_EXIT
    assert 'wire_api = "chat"` is no longer supported' in failure.value.message


async def test_error_lines_codex_writes_to_stderr_are_logged_as_warnings(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    with FakeModel([Say("never asked")]) as model, capture_logs() as logs:
        session = AppServerSession(
            AgentLaunch(
                workspace=tmp_path, settings=CodexSettings(**codex_settings(model)), env=codex_env
            )
        )
        try:
            await asyncio.wait_for(session.start(), TIMEOUT_S)
        finally:
            await session.stop()

    stderr = [log for log in logs if log["event"] == "agent_stderr"]
    errors = [log for log in stderr if "ERROR" in log["line"]]
    if not errors:
        # Codex logs an ERROR at startup when bubblewrap is not on PATH; with it, nothing to see.
        pytest.skip("codex wrote no ERROR line to stderr on this machine")
    assert [log["log_level"] for log in errors] == ["warning"] * len(errors)


async def test_a_thread_interrupted_by_a_restart_is_resumed_with_its_history_and_tools(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    """What a restarted daemon relies on: a new codex process continues the thread by id,
    with the conversation so far and the dynamic tools it was started with."""
    calls: list[Any] = []

    async def handle_tool(name: str, arguments: Any) -> ToolResult:
        calls.append((name, arguments))
        return ToolResult(True, {"recorded": True})

    tool = ToolSpec("report_outcome", "Report the outcome.", {"type": "object"})

    def script(request: ModelRequest) -> list[Step]:
        if request.prompt.startswith("first"):
            return [Say("first turn done")]
        return [CallTool("report_outcome", {"outcome": "done"}), Say("second turn done")]

    def launch(resume: str | None) -> AppServerSession:
        return AppServerSession(
            AgentLaunch(
                workspace=tmp_path,
                settings=CodexSettings(**codex_settings(model)),
                env=codex_env,
                tools=(tool,),
                handle_tool=handle_tool,
                resume_thread_id=resume,
            )
        )

    with FakeModel(script) as model:
        first = launch(None)
        try:
            await asyncio.wait_for(first.start(), TIMEOUT_S)
            await asyncio.wait_for(first.run_turn("first prompt", title="T"), TIMEOUT_S)
        finally:
            await first.stop()
        thread_id = first.thread_id
        second = launch(thread_id)
        try:
            await asyncio.wait_for(second.start(), TIMEOUT_S)
            await asyncio.wait_for(second.run_turn("second prompt", title="T"), TIMEOUT_S)
        finally:
            await second.stop()

    assert_model_healthy(model)
    assert second.resumed and second.thread_id == thread_id
    resumed = [r for r in model.requests if r.prompt == "second prompt"]
    assert resumed, "the resumed thread never reached the model"
    assert "first prompt" in resumed[0].user_texts  # the history came along
    assert "report_outcome" in resumed[0].tool_names
    assert calls == [("report_outcome", {"outcome": "done"})]


async def test_what_codex_reports_it_used_is_priced_into_the_tickets_cost(
    board: Board, codex_env: dict[str, str]
) -> None:
    board.ticket("ABC-1")
    script = [
        Shell("printf hi > hi.txt"),
        CallTool(MOVE_TOOL, {"state": "Human Review"}),
        Say("ok"),
    ]
    pricing = {"fake-model": {"input": 1.25, "cached_input": 0.125, "output": 10.0}}
    with FakeModel(script) as model:
        board.write_workflow(codex=codex_settings(model), pricing=pricing)
        run = start(board, codex_env, watch=False)
        try:
            await run.until(
                lambda: (
                    board.state_of("ABC-1") == "Human Review" and not run.orchestrator.state.running
                ),
                timeout=TIMEOUT_S,
            )
        finally:
            await run.stop()
    assert_model_healthy(model)
    input_tokens, cached, output = model.reported_usage
    assert cached > 0  # the fake model reports cache hits: they must be priced apart
    expected = Price(1.25, 10.0, 0.125).cost_usd(input_tokens, cached, output)
    totals = run.orchestrator.state.ticket_totals["ABC-1"]
    assert (totals.input_tokens, totals.cached_input_tokens, totals.output_tokens) == (
        input_tokens,
        cached,
        output,
    )
    assert totals.known_cost_usd == pytest.approx(expected)
    assert run.orchestrator.state.model_costs["fake-model"].known_usd == pytest.approx(expected)

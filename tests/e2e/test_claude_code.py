"""Claude Code for real: the pinned `claude` binary against a fake Anthropic API on 127.0.0.1.

One workflow plans a ticket on Claude Code (its report comes over the daemon's MCP tool server)
and implements it on codex (its report over dynamicTools); a spec-mode ticket is moved by
Claude through the tracker's own tool; a turn edits a file; the session continues across turns
on one Claude session; a model error is retried by Claude within its bound; a stalled stream
is stopped by the daemon's own stall timer and the ticket retried; the cost is Anthropic's list
price of what the fake reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.agents import AgentError, AgentLaunch
from symphony.agents.claude import ClaudeSession
from symphony.agents.tool_server import ToolServer
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.claude import parse_settings
from symphony.config.pricing import DEFAULT_PRICES
from tests.e2e.conftest import (
    CLAUDE_BIN,
    claude_agent_environment,
    claude_environment,
    codex_command,
    processes_using,
)
from tests.e2e.fake_model import CallTool, FakeModel, ModelRequest, Say, Step
from tests.fakes.fake_anthropic import USAGE, FakeAnthropic
from tests.harness import Board
from tests.harness import start as start_spec
from tests.stage_flow import StageRun, two_stages

pytestmark = pytest.mark.slow

MODEL = "claude-sonnet-4-5"
REPORT_PLAN = json.dumps(
    {"outcome": "done", "summary": "Planned.", "plan": "1. Add the function.\n2. Test it."}
)


def claude_block(**overrides: Any) -> dict[str, Any]:
    return {"command": str(CLAUDE_BIN), "model": MODEL, "read_timeout_ms": 30_000, **overrides}


def codex_script(request: ModelRequest) -> list[Step]:
    done = {"outcome": "done", "summary": "Implemented the plan."}
    return [CallTool("report_outcome", done), Say("Implemented.")]


def write_stage_workflow(root: Path, model: FakeModel) -> Path:
    plan_prompt = (
        "Plan ticket {{ issue.identifier }}. "
        f"<<tool mcp__symphony__report_outcome {REPORT_PLAN}>> <<text The plan is reported.>>"
    )
    config = {
        "tracker": {
            "kind": "local",
            "provider": {"path": "board"},
            "terminal_states": ["Done", "Cancelled"],
        },
        "polling": {"interval_ms": 60_000},
        "workspace": {"root": "workspaces"},
        "agent": {"max_concurrent_agents": 2, "max_retry_backoff_ms": 1000},
        "codex": {
            "command": codex_command(model.base_url),
            "approval_policy": "never",
            "thread_sandbox": "danger-full-access",
            "read_timeout_ms": 30_000,
        },
        "claude": claude_block(),
        "stages": two_stages(plan={"agent": "claude", "prompt": plan_prompt}),
        "escalation_state": "Needs Attention",
    }
    path = root / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
    return path


def state_of(root: Path, identifier: str) -> str:
    text = (root / "board" / f"{identifier}.md").read_text()
    return str(yaml.safe_load(text.split("---")[1])["state"])


def set_state(root: Path, identifier: str, state: str) -> None:
    path = root / "board" / f"{identifier}.md"
    path.write_text(
        path.read_text().replace(f"state: {state_of(root, identifier)}", f"state: {state}", 1)
    )


async def test_plan_on_claude_code_and_implement_on_codex_move_the_ticket_through_the_machine(
    tmp_path: Path, claude_home: Path, codex_env: dict[str, str]
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1", state="Todo")
    with FakeAnthropic() as anthropic, FakeModel(codex_script) as model:
        workflow = write_stage_workflow(tmp_path, model)
        env = {**codex_env, **claude_environment(claude_home, anthropic.base_url)}
        env["CODEX_HOME"] = codex_env["CODEX_HOME"]
        run = StageRun(workflow, env, timeout=90)
        try:
            await run.settle("ABC-1", lambda: state_of(tmp_path, "ABC-1") == "Plan Review")
            text = (tmp_path / "board" / "ABC-1.md").read_text()
            assert "— symphony · plan" in text and "1. Add the function." in text
            # Claude's report could only come over the daemon's MCP server.
            assert len(anthropic.requests) >= 2 and not model.requests
            set_state(tmp_path, "ABC-1", "Ready")
            run.orchestrator.request_refresh()
            await run.settle("ABC-1", lambda: state_of(tmp_path, "ABC-1") == "Human Review")
        finally:
            await run.stop()
    # The implement turn went to codex: its model saw the dynamic tool call.
    assert any(
        item.get("type") == "function_call" and item.get("name") == "report_outcome"
        for request in model.requests
        for item in request.body.get("input", [])
        if isinstance(item, dict)
    )
    totals = run.orchestrator.state.ticket_totals["ABC-1"]
    # Claude's model is priced; the fake codex model is not, so the ticket's cost is unknown.
    assert totals.cost_by_stage["plan"] > 0 and totals.unpriced_tokens > 0


async def test_claude_moves_a_spec_mode_ticket_with_the_trackers_tool_over_mcp(
    tmp_path: Path, claude_home: Path
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    move = json.dumps({"state": "Human Review"})
    with FakeAnthropic() as anthropic:
        board.write_workflow(
            agent={"kind": "claude", "max_turns": 2},
            prompt="Finish {{ issue.identifier }}. "
            f"<<tool mcp__symphony__local_move_issue {move}>>",
            claude=claude_block(),
        )
        run = start_spec(board, claude_environment(claude_home, anthropic.base_url), watch=False)
        try:
            # The run's end: a stop would revoke its token before the call with the tool's answer.
            await run.until(
                lambda: (
                    board.state_of("ABC-1") == "Human Review" and not run.orchestrator.state.running
                ),
                timeout=60,
            )
        finally:
            await run.stop()
    results = [r for request in anthropic.requests for r in request["tool_results"]]
    assert any("Human Review" in r for r in results), results


class Session:
    """A ClaudeSession on its own, with a tool server and a record of its events."""

    def __init__(self, workspace: Path, env: dict[str, str], **settings: Any) -> None:
        self.events: list[AgentEvent] = []
        self.calls: list[tuple[str, Any]] = []
        self.tools = ToolServer()
        self.workspace, self.env, self.settings = workspace, env, settings
        self.session: ClaudeSession | None = None

    async def handle(self, name: str, arguments: Any) -> ToolResult:
        self.calls.append((name, arguments))
        return ToolResult(True, {"ok": True})

    async def open(self, resume: str | None = None) -> ClaudeSession:
        spec = ToolSpec("echo_tool", "Echo", {"type": "object", "properties": {}})
        grant = await self.tools.grant([spec], self.handle)
        launch = AgentLaunch(
            workspace=self.workspace,
            settings=parse_settings(claude_block(**self.settings)),
            env=self.env,
            tools=[spec],
            handle_tool=self.handle,
            on_event=self.events.append,
            resume_thread_id=resume,
            kind="claude",
            tool_grant=grant,
        )
        self.session = ClaudeSession(launch)
        await self.session.start()
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.stop()
        await self.tools.close()

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture
async def anthropic() -> Any:
    with FakeAnthropic() as server:
        yield server


async def test_a_turn_edits_a_file_and_the_next_continues_the_same_session_at_list_price(
    tmp_path: Path, claude_home: Path, anthropic: FakeAnthropic
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    client = Session(workspace, claude_agent_environment(claude_home, anthropic.base_url))
    try:
        session = await client.open()
        first = await session.run_turn(
            "Write it. <<bash echo hi > hello.txt>> <<text written>>", title="t"
        )
        second = await session.run_turn(
            "Now call the tool. <<tool mcp__symphony__echo_tool {}>>", title="t"
        )
    finally:
        await client.close()
    assert (workspace / "hello.txt").read_text() == "hi\n"
    assert first.message == "written" and second.message == "done"
    assert client.calls == [("echo_tool", {})]
    started = [e for e in client.events if e.kind == "session_started"]
    assert len(started) == 1 and started[0].model == MODEL
    # One Claude session for both turns: the second request carried the first turn's history.
    assert len({e.session_id for e in client.events if e.session_id}) == 1
    assert anthropic.requests[-1]["messages"] > anthropic.requests[0]["messages"]
    assert "approval_auto_approved" in client.kinds()
    (last,) = [e for e in client.events if e.kind == "token_usage"][-1:]
    calls = len(anthropic.requests)
    assert last.usage is not None and last.usage.output_tokens == calls * USAGE["output_tokens"]
    assert last.usage.cached_input_tokens == calls * USAGE["cache_read_input_tokens"]
    assert last.usage.cache_write_tokens == calls * USAGE["cache_creation_input_tokens"]
    price = DEFAULT_PRICES["claude-sonnet-4*"]
    ours = price.cost_usd(
        last.usage.input_tokens - last.usage.cache_write_tokens,
        last.usage.cached_input_tokens,
        last.usage.output_tokens,
        last.usage.cache_write_tokens,
    )
    # Claude's own estimate is the same list price: the pricing table agrees with it.
    assert last.reported_cost_usd == pytest.approx(ours)


async def test_a_model_error_is_retried_by_claude_within_its_bound(
    tmp_path: Path, claude_home: Path, anthropic: FakeAnthropic
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    client = Session(workspace, claude_agent_environment(claude_home, anthropic.base_url))
    try:
        session = await client.open()
        result = await session.run_turn("Try. <<fail 500 1>> <<text recovered>>", title="t")
    finally:
        await client.close()
    assert result.message == "recovered"
    assert any("api_retry" in (e.message or "") for e in client.events)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, LimitKind.OUTAGE),
        (529, LimitKind.OVERLOADED),
        (429, LimitKind.RATE),
        (400, None),  # the request's fault, not the provider's
    ],
)
async def test_a_model_error_past_the_retries_fails_the_turn(
    tmp_path: Path,
    claude_home: Path,
    anthropic: FakeAnthropic,
    status: int,
    kind: LimitKind | None,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **claude_agent_environment(claude_home, anthropic.base_url),
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    client = Session(workspace, env)
    try:
        session = await client.open()
        with pytest.raises(AgentError) as failed:
            await session.run_turn(f"Try. <<fail {status} 9>>", title="t")
    finally:
        await client.close()
    assert failed.value.category == "turn_failed" and str(status) in failed.value.message
    # A model server's refusal is the provider's limit; a bad request is the work's failure.
    assert (failed.value.limit.kind if failed.value.limit else None) is kind


async def test_a_stalled_stream_is_stopped_by_the_daemon_and_the_ticket_retried(
    tmp_path: Path, claude_home: Path
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    seen: list[tuple[dict[str, str], str]] = []
    with FakeAnthropic() as anthropic:
        board.write_workflow(
            agent={"kind": "claude", "max_retry_backoff_ms": 500},
            prompt="Work on {{ issue.identifier }}. <<stall 600>>",
            claude=claude_block(stall_timeout_ms=1500),
        )
        env = {
            **claude_environment(claude_home, anthropic.base_url),
            "AWS_SECRET_ACCESS_KEY": "canary-aws",
            "DATABASE_URL": "postgres://canary",
        }
        run = start_spec(board, env, watch=False)
        try:
            await run.until(lambda: bool(claude_processes(claude_home, seen)), timeout=30)
            await run.until(
                lambda: (
                    (retry := run.orchestrator.state.retry_attempts.get("ABC-1")) is not None
                    and retry.attempt >= 2
                ),
                timeout=60,
            )
            retry = run.orchestrator.state.retry_attempts["ABC-1"]
            assert "stalled" in (retry.error or "")
        finally:
            await run.stop()
    assert len(anthropic.requests) >= 2  # the retry asked the model again
    # What the real Claude process had: the allowlist, its own variables, its tool token in
    # its environment and never on its command line.
    environ, cmdline = seen[0]
    assert "AWS_SECRET_ACCESS_KEY" not in environ and "DATABASE_URL" not in environ
    # Its model through the daemon's gateway, with a token of the run's for the key.
    assert environ["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert environ["ANTHROPIC_BASE_URL"].endswith("/anthropic")
    assert environ["ANTHROPIC_API_KEY"].startswith("sym-")
    assert {r["api_key"] for r in anthropic.requests} == {"sk-ant-fake-key"}
    token = environ["SYMPHONY_MCP_TOKEN"]
    assert token and token not in cmdline and "${SYMPHONY_MCP_TOKEN}" in cmdline


def claude_processes(home: Path, into: list[tuple[dict[str, str], str]]) -> bool:
    """Record the environment and command line of a live Claude process of this test."""
    for process in processes_using(home / ".claude", "CLAUDE_CONFIG_DIR"):
        try:
            raw = Path(f"/proc/{process.pid}/environ").read_bytes()
        except OSError:
            continue
        environ = dict(
            item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
        )
        if "SYMPHONY_MCP_TOKEN" in environ and "--input-format" in process.command:
            into.append((environ, process.command))
            return True
    return False

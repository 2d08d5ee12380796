"""An ACP agent for real: Zed's Claude Code adapter (`@zed-industries/claude-agent-acp`,
pinned) against the fake Anthropic API. The workflow of the Claude Code tests with the plan
stage on ACP; a turn after a failed one runs on a fresh process and loads the same session
(the adapter answers the prompt after an error with the previous turn's leftovers otherwise);
no adapter process or child outlives a stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.agents import AgentError, AgentLaunch
from symphony.agents.acp import AcpSession
from symphony.agents.tool_server import ToolServer
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.acp import parse_settings
from tests.e2e.conftest import (
    E2E_DIR,
    claude_agent_environment,
    claude_environment,
    codex_command,
)
from tests.e2e.fake_model import CallTool, FakeModel, ModelRequest, Say, Step
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.harness import Board
from tests.stage_flow import StageRun, two_stages

pytestmark = pytest.mark.slow

ADAPTER = E2E_DIR / "node_modules" / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"
REPORT_PLAN = json.dumps({"outcome": "done", "summary": "Planned.", "plan": "1. Do it."})


@pytest.fixture
def adapter(claude_home: Path) -> Path:
    if not ADAPTER.exists():
        pytest.skip(f"the ACP adapter is not installed at {ADAPTER}; run npm ci --prefix tests/e2e")
    return ADAPTER


def acp_block(**overrides: Any) -> dict[str, Any]:
    return {"command": f"node {ADAPTER}", "read_timeout_ms": 30_000, **overrides}


def codex_script(request: ModelRequest) -> list[Step]:
    return [CallTool("report_outcome", {"outcome": "done", "summary": "Built."}), Say("Built.")]


def state_of(root: Path, identifier: str) -> str:
    text = (root / "board" / f"{identifier}.md").read_text()
    return str(yaml.safe_load(text.split("---")[1])["state"])


async def test_plan_on_an_acp_agent_and_implement_on_codex_move_the_ticket_through_the_machine(
    tmp_path: Path, adapter: Path, claude_home: Path, codex_env: dict[str, str]
) -> None:
    Board(tmp_path).ticket("ABC-1", state="Todo")
    plan = f"Plan {{{{ issue.identifier }}}}. <<tool mcp__symphony__report_outcome {REPORT_PLAN}>>"
    with FakeAnthropic() as anthropic, FakeModel(codex_script) as model:
        config = {
            "tracker": {"kind": "local", "provider": {"path": "board"}},
            "polling": {"interval_ms": 60_000},
            "workspace": {"root": "workspaces"},
            "agent": {"max_retry_backoff_ms": 1000},
            "codex": {
                "command": codex_command(model.base_url),
                "thread_sandbox": "danger-full-access",
                "read_timeout_ms": 30_000,
            },
            "acp": acp_block(),
            "stages": two_stages(plan={"agent": "acp", "prompt": plan}),
            "escalation_state": "Needs Attention",
        }
        workflow = tmp_path / "WORKFLOW.md"
        workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
        env = {**codex_env, **claude_environment(claude_home, anthropic.base_url)}
        run = StageRun(workflow, env, timeout=90)
        try:
            await run.settle("ABC-1", lambda: state_of(tmp_path, "ABC-1") == "Plan Review")
            assert "— symphony · plan" in (tmp_path / "board" / "ABC-1.md").read_text()
            assert anthropic.requests and not model.requests
            # The adapter's session says `default`; the run is priced by what it stands for.
            (totals,) = run.orchestrator.state.ticket_totals.values()
            assert totals.unpriced_tokens == 0 and totals.cost_by_stage["plan"] > 0
            path = tmp_path / "board" / "ABC-1.md"
            path.write_text(path.read_text().replace("state: Plan Review", "state: Ready", 1))
            run.orchestrator.request_refresh()
            await run.settle("ABC-1", lambda: state_of(tmp_path, "ABC-1") == "Human Review")
        finally:
            await run.stop()
    assert model.requests  # the implement stage ran on codex


async def test_the_turn_after_a_failed_one_runs_on_a_fresh_process_of_the_same_session(
    tmp_path: Path, adapter: Path, claude_home: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    events: list[AgentEvent] = []
    tools = ToolServer()

    async def handle(name: str, arguments: Any) -> ToolResult:
        return ToolResult(True, {})

    spec = ToolSpec("echo_tool", "Echo", {"type": "object", "properties": {}})
    with FakeAnthropic() as anthropic:
        env = {
            **claude_agent_environment(claude_home, anthropic.base_url),
            "CLAUDE_CODE_MAX_RETRIES": "1",
        }
        launch = AgentLaunch(
            workspace=workspace,
            settings=parse_settings(acp_block()),
            env=env,
            tools=[spec],
            handle_tool=handle,
            on_event=events.append,
            kind="acp",
            tool_grant=await tools.grant([spec], handle),
        )
        session = AcpSession(launch)
        try:
            await session.start()
            first_pid = session.pid
            with pytest.raises(AgentError) as failed:
                await session.run_turn("Try. <<fail 500 9>>", title="t")
            assert failed.value.category == "turn_failed"
            assert failed.value.limit is not None
            assert failed.value.limit.kind is LimitKind.OUTAGE
            second = await session.run_turn("Again. <<text second answer>>", title="t")
            assert second.message == "second answer"
            assert session.pid != first_pid  # retired, not prompted again
            third = await session.run_turn("Once more. <<text third answer>>", title="t")
            assert third.message == "third answer"
        finally:
            await session.stop()
            await tools.close()
    started = {e.session_id for e in events if e.session_id}
    assert len(started) == 1  # one ACP session throughout, loaded in the fresh process

"""The ACP session against a scripted agent: the protocol version is checked, permission
requests are answered by policy, file-system requests refused, usage and the agent's own cost
reported, a running prompt cancelled on stop, and an agent that ignores SIGTERM still ended."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from symphony.agents import AgentError, AgentLaunch
from symphony.agents.acp import AcpSession
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from symphony.config.acp import parse_settings
from tests.harness import is_alive

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "fake_acp_agent.py"


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.workspace = tmp_path / "ws"
        self.workspace.mkdir()
        self.record = tmp_path / "record.jsonl"
        self.events: list[AgentEvent] = []

    def session(self, approve: str = "allow", **env: str) -> AcpSession:
        launch = AgentLaunch(
            workspace=self.workspace,
            settings=parse_settings(
                {"command": f"{sys.executable} {FAKE}", "approve": approve, "read_timeout_ms": 5000}
            ),
            env={"PATH": os.environ["PATH"], "FAKE_ACP_RECORD": str(self.record), **env},
            on_event=self.events.append,
            kind="acp",
        )
        return AcpSession(launch, stop_grace_s=0.5)

    def received(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


async def test_a_turn_reports_the_message_usage_and_the_agents_own_cost(harness: Harness) -> None:
    session = harness.session(FAKE_ACP_PROMPT="say:all ,say:done")
    await session.start()
    try:
        result = await session.run_turn("go", title="t")
    finally:
        await session.stop()
    assert result.message == "all done"
    (usage,) = [e.usage for e in harness.events if e.kind == "token_usage"]
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (145, 40, 5)
    assert any(e.reported_cost_usd == 0.25 for e in harness.events)
    started = [e for e in harness.events if e.kind == "session_started"]
    assert started[0].model == "fake-acp-model"
    new = [m for m in harness.received() if m.get("method") == "session/new"]
    assert new[0]["params"]["cwd"] == str(harness.workspace) and new[0]["jsonrpc"] == "2.0"


@pytest.mark.parametrize(("approve", "option"), [("allow", "once"), ("deny", "no")])
async def test_permission_requests_are_answered_by_the_workflows_policy(
    harness: Harness, approve: str, option: str
) -> None:
    session = harness.session(approve, FAKE_ACP_PROMPT="permission,read_file,say:ok")
    await session.start()
    try:
        result = await session.run_turn("go", title="t")
    finally:
        await session.stop()
    (answer,) = [m["permission_answer"] for m in harness.received() if "permission_answer" in m]
    assert answer["result"]["outcome"] == {"outcome": "selected", "optionId": option}
    (read,) = [m["read_file_answer"] for m in harness.received() if "read_file_answer" in m]
    assert read["error"]["code"] == -32601  # no file-system capability was offered
    assert result.message is not None and "refused" in result.message
    kinds = {e.kind for e in harness.events}
    assert ("approval_auto_approved" if approve == "allow" else "permission_denied") in kinds


async def test_an_agent_of_another_protocol_version_fails_at_start(harness: Harness) -> None:
    session = harness.session(FAKE_ACP_VERSION="2")
    with pytest.raises(AgentError) as failed:
        await session.start()
    assert failed.value.category == "startup_failed" and "version 2" in failed.value.message
    assert session.pid is None


async def test_stop_cancels_the_running_prompt_and_ends_an_agent_that_ignores_sigterm(
    harness: Harness,
) -> None:
    session = harness.session(FAKE_ACP_PROMPT="hang", FAKE_ACP_IGNORE_TERM="1")
    await session.start()
    pid = session.pid
    assert pid is not None
    turn = asyncio.create_task(session.run_turn("go", title="t"))
    await asyncio.sleep(0.3)
    await session.stop()
    with pytest.raises(AgentError):
        await turn
    assert not is_alive(pid)
    assert any(m.get("method") == "session/cancel" for m in harness.received())


async def test_an_error_reply_fails_the_turn(harness: Harness) -> None:
    session = harness.session(FAKE_ACP_PROMPT="error")
    await session.start()
    try:
        with pytest.raises(AgentError) as failed:
            await session.run_turn("go", title="t")
    finally:
        await session.stop()
    assert failed.value.category == "turn_failed" and "boom" in failed.value.message
    assert failed.value.limit is None  # the agent's failure, not the provider's


async def refused(harness: Harness, reason: str) -> AgentError:
    """The error of a turn whose prompt the agent refused with `reason`."""
    session = harness.session(FAKE_ACP_PROMPT="error", FAKE_ACP_ERROR=reason)
    await session.start()
    try:
        with pytest.raises(AgentError) as failed:
            await session.run_turn("go", title="t")
    finally:
        await session.stop()
    return failed.value


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (
            'API Error: 429 {"type":"error","error":{"type":"rate_limit_error",'
            '"message":"Number of requests has exceeded your rate limit"}}',
            LimitKind.RATE,
        ),
        (
            'API Error: 529 {"type":"error","error":{"type":"overloaded_error",'
            '"message":"Overloaded"}}',
            LimitKind.OVERLOADED,
        ),
        # As measured with claude-agent-acp and a model answering HTTP 500.
        (
            'API Error: 500 {"type":"error","error":{"type":"api_error","message":"fake 500"}}',
            LimitKind.OUTAGE,
        ),
    ],
)
async def test_a_prompt_the_model_server_refused_carries_the_providers_limit(
    harness: Harness, reason: str, kind: LimitKind
) -> None:
    failed = await refused(harness, reason)
    assert failed.category == "turn_failed"
    assert failed.limit is not None and failed.limit.kind is kind
    assert "API Error" in failed.limit.detail


async def test_a_prompt_refused_for_a_bad_request_is_an_ordinary_failure(
    harness: Harness,
) -> None:
    reason = 'API Error: 400 {"type":"error","error":{"type":"invalid_request_error"}}'
    failed = await refused(harness, reason)
    assert failed.category == "turn_failed" and failed.limit is None


# What the Claude Code adapter advertises: an alias as the current model, its words saying
# which model it stands for.
ADAPTER_MODELS = {
    "currentModelId": "default",
    "availableModels": [
        {"modelId": "default", "name": "Default (recommended)",
         "description": "Use the default model (currently Sonnet 4.5) · $3/$15 per Mtok"},
        {"modelId": "opus", "name": "Opus", "description": "Opus 4.1 for complex work"},
        {"modelId": "haiku", "name": "Haiku", "description": "Haiku 4.5 for quick answers"},
    ],
}  # fmt: skip


def test_an_alias_is_resolved_to_the_model_it_stands_for() -> None:
    from symphony.agents.acp import concrete_model

    assert concrete_model(ADAPTER_MODELS) == "claude-sonnet-4-5"
    assert concrete_model({**ADAPTER_MODELS, "currentModelId": "opus"}) == "claude-opus-4-1"
    assert concrete_model({"currentModelId": "gemini-2.5-pro"}) == "gemini-2.5-pro"
    assert concrete_model({"currentModelId": "mystery"}) == "mystery"  # honest: unknown price
    assert concrete_model({}) is None and concrete_model(None) is None


async def test_the_session_reports_the_resolved_model_and_asks_for_a_configured_one(
    harness: Harness, tmp_path: Path
) -> None:
    models = json.dumps(ADAPTER_MODELS)
    session = harness.session(FAKE_ACP_MODELS=models)
    await session.start()
    await session.stop()
    (started,) = [e for e in harness.events if e.kind == "session_started"]
    assert started.model == "claude-sonnet-4-5"
    assert not [m for m in harness.received() if m.get("method") == "session/set_model"]

    harness.events.clear()
    launch = AgentLaunch(
        workspace=harness.workspace,
        settings=parse_settings(
            {"command": f"{sys.executable} {FAKE}", "model": "haiku", "read_timeout_ms": 5000}
        ),
        env={
            "PATH": os.environ["PATH"],
            "FAKE_ACP_RECORD": str(harness.record),
            "FAKE_ACP_MODELS": models,
        },
        on_event=harness.events.append,
        kind="acp",
    )
    chosen = AcpSession(launch, stop_grace_s=0.5)
    await chosen.start()
    await chosen.stop()
    (asked,) = [m for m in harness.received() if m.get("method") == "session/set_model"]
    assert asked["params"] == {"sessionId": "sess-1", "modelId": "haiku"}
    (started,) = [e for e in harness.events if e.kind == "session_started"]
    assert started.model == "claude-haiku-4-5"  # the alias, as the agent describes it


async def test_an_agent_that_never_answers_initialize_names_acp_read_timeout_ms(
    tmp_path: Path,
) -> None:
    launch = AgentLaunch(
        workspace=tmp_path,
        settings=parse_settings({"command": "exec sleep 30", "read_timeout_ms": 300}),
        env={"PATH": os.environ["PATH"]},
        on_event=lambda event: None,
        kind="acp",
    )
    session = AcpSession(launch, stop_grace_s=0.3)
    with pytest.raises(AgentError) as caught:
        await session.start()
    assert caught.value.message == (
        "no reply to initialize within 300 ms; raise acp.read_timeout_ms in WORKFLOW.md if "
        "the agent needs longer"
    )

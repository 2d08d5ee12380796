"""AppServerSession against real subprocesses running the scripted fake app-server."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from symphony.agents import (
    CODEX_NOT_FOUND,
    INVALID_WORKSPACE_CWD,
    PORT_EXIT,
    RESPONSE_ERROR,
    RESPONSE_TIMEOUT,
    TURN_CANCELLED,
    TURN_FAILED,
    TURN_INPUT_REQUIRED,
    TURN_TIMEOUT,
    AgentError,
    AgentLaunch,
    ToolHandler,
)
from symphony.agents.codex import AppServerSession
from symphony.base.events import AgentEvent, TokenUsage
from symphony.base.limits import LimitKind
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.codex import CodexSettings

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "fake_app_server.py"
FAKE_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}"

MOVE_TOOL = ToolSpec(
    name="move_issue",
    description="Move the issue to another state.",
    input_schema={
        "type": "object",
        "properties": {"state": {"type": "string"}},
        "required": ["state"],
    },
)


class Harness:
    """One workspace, record file and event list per test; builds sessions on the fake."""

    def __init__(self, tmp_path: Path) -> None:
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()
        self.record = tmp_path / "record.jsonl"
        self.events: list[AgentEvent] = []
        self.sessions: list[AppServerSession] = []

    def session(
        self,
        scenario: str = "complete",
        *,
        command: str = FAKE_COMMAND,
        env: dict[str, str] | None = None,
        tools: Sequence[ToolSpec] = (),
        handler: ToolHandler | None = None,
        stop_grace_s: float = 2.0,
        workspace: Path | None = None,
        **settings: Any,
    ) -> AppServerSession:
        launch_env = dict(os.environ) if env is None else dict(env)
        launch_env.setdefault("FAKE_AGENT_SCENARIO", scenario)
        launch_env.setdefault("FAKE_AGENT_RECORD", str(self.record))
        launch = AgentLaunch(
            workspace=self.workspace if workspace is None else workspace,
            settings=CodexSettings(command=command, **settings),
            env=launch_env,
            tools=tools,
            handle_tool=handler,
            on_event=self.events.append,
        )
        session = AppServerSession(launch, stop_grace_s=stop_grace_s)
        self.sessions.append(session)
        return session

    def received(self, method: str | None = None) -> list[dict[str, Any]]:
        """What the fake read from the client (its own startup line excluded)."""
        if not self.record.exists():
            return []
        lines = [json.loads(line) for line in self.record.read_text().splitlines()]
        messages = [line for line in lines if "_fake" not in line]
        if method is None:
            return messages
        return [message for message in messages if message.get("method") == method]

    def fake_info(self, kind: str = "started") -> dict[str, Any]:
        for line in self.record.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("_fake") == kind:
                return dict(entry)
        raise AssertionError(f"the fake recorded no {kind!r} line")

    def replies(self) -> list[dict[str, Any]]:
        return [m for m in self.received() if "method" not in m and "id" in m]

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    def of_kind(self, kind: str) -> list[AgentEvent]:
        return [event for event in self.events if event.kind == kind]


@pytest.fixture
async def harness(tmp_path: Path) -> Any:
    h = Harness(tmp_path)
    yield h
    for session in h.sessions:
        await session.stop()


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie waiting for a reaper counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pid: int, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# -- launch and handshake ----------------------------------------------------------------------


async def test_launch_runs_command_through_login_bash_in_workspace(harness: Harness) -> None:
    # Arithmetic expansion and `shopt login_shell` only work if bash -lc runs the command.
    command = (
        f"SHELL_CHECK=$((6*7)) LOGIN_CHECK=$(shopt -q login_shell && echo yes) exec {FAKE_COMMAND}"
    )
    session = harness.session(
        "write_file",
        command=command,
        env={**os.environ, "FAKE_AGENT_RECORD_ENV": "SHELL_CHECK,LOGIN_CHECK"},
    )
    await session.start()
    await session.run_turn("please write this down", title="ABC-1: write")

    info = harness.fake_info()
    assert info["cwd"] == str(harness.workspace)
    assert info["env"] == {"SHELL_CHECK": "42", "LOGIN_CHECK": "yes"}
    assert (harness.workspace / "agent-output.txt").read_text() == "please write this down"


async def test_initialize_declares_client_info_and_experimental_api(harness: Harness) -> None:
    session = harness.session()
    await session.start()

    messages = harness.received()
    assert [m.get("method") for m in messages[:3]] == ["initialize", "initialized", "thread/start"]
    params = messages[0]["params"]
    assert params["clientInfo"]["name"] == "symphony"
    assert isinstance(params["clientInfo"]["version"], str)
    assert params["capabilities"] == {"experimentalApi": True}
    assert all(isinstance(m["id"], int) for m in messages if "id" in m)


async def test_thread_start_carries_cwd_policies_and_dynamic_tools(harness: Harness) -> None:
    session = harness.session(
        tools=[MOVE_TOOL], approval_policy="on-request", thread_sandbox="read-only"
    )
    await session.start()

    (thread_start,) = harness.received("thread/start")
    assert thread_start["params"] == {
        "cwd": str(harness.workspace),
        "approvalPolicy": "on-request",
        "sandbox": "read-only",
        "dynamicTools": [
            {
                "type": "function",
                "name": "move_issue",
                "description": "Move the issue to another state.",
                "inputSchema": dict(MOVE_TOOL.input_schema),
            }
        ],
    }


async def test_thread_start_omits_dynamic_tools_when_none_are_advertised(
    harness: Harness,
) -> None:
    session = harness.session()
    await session.start()

    (thread_start,) = harness.received("thread/start")
    assert "dynamicTools" not in thread_start["params"]


async def test_session_started_event_carries_pid_and_thread_id(harness: Harness) -> None:
    session = harness.session()
    await session.start()

    (started,) = harness.of_kind("session_started")
    assert started.pid == session.pid is not None
    assert started.thread_id == "thr-fake-0001"


async def test_invalid_workspace_is_refused_before_launch(harness: Harness) -> None:
    session = harness.session(workspace=harness.workspace / "missing")
    with pytest.raises(AgentError) as caught:
        await session.start()
    assert caught.value.category == INVALID_WORKSPACE_CWD
    assert session.pid is None


async def test_relative_workspace_is_refused(harness: Harness) -> None:
    session = harness.session(workspace=Path("workspace"))
    with pytest.raises(AgentError) as caught:
        await session.start()
    assert caught.value.category == INVALID_WORKSPACE_CWD


async def test_environment_is_passed_exactly(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYMPHONY_TEST_TRACKER_TOKEN", "s3cret")
    env = {k: v for k, v in os.environ.items() if k != "SYMPHONY_TEST_TRACKER_TOKEN"}
    env["ONLY_IN_LAUNCH_ENV"] = "1"
    session = harness.session(env=env)
    await session.start()

    names = harness.fake_info()["env_names"]
    assert "SYMPHONY_TEST_TRACKER_TOKEN" not in names
    assert "ONLY_IN_LAUNCH_ENV" in names


# -- turns ---------------------------------------------------------------------------------------


async def test_turn_start_sends_prompt_cwd_and_policies_but_no_title(harness: Harness) -> None:
    policy = {"type": "workspaceWrite", "networkAccess": False}
    session = harness.session(turn_sandbox_policy=policy)
    await session.start()
    await session.run_turn("fix the bug", title="ABC-1: Fix the bug")

    (turn_start,) = harness.received("turn/start")
    assert turn_start["params"] == {
        "threadId": "thr-fake-0001",
        "input": [{"type": "text", "text": "fix the bug"}],
        "cwd": str(harness.workspace),
        "approvalPolicy": "never",
        "sandboxPolicy": policy,
    }


async def test_completed_turn_returns_session_id_and_last_agent_message(
    harness: Harness,
) -> None:
    session = harness.session()
    await session.start()
    result = await session.run_turn("fix the bug", title="ABC-1")

    assert result.turn_id == "turn-0001"
    assert result.session_id == "thr-fake-0001-turn-0001"
    assert result.message == "done: fix the bug"
    (turn_started,) = harness.of_kind("turn_started")
    assert turn_started.session_id == result.session_id
    assert turn_started.turn_id == "turn-0001"
    assert harness.kinds()[-1] == "turn_completed"
    notifications = [e.message or "" for e in harness.of_kind("notification")]
    assert any(m.startswith("item/completed agentMessage done: fix") for m in notifications)
    assert all(e.pid == session.pid for e in harness.events)


async def test_token_usage_events_carry_absolute_thread_totals(harness: Harness) -> None:
    session = harness.session()
    await session.start()
    await session.run_turn("one", title="t")
    await session.run_turn("two", title="t")

    usages = [event.usage for event in harness.of_kind("token_usage")]
    # The fake reports per-call usage (120/30, 200/45) as `last`; only running totals count.
    # A quarter of each input came from the prompt cache (part of the input, priced apart).
    assert usages == [
        TokenUsage(120, 30, 150, 30),
        TokenUsage(320, 75, 395, 80),
        TokenUsage(440, 105, 545, 110),
        TokenUsage(640, 150, 790, 160),
    ]
    assert harness.of_kind("token_usage")[-1].session_id == "thr-fake-0001-turn-0002"


async def test_rate_limits_are_extracted(harness: Harness) -> None:
    session = harness.session()
    await session.start()
    await session.run_turn("go", title="t")

    limits = [event.rate_limits for event in harness.of_kind("rate_limits")]
    assert len(limits) == 2
    assert limits[0] is not None
    assert limits[0]["limitId"] == "codex"
    assert limits[0]["primary"]["usedPercent"] == 15


async def test_two_turns_share_one_thread_and_one_process(harness: Harness) -> None:
    session = harness.session()
    await session.start()
    pid = session.pid
    first = await session.run_turn("first", title="t")
    second = await session.run_turn("continue", title="t")

    assert first.session_id == "thr-fake-0001-turn-0001"
    assert second.session_id == "thr-fake-0001-turn-0002"
    assert session.pid == pid
    assert len(harness.received("thread/start")) == 1
    assert [m["params"]["threadId"] for m in harness.received("turn/start")] == [
        "thr-fake-0001",
        "thr-fake-0001",
    ]


async def test_failed_turn_raises_turn_failed_with_the_error_message(harness: Harness) -> None:
    session = harness.session("fail")
    await session.start()
    with pytest.raises(AgentError) as caught:
        await session.run_turn("go", title="t")

    assert caught.value.category == TURN_FAILED
    assert "context window" in caught.value.message
    assert caught.value.limit is None  # the work's failure, not the provider's
    assert any("error Codex ran out" in (e.message or "") for e in harness.events)
    assert harness.kinds()[-1] == "turn_failed"


async def test_a_used_up_usage_window_fails_the_turn_with_a_usage_limit_until_its_reset(
    harness: Harness,
) -> None:
    session = harness.session("usage_limit")
    await session.start()
    with pytest.raises(AgentError) as caught:
        await session.run_turn("go", title="t")

    limit = caught.value.limit
    assert caught.value.category == TURN_FAILED and limit is not None
    assert limit.kind is LimitKind.USAGE
    assert "usage limit" in limit.detail
    # The reset of the used-up window (primary), not the later one of the window with room;
    # the sparse update that followed (primary null) did not erase it.
    first = harness.of_kind("rate_limits")[0].rate_limits
    assert first is not None
    assert limit.resets_at == datetime.fromtimestamp(first["primary"]["resetsAt"], UTC)
    assert 0 < (limit.resets_at - datetime.now(UTC)).total_seconds() <= 6
    # The dashboard still sees every snapshot, as before.
    assert len(harness.of_kind("rate_limits")) == 2
    assert harness.kinds()[-1] == "turn_failed"


@pytest.mark.parametrize(
    ("scenario", "kind"),
    [
        ("rate_limited", LimitKind.RATE),
        ("overloaded", LimitKind.OVERLOADED),
        ("outage", LimitKind.OUTAGE),
    ],
)
async def test_a_turn_the_provider_refused_carries_its_limit(
    harness: Harness, scenario: str, kind: LimitKind
) -> None:
    session = harness.session(scenario)
    await session.start()
    with pytest.raises(AgentError) as caught:
        await session.run_turn("go", title="t")

    assert caught.value.category == TURN_FAILED
    assert caught.value.limit is not None and caught.value.limit.kind is kind
    assert caught.value.limit.resets_at is None  # no window named a reset


async def test_interrupted_turn_raises_turn_cancelled(harness: Harness) -> None:
    session = harness.session("interrupted")
    await session.start()
    with pytest.raises(AgentError) as caught:
        await session.run_turn("go", title="t")

    assert caught.value.category == TURN_CANCELLED
    assert harness.kinds()[-1] == "turn_cancelled"


# -- server requests ------------------------------------------------------------------------------


async def test_tool_call_runs_handler_and_replies_with_content_items(harness: Harness) -> None:
    calls: list[tuple[str, Any]] = []

    async def handler(name: str, arguments: Any) -> ToolResult:
        calls.append((name, arguments))
        return ToolResult(True, {"moved": True, "state": arguments["state"]})

    session = harness.session(
        "tool",
        env={
            **os.environ,
            "FAKE_AGENT_TOOL": "move_issue",
            "FAKE_AGENT_TOOL_ARGS": json.dumps({"state": "Human Review"}),
        },
        tools=[MOVE_TOOL],
        handler=handler,
    )
    await session.start()
    result = await session.run_turn("go", title="t")

    assert calls == [("move_issue", {"state": "Human Review"})]
    (reply,) = harness.replies()
    assert reply["id"] == 0
    assert reply["result"] == {
        "success": True,
        "contentItems": [
            {"type": "inputText", "text": json.dumps({"moved": True, "state": "Human Review"})}
        ],
    }
    assert result.message is not None
    assert '"moved": true' in result.message
    (event,) = harness.of_kind("tool_call")
    assert event.message == "move_issue success=true"


async def test_unknown_tool_gets_failure_result_and_session_continues(harness: Harness) -> None:
    async def handler(name: str, arguments: Any) -> ToolResult:
        raise AssertionError("an unadvertised tool must not reach the handler")

    session = harness.session(
        "tool,complete",
        env={**os.environ, "FAKE_AGENT_TOOL": "drop_database"},
        tools=[MOVE_TOOL],
        handler=handler,
    )
    await session.start()
    first = await session.run_turn("go", title="t")
    second = await session.run_turn("again", title="t")

    (reply,) = harness.replies()
    assert reply["result"] == {
        "success": False,
        "contentItems": [{"type": "inputText", "text": "unsupported_tool_call: drop_database"}],
    }
    assert (
        first.message
        == "tool drop_database replied success=False: unsupported_tool_call: drop_database"
    )
    assert second.message == "done: again"
    (event,) = harness.of_kind("unsupported_tool_call")
    assert event.message == "drop_database"


async def test_tool_handler_exception_becomes_failure_result(harness: Harness) -> None:
    async def handler(name: str, arguments: Any) -> ToolResult:
        raise RuntimeError("tracker unreachable")

    session = harness.session(
        "tool",
        env={**os.environ, "FAKE_AGENT_TOOL": "move_issue"},
        tools=[MOVE_TOOL],
        handler=handler,
    )
    await session.start()
    result = await session.run_turn("go", title="t")

    (reply,) = harness.replies()
    assert reply["result"]["success"] is False
    assert "tracker unreachable" in reply["result"]["contentItems"][0]["text"]
    assert result.message is not None and "success=False" in result.message
    assert harness.of_kind("tool_call")[0].message == "move_issue success=false"


async def test_tool_handler_returning_garbage_still_gets_a_failure_reply(
    harness: Harness,
) -> None:
    async def handler(name: str, arguments: Any) -> ToolResult:
        return None  # type: ignore[return-value]

    session = harness.session(
        "tool",
        env={**os.environ, "FAKE_AGENT_TOOL": "move_issue"},
        tools=[MOVE_TOOL],
        handler=handler,
    )
    await session.start()
    await session.run_turn("go", title="t")

    (reply,) = harness.replies()
    assert reply["result"]["success"] is False
    assert "AttributeError" in reply["result"]["contentItems"][0]["text"]


async def test_approval_requests_are_answered_with_accept(harness: Harness) -> None:
    session = harness.session("approval")
    await session.start()
    result = await session.run_turn("go", title="t")

    assert result.message == "approved and done"
    assert [r["result"] for r in harness.replies()] == [
        {"decision": "accept"},
        {"decision": "accept"},
    ]
    approvals = harness.of_kind("approval_auto_approved")
    assert len(approvals) == 2
    assert approvals[0].message is not None and "echo hi > hello.txt" in approvals[0].message


async def test_legacy_approval_requests_are_answered_with_approved(harness: Harness) -> None:
    session = harness.session("legacy_approval")
    await session.start()
    result = await session.run_turn("go", title="t")

    assert result.message == "legacy approvals granted"
    assert [r["result"] for r in harness.replies()] == [
        {"decision": "approved"},
        {"decision": "approved"},
    ]


async def test_user_input_request_fails_turn_without_hanging(harness: Harness) -> None:
    session = harness.session("input")
    await session.start()
    with pytest.raises(AgentError) as caught:
        async with asyncio.timeout(5):
            await session.run_turn("go", title="t")

    assert caught.value.category == TURN_INPUT_REQUIRED
    assert "drop the production table" in caught.value.message
    (reply,) = harness.replies()
    assert reply["result"] == {"answers": {}}
    (interrupt,) = harness.received("turn/interrupt")
    assert interrupt["params"] == {"threadId": "thr-fake-0001", "turnId": "turn-0001"}
    assert harness.kinds().count("turn_input_required") == 1
    assert "turn_ended_with_error" not in harness.kinds()


async def test_unknown_server_request_is_answered_with_an_error(harness: Harness) -> None:
    session = harness.session("unknown_request")
    await session.start()
    result = await session.run_turn("go", title="t")

    (reply,) = harness.replies()
    assert reply["error"] == {
        "code": -32601,
        "message": "unsupported by symphony: item/somethingNew/request",
    }
    assert result.message == "client declined: unsupported by symphony: item/somethingNew/request"


# -- transport -------------------------------------------------------------------------------------


async def test_malformed_and_oversized_lines_are_skipped(harness: Harness) -> None:
    session = harness.session("malformed")
    await session.start()
    result = await session.run_turn("go", title="t")

    assert result.message == "survived the noise"
    malformed = [event.message or "" for event in harness.of_kind("malformed")]
    assert len(malformed) == 2
    assert malformed[0].startswith("not JSON: this line is not JSON")
    assert "longer than" in malformed[1]


async def test_stderr_is_not_parsed_as_protocol(harness: Harness) -> None:
    session = harness.session(env={**os.environ, "FAKE_AGENT_STDERR_JSON": "1"})
    await session.start()
    result = await session.run_turn("go", title="t")

    assert result.message == "done: go"
    assert not any("from stderr" in (event.message or "") for event in harness.events)


# -- failures and timeouts ------------------------------------------------------------------


async def test_read_timeout_when_initialize_is_never_answered(harness: Harness) -> None:
    session = harness.session(command="exec sleep 30", read_timeout_ms=300, stop_grace_s=0.3)
    started = time.monotonic()
    with pytest.raises(AgentError) as caught:
        await session.start()

    assert caught.value.category == RESPONSE_TIMEOUT
    assert "initialize" in caught.value.message
    # It says which setting allows a slow agent more time.
    assert "raise codex.read_timeout_ms in WORKFLOW.md" in caught.value.message
    assert time.monotonic() - started < 2.5
    assert session.pid is not None
    assert await wait_gone(session.pid)
    assert harness.kinds() == ["startup_failed"]


async def test_turn_timeout_when_agent_goes_silent(harness: Harness) -> None:
    session = harness.session("hang", turn_timeout_ms=300, stop_grace_s=0.4)
    await session.start()
    started = time.monotonic()
    with pytest.raises(AgentError) as caught:
        await session.run_turn("go", title="t")

    assert caught.value.category == TURN_TIMEOUT
    assert 0.25 < time.monotonic() - started < 1.5
    assert harness.kinds()[-1] == "turn_ended_with_error"


async def test_steady_output_keeps_a_turn_alive_past_the_turn_timeout(harness: Harness) -> None:
    session = harness.session(
        "slow", env={**os.environ, "FAKE_AGENT_DURATION_MS": "700"}, turn_timeout_ms=300
    )
    await session.start()
    result = await session.run_turn("go", title="t")

    assert result.message == "slow and steady"


async def test_crash_mid_turn_reports_port_exit_with_stderr_tail(harness: Harness) -> None:
    session = harness.session("crash")
    await session.start()
    with pytest.raises(AgentError) as caught:
        await session.run_turn("go", title="t")

    assert caught.value.category == PORT_EXIT
    assert "exited with code 3" in caught.value.message
    assert "simulated crash" in caught.value.message
    with pytest.raises(AgentError) as again:
        await session.run_turn("again", title="t")
    assert again.value.category == PORT_EXIT


async def test_exit_during_startup_fails_fast_with_the_reason(harness: Harness) -> None:
    command = (
        'echo \'Error: wire_api = "chat" is no longer supported. '
        'How to fix: set wire_api = "responses"\' >&2; exit 1'
    )
    session = harness.session(command=command, read_timeout_ms=10_000)
    started = time.monotonic()
    with pytest.raises(AgentError) as caught:
        await session.start()

    assert caught.value.category == PORT_EXIT
    assert "exited with code 1" in caught.value.message
    assert 'wire_api = "chat" is no longer supported' in caught.value.message
    assert time.monotonic() - started < 3


async def test_missing_command_reports_codex_not_found(harness: Harness) -> None:
    session = harness.session(command="symphony-no-such-agent-binary app-server")
    with pytest.raises(AgentError) as caught:
        await session.start()

    assert caught.value.category == CODEX_NOT_FOUND
    assert "symphony-no-such-agent-binary app-server" in caught.value.message
    assert "command not found" in caught.value.message


async def test_error_reply_to_a_request_raises_response_error(harness: Harness) -> None:
    # An agent that refuses every request.
    script = (
        "import sys, json\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if 'id' in m:\n"
        "        print(json.dumps({'id': m['id'], 'error': {'code': -32600,"
        " 'message': 'Invalid request: nope'}}), flush=True)\n"
    )
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"
    session = harness.session(command=command)
    with pytest.raises(AgentError) as caught:
        await session.start()

    assert caught.value.category == RESPONSE_ERROR
    assert "initialize failed: Invalid request: nope" in caught.value.message


# -- stop ------------------------------------------------------------------------------------------


async def test_stop_ends_a_cooperative_agent_by_closing_stdin(harness: Harness) -> None:
    session = harness.session()
    await session.start()
    await session.run_turn("go", title="t")
    pid = session.pid
    assert pid is not None
    started = time.monotonic()
    await session.stop()

    assert time.monotonic() - started < 1.0
    assert not alive(pid)
    assert harness.received("turn/interrupt") == []


async def test_stop_kills_a_wedged_agent_and_its_children(harness: Harness) -> None:
    session = harness.session(
        "hang",
        env={
            **os.environ,
            "FAKE_AGENT_IGNORE_EOF": "1",
            "FAKE_AGENT_IGNORE_SIGTERM": "1",
            "FAKE_AGENT_SPAWN_CHILD": "1",
        },
        turn_timeout_ms=200,
        stop_grace_s=0.3,
    )
    await session.start()
    with pytest.raises(AgentError):
        await session.run_turn("go", title="t")
    pid = session.pid
    assert pid is not None
    child = harness.fake_info("child")["pid"]
    assert alive(child)

    await session.stop()

    assert not alive(pid)
    assert await wait_gone(child)
    (interrupt,) = harness.received("turn/interrupt")
    assert interrupt["params"]["turnId"] == "turn-0001"


async def test_stop_kills_a_descendant_that_left_the_agents_process_group(
    harness: Harness,
) -> None:
    session = harness.session(
        "hang", env={**os.environ, "FAKE_AGENT_SPAWN_CHILD": "setsid"}, turn_timeout_ms=200
    )
    await session.start()
    with pytest.raises(AgentError):
        await session.run_turn("go", title="t")
    child = harness.fake_info("child")["pid"]
    assert alive(child) and os.getpgid(child) != session.pid  # out of the group's reach

    await session.stop()

    assert await wait_gone(child)


async def test_stop_is_idempotent_and_safe_after_failure(harness: Harness) -> None:
    session = harness.session("crash")
    await session.start()
    with pytest.raises(AgentError):
        await session.run_turn("go", title="t")
    await session.stop()
    await session.stop()

    never_started = harness.session()
    await never_started.stop()
    await never_started.stop()


async def test_cancelled_stop_still_reaps_the_agent(harness: Harness) -> None:
    session = harness.session(
        "hang",
        env={**os.environ, "FAKE_AGENT_IGNORE_EOF": "1"},
        stop_grace_s=0.3,
    )
    await session.start()
    pid = session.pid
    assert pid is not None

    stopping = asyncio.create_task(session.stop())
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping

    assert not alive(pid)


async def test_cancelled_turn_then_stop_interrupts_and_reaps(harness: Harness) -> None:
    session = harness.session("hang", stop_grace_s=0.4)
    await session.start()
    pid = session.pid
    assert pid is not None

    async def worker() -> None:
        try:
            await session.run_turn("go", title="t")
        finally:
            await session.stop()

    task = asyncio.create_task(worker())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert not alive(pid)
    assert len(harness.received("turn/interrupt")) == 1


# -- the quickstart's demonstration agent --------------------------------------------------------

DEMO = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "demo_agent.py"


async def test_quickstart_demo_agent_commits_notes_and_moves_its_ticket(harness: Harness) -> None:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=harness.workspace, capture_output=True, text=True, check=True
        )
        return done.stdout

    git("init", "--quiet")
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "--quiet",
        "--allow-empty",
        "-m",
        "init",
    )
    calls: list[tuple[str, Any]] = []

    async def handler(name: str, arguments: Any) -> ToolResult:
        calls.append((name, arguments))
        return ToolResult(True, {"state": arguments["state"], "changed": True})

    move = ToolSpec("local_move_issue", "Move the ticket.", {"type": "object"})
    session = harness.session(
        command=f"{shlex.quote(sys.executable)} {shlex.quote(str(DEMO))}",
        env={**os.environ, "DEMO_AGENT_DELAY_MS": "0"},
        tools=[move],
        handler=handler,
    )
    await session.start()
    result = await session.run_turn(
        "You are working on ticket DEMO-7: Add a changelog.\n\nPlease add one.", title="DEMO-7"
    )

    notes = (harness.workspace / "NOTES" / "DEMO-7.md").read_text()
    assert notes.startswith("# DEMO-7: Add a changelog\n")
    assert "> Please add one." in notes
    assert (
        git("log", "-1", "--format=%an %s").strip() == "symphony-demo DEMO-7: demo notes (turn 1)"
    )
    assert calls == [("local_move_issue", {"state": "Human Review"})]
    assert result.message == "Wrote NOTES/DEMO-7.md, committed it, moved DEMO-7 to Human Review."
    assert harness.of_kind("token_usage")[-1].usage is not None


async def test_a_burst_of_streaming_deltas_reaches_the_sink_coalesced(harness: Harness) -> None:
    env = dict(os.environ, FAKE_AGENT_STREAM_LINES="5000")
    session = harness.session("stream", env=env)
    await session.start()
    await session.run_turn("stream", title="t")

    assert session.lines_read > 5000
    deltas = [e for e in harness.of_kind("notification") if (e.message or "").endswith("elta")]
    # Written in one burst, well within a quarter second: a handful of events, not thousands.
    assert 1 <= len(deltas) <= 10
    # Everything else still arrives: the turn's outcome, its usage and its last message.
    assert harness.of_kind("turn_completed")[0].message == "streamed"
    assert harness.of_kind("token_usage")


def test_a_delta_inside_the_interval_is_known_from_its_raw_line() -> None:
    """The coalescing fast path: only a delta's method, in compact or spaced JSON, in any key
    order, is read without decoding; anything else is decoded."""
    from types import SimpleNamespace

    from symphony.agents.codex import AppServerSession, _is_delta

    assert _is_delta(b'{"method":"item/agentMessage/delta","params":{"delta":"x"}}')
    assert _is_delta(b'{"method": "item/commandExecution/outputDelta", "params": {}}')
    assert _is_delta(b'{"params":{"delta":"x"},"method":"item/reasoning/summaryTextDelta"}')
    assert not _is_delta(b'{"method":"turn/completed","params":{"turn":{"id":"t"}}}')
    assert not _is_delta(b'{"id":3,"result":{}}')
    assert not _is_delta(b'{"method":"item/agentMessage/delta","params":{"delta":"cut')
    session = AppServerSession.__new__(AppServerSession)
    session._process = SimpleNamespace(last_output=10.0)  # type: ignore[assignment]
    handled: list[bytes] = []
    session._rpc = SimpleNamespace(handle_line=handled.append)  # type: ignore[assignment]
    session._last_delta_event = 9.9  # a delta event went out 100 ms ago
    delta = b'{"method":"item/agentMessage/delta","params":{"delta":"x"}}'
    done = b'{"method":"turn/completed","params":{"turn":{"id":"t"}}}'
    session._on_lines([delta, done, delta])
    assert handled == [done]  # inside the interval: only what is not a delta is decoded
    session._last_delta_event = 9.0  # the interval passed: the next delta is decoded
    session._on_lines([delta])
    assert handled == [done, delta]

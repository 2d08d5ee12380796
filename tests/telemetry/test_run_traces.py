"""A run's trace: exported over OTLP/HTTP, decoded by the official protobuf definitions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from symphony.agents.claude import ClaudeSettings
from symphony.agents.registry import backend
from symphony.base.events import AgentEvent
from symphony.config.telemetry import TelemetrySettings
from symphony.daemon.runner import run_attempt
from symphony.telemetry import NO_TRACER, Tracer, export_headers, header_secrets, tracer_from_env
from tests.daemon.test_runner import EchoingTracker, ScriptedTracker, context
from tests.factories import make_issue
from tests.harness import Board, scenario_env, start
from tests.otlp_receiver import Receiver, start_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got, server = start_receiver()
    yield got
    server.shutdown()


async def test_a_run_yields_one_trace_with_its_turns_and_tool_calls(
    tmp_path: Path, receiver: Receiver
) -> None:
    tracer = tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    issue = make_issue("ABC-1")
    tracker = EchoingTracker(issue, ["In Progress", "Done"])
    record = tmp_path / "agent.jsonl"
    ctx = context(
        tmp_path, tracker, FAKE_AGENT_SCENARIO="tool,complete", FAKE_AGENT_TOOL="slow_tool",
        FAKE_AGENT_RECORD=str(record), FAKE_AGENT_RECORD_ENV="TRACEPARENT",
    )  # fmt: skip
    events: list[AgentEvent] = []
    await run_attempt(issue, 2, replace(ctx, tracer=tracer), events.append)
    tracer.shutdown()

    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    [root] = receiver.named("symphony.run")
    assert {s.trace_id for s in receiver.spans} == {root.trace_id}
    assert root.parent_id == "" and not root.error and root.service == "symphony"
    assert root.attributes["symphony.ticket"] == "ABC-1"
    assert root.attributes["symphony.attempt"] == 2
    assert root.attributes["gen_ai.system"] == "codex"
    assert root.attributes["gen_ai.request.model"] == "fake-model"
    assert root.attributes["gen_ai.usage.input_tokens"] > 0
    children = {s.name: s for s in receiver.spans if s.parent_id == root.span_id}
    assert set(children) == {"symphony.workspace", "symphony.turn 1", "symphony.turn 2"}
    [tool] = receiver.named("symphony.tool slow_tool")
    assert tool.parent_id == children["symphony.turn 1"].span_id
    assert tool.attributes["gen_ai.tool.name"] == "slow_tool"
    assert tool.attributes["symphony.tool.success"] is False
    turn = children["symphony.turn 2"]
    assert turn.attributes["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.prompt" not in turn.attributes  # prompt text is off by default
    # The agent was handed the run's trace context: its own spans join this trace.
    handed = json.loads(record.read_text().splitlines()[0])["env"]["TRACEPARENT"]
    assert handed == f"00-{root.trace_id}-{root.span_id}-01"


async def test_without_telemetry_the_agent_gets_no_trace_context(tmp_path: Path) -> None:
    issue = make_issue("ABC-4")
    record = tmp_path / "agent.jsonl"
    ctx = context(
        tmp_path, ScriptedTracker(issue, ["Done"]), FAKE_AGENT_SCENARIO="complete",
        FAKE_AGENT_RECORD=str(record), FAKE_AGENT_RECORD_ENV="TRACEPARENT",
    )  # fmt: skip
    await run_attempt(issue, None, ctx, lambda event: None)
    assert json.loads(record.read_text().splitlines()[0])["env"]["TRACEPARENT"] is None


async def test_a_run_stopped_mid_turn_still_ends_every_span(
    tmp_path: Path, receiver: Receiver
) -> None:
    tracer = tracer_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url + "/traces"})
    issue = make_issue("ABC-2")
    ctx = context(tmp_path, ScriptedTracker(issue, ["In Progress"]), FAKE_AGENT_SCENARIO="hang")
    events: list[AgentEvent] = []
    running = asyncio.ensure_future(
        run_attempt(issue, None, replace(ctx, tracer=tracer), events.append)
    )
    while not any(e.kind == "turn_started" for e in events):
        await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    tracer.shutdown()

    assert set(receiver.paths) == {"/traces"}
    names = {s.name: s for s in receiver.spans}
    assert set(names) == {"symphony.run", "symphony.workspace", "symphony.turn 1"}
    assert names["symphony.run"].error and names["symphony.turn 1"].error


async def test_an_unreachable_collector_neither_blocks_nor_raises(tmp_path: Path) -> None:
    tracer = tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    issue = make_issue("ABC-3")
    ctx = context(tmp_path, ScriptedTracker(issue, ["Done"]), FAKE_AGENT_SCENARIO="complete")
    await asyncio.wait_for(
        run_attempt(issue, None, replace(ctx, tracer=tracer), lambda event: None), 30
    )
    tracer.shutdown()


def test_without_an_endpoint_the_sdk_is_never_imported() -> None:
    assert tracer_from_env({}) is NO_TRACER
    probe = (
        "import sys; from symphony.telemetry import tracer_from_env;"
        " import symphony.daemon.runner; tracer_from_env({});"
        " print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_a_daemon_stopped_with_a_run_in_its_turn_flushes_the_run_s_ended_spans(
    tmp_path: Path, receiver: Receiver
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(telemetry={"endpoint": receiver.url + "/v1/traces"})
    run = start(board, scenario_env("hang"))
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running, timeout=20)
        await run.until(lambda: bool(run.orchestrator.state.running["ABC-1"].turn_count))
    finally:
        await run.stop()
    [root] = receiver.named("symphony.run")
    assert root.attributes["symphony.ticket"] == "ABC-1" and root.error
    assert {s.name for s in receiver.spans} >= {"symphony.workspace", "symphony.turn 1"}
    assert all(s.trace_id == root.trace_id for s in receiver.spans)


def _started(record: Path) -> dict[str, Any]:
    first: dict[str, Any] = json.loads(record.read_text().splitlines()[0])
    return first


async def _run_recorded(
    tmp_path: Path, tracer: Tracer, **changes: Any
) -> tuple[list[str], dict[str, str | None]]:
    """A run with the fake codex that records its command line and its exporter's headers."""
    issue = make_issue("ABC-5")
    record = tmp_path / "agent.jsonl"
    ctx = context(
        tmp_path, ScriptedTracker(issue, ["Done"]), FAKE_AGENT_SCENARIO="complete",
        FAKE_AGENT_RECORD=str(record), FAKE_AGENT_RECORD_ENV=HEADERS,
    )  # fmt: skip
    await run_attempt(issue, None, replace(ctx, tracer=tracer, **changes), lambda event: None)
    tracer.shutdown()
    started = _started(record)
    return started["argv"], started["env"]


HEADERS = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"


async def test_codex_is_told_to_export_its_own_spans_to_the_collector_without_the_headers(
    tmp_path: Path, receiver: Receiver
) -> None:
    url = receiver.url + "/v1/traces"
    argv, env = await _run_recorded(tmp_path, tracer_from_env({}, endpoint=url))
    assert f'otel.trace_exporter.otlp-http.endpoint="{url}"' in argv
    assert 'otel.trace_exporter.otlp-http.protocol="binary"' in argv
    assert env[HEADERS] is None


async def test_the_export_headers_reach_the_agent_only_as_the_workflow_lets_them(
    tmp_path: Path, receiver: Receiver
) -> None:
    tracer = tracer_from_env({}, endpoint=receiver.url + "/v1/traces")
    _, env = await _run_recorded(tmp_path, tracer, trace_headers={HEADERS: "x-key=s3cret-value"})
    assert env[HEADERS] == "x-key=s3cret-value"


async def test_with_agents_off_the_agent_exports_nothing_of_its_own(
    tmp_path: Path, receiver: Receiver
) -> None:
    tracer = tracer_from_env({}, endpoint=receiver.url + "/v1/traces")
    settings = context(tmp_path, ScriptedTracker(make_issue("X-1"), [])).settings
    off = replace(settings, telemetry=TelemetrySettings(agents=False))
    argv, _ = await _run_recorded(tmp_path, tracer, settings=off)
    assert not any("otel." in word for word in argv)


def test_claude_code_is_given_its_tracing_switches_and_the_standard_variables() -> None:
    settings = ClaudeSettings()
    same, env = backend("claude").traces_to(settings, "http://collector:4318/v1/traces")
    assert same == settings
    assert env == {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }


def test_the_export_headers_values_are_secrets_the_daemon_masks() -> None:
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Basic dXNlcjpwYXNz,x-org=acme-org"}
    assert export_headers(env) == env["OTEL_EXPORTER_OTLP_HEADERS"]
    assert header_secrets(env) == [
        env["OTEL_EXPORTER_OTLP_HEADERS"],
        "Basic dXNlcjpwYXNz",
        "acme-org",
    ]

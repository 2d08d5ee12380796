"""A run's trace: exported over OTLP/HTTP, decoded by the official protobuf definitions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from symphony.base.events import AgentEvent
from symphony.daemon.runner import run_attempt
from symphony.telemetry import NO_TRACER, tracer_from_env
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

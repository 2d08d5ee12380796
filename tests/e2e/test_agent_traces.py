"""The real agents' own spans join the run's trace: the daemon points their exporters at the
same collector and hands them the run's `TRACEPARENT`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from symphony.agents.claude import ClaudeSettings
from symphony.agents.registry import backend
from symphony.telemetry import tracer_from_env
from tests.e2e.conftest import claude_agent_environment
from tests.e2e.fake_model import CallTool, FakeModel, Say, Shell
from tests.e2e.test_claude_code import Session
from tests.e2e.test_codex_app_server import MOVE_TOOL, TIMEOUT_S, codex_settings
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.harness import Board, start
from tests.otlp_receiver import Receiver, start_receiver

pytestmark = pytest.mark.slow


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got, server = start_receiver()
    yield got
    server.shutdown()


async def test_a_run_on_the_real_codex_yields_codex_spans_in_the_run_s_trace(
    board: Board, codex_env: dict[str, str], receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon exports with a header its agents must not get.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k3y-0f-the-daemon")
    board.ticket("ABC-1")
    script = [Shell("echo hi > hi.txt"), CallTool(MOVE_TOOL, {"state": "Human Review"}), Say("ok")]
    with FakeModel(script) as model:
        board.write_workflow(
            codex=codex_settings(model), telemetry={"endpoint": receiver.url + "/v1/traces"}
        )
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

    [root] = receiver.named("symphony.run")
    codex = [s for s in receiver.spans if s.service == "codex-app-server"]
    joined = [s for s in codex if s.trace_id == root.trace_id]
    # Most of what codex records is in the run's trace; its requests hang from the run's root.
    assert len(joined) > len(codex) / 2
    children = {s.name for s in joined if s.parent_id == root.span_id}
    assert {"initialize", "thread/start", "turn/start"} <= children
    # The daemon's export headers stayed with the daemon.
    by_codex = [h for h in receiver.headers if "Rust" in h.get("user-agent", "")]
    assert by_codex and all("x-collector-key" not in h for h in by_codex)
    assert any(h.get("x-collector-key") for h in receiver.headers)  # the daemon's own


async def test_the_real_claude_code_continues_the_trace_it_is_handed(
    tmp_path: Path, claude_home: Path, receiver: Receiver
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tracer = tracer_from_env({}, endpoint=receiver.url + "/v1/traces")
    parent = tracer.start("symphony.run")
    traceparent = parent.traceparent()
    assert traceparent is not None
    _, exporting = backend("claude").traces_to(ClaudeSettings(), receiver.url + "/v1/traces")
    with FakeAnthropic() as anthropic:
        env = {
            **claude_agent_environment(claude_home, anthropic.base_url),
            **exporting,
            "TRACEPARENT": traceparent,
        }
        client = Session(workspace, env)
        try:
            session = await client.open()
            said = await session.run_turn(
                "Write it. <<bash echo hi > hi.txt>> <<text done>>", title="t"
            )
        finally:
            await client.close()
            parent.end()
            tracer.shutdown()
    assert said.message == "done"

    _, trace_id, span_id, _ = traceparent.split("-")
    claude = [s for s in receiver.spans if s.service == "claude-code"]
    assert claude and all(s.trace_id == trace_id for s in claude)
    [interaction] = [s for s in claude if s.name == "claude_code.interaction"]
    assert interaction.parent_id == span_id
    assert {"claude_code.llm_request", "claude_code.tool"} <= {s.name for s in claude}

"""The model gateway end to end: the real codex and Claude Code binaries, run by the daemon with
an API key, call fake OpenAI Responses and Anthropic Messages servers through the daemon's
gateway. The key reaches the fake model and never the agent: not its environment
(`/proc/<pid>/environ`) nor any file of its home. The usage the gateway measured equals what the
fake reported; a budget the wire shows spent stops the next call; a usage limit the provider
answers pauses the agent kind until the reset.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from symphony.daemon.orchestrator import Orchestrator
from tests.e2e.conftest import CLAUDE_BIN, CODEX_BIN, claude_environment, processes_using
from tests.e2e.fake_model import CallTool, Fail, FakeModel, ModelRequest, Say, Shell, Step
from tests.fakes.fake_anthropic import USAGE, FakeAnthropic
from tests.harness import Board, start

pytestmark = pytest.mark.slow

SECRET = "sk-real-secret-0123456789abcdef"
TIMEOUT_S = 90.0
PRICING = {"fake-model": {"input": 1.25, "cached_input": 0.125, "output": 10.0}}


def gateway_codex() -> str:
    """The real codex with no model provider of its own: the daemon names the gateway."""
    return shlex.join([
        str(CODEX_BIN), "app-server", "-c", 'model="fake-model"', "-c", "features.plugins=false",
        "-c", "model_providers.symphony.request_max_retries=0",
        "-c", "model_providers.symphony.stream_max_retries=0",
    ])  # fmt: skip


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def files_holding(root: Path, text: str) -> list[Path]:
    """Every file under `root` whose bytes contain `text`."""
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


def codex_board(tmp_path: Path, model: FakeModel, **sections: Any) -> Board:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(
        codex={"command": gateway_codex(), "approval_policy": "never",
               "read_timeout_ms": 30_000, "turn_timeout_ms": 60_000},
        pricing=PRICING,
        **sections,
    )  # fmt: skip
    return board


def with_key(codex_env: dict[str, str], model: FakeModel) -> dict[str, str]:
    return {**codex_env, "OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": model.base_url}


def agent_environ(codex_home: Path, seen: list[dict[str, str]]) -> Callable[[], None]:
    """Records the environment of every live codex process of this test."""

    def look() -> None:
        for process in processes_using(codex_home):
            try:
                seen.append(environ_of(process.pid))
            except OSError:
                continue

    return look


async def test_codex_calls_its_model_through_the_gateway_and_never_holds_the_key(
    tmp_path: Path, codex_home: Path, codex_env: dict[str, str]
) -> None:
    seen: list[dict[str, str]] = []
    look = agent_environ(codex_home, seen)

    def script(request: ModelRequest) -> list[Step]:
        look()  # codex waits for this answer: its processes are live
        return [
            Shell("echo hi > hello.txt"),
            CallTool("local_move_issue", {"state": "Human Review"}),
            Say("done"),
        ]

    with FakeModel(script) as model:
        board = codex_board(tmp_path, model)
        run = start(board, with_key(codex_env, model), watch=False)
        daemon = run.orchestrator
        try:
            await run.until(
                lambda: board.state_of("ABC-1") == "Human Review" and not daemon.state.running,
                timeout=TIMEOUT_S,
            )
            gateway_url = daemon._performer.gateway().url
            assert gateway_url is not None and gateway_url.startswith("http://127.0.0.1:")
            held = files_holding(codex_home, SECRET)  # its sessions, logs and state
        finally:
            await run.stop()
    assert model.script_errors == [] and model.unexpected_requests == []
    # The fake saw the real key on every call; codex never had it.
    assert len(model.requests) == 3
    assert {r.headers.get("authorization") for r in model.requests} == {f"Bearer {SECRET}"}
    assert seen and all(SECRET not in "\0".join(e.values()) for e in seen)
    assert all(e["OPENAI_API_KEY"].startswith("sym-") for e in seen)
    assert all(e["OPENAI_BASE_URL"] == f"{gateway_url}/openai" for e in seen)
    assert held == [] and files_holding(tmp_path / "workspaces", SECRET) == []
    # The usage measured at the wire is the fake's, call for call.
    wire = daemon.state.wire_totals["ABC-1"]
    input_tokens, cached, output = model.reported_usage
    assert (wire.requests, wire.input_tokens, wire.cached_input_tokens, wire.output_tokens) == (
        3, input_tokens, cached, output,
    )  # fmt: skip
    totals = daemon.state.ticket_totals["ABC-1"]
    assert totals.total_tokens == wire.total_tokens  # codex reported the same
    assert wire.cost_usd == pytest.approx(totals.cost_usd)
    # The ticket's view shows both, and no difference between them.
    shown = await daemon.view.issue_detail("ABC-1")
    assert shown is not None and shown["wire"]["requests"] == 3
    assert shown["wire"]["total_tokens"] == totals.total_tokens
    assert shown["wire"]["difference_tokens"] == 0


async def test_a_budget_the_wire_shows_spent_stops_the_next_call(
    tmp_path: Path, codex_home: Path, codex_env: dict[str, str]
) -> None:
    def script(request: ModelRequest) -> list[Step]:
        return [Shell("echo one > one.txt"), Shell("echo two > two.txt"), Say("done")]

    with FakeModel(script) as model:
        # The first call costs $0.000314 at this price: it spends the budget.
        board = codex_board(
            tmp_path, model, budget={"per_ticket_usd": 0.0002, "on_exceeded": "Human Review"}
        )
        run = start(board, with_key(codex_env, model), watch=False)
        daemon = run.orchestrator
        try:
            await run.until(lambda: board.state_of("ABC-1") == "Human Review", timeout=TIMEOUT_S)
        finally:
            await run.stop()
    # The call after the one that spent it never reached the provider.
    assert len(model.requests) == 1
    assert daemon.state.wire_totals["ABC-1"].requests == 1
    assert "budget" in (board.tickets / "ABC-1.md").read_text()


async def test_a_usage_limit_at_the_wire_pauses_codex_until_the_reset(
    tmp_path: Path, codex_home: Path, codex_env: dict[str, str]
) -> None:
    reset = time.time() + 5
    refused = Fail(
        429,
        body={"error": {"type": "usage_limit_reached", "message": "The usage limit has been "
                        "reached", "resets_at": int(reset)}},
    )  # fmt: skip
    first = [True]

    def script(request: ModelRequest) -> list[Step]:
        if first[0]:
            first[0] = False
            return [refused]
        return [CallTool("local_move_issue", {"state": "Human Review"}), Say("done")]

    with FakeModel(script) as model:
        board = codex_board(tmp_path, model)
        run = start(board, with_key(codex_env, model), watch=False)
        daemon = run.orchestrator
        try:
            await run.until(lambda: "codex" in daemon.state.agent_pauses, timeout=TIMEOUT_S)
            pause = daemon.state.agent_pauses["codex"]
            assert pause.named and abs(pause.until.timestamp() - int(reset)) < 1
            await run.until(lambda: board.state_of("ABC-1") == "Human Review", timeout=TIMEOUT_S)
        finally:
            await run.stop()
    refused_at, *rest = model.requests
    assert rest and all(r.at >= refused_at.at + 5 - 1.5 for r in rest)
    assert not daemon.health.failures
    events = [row["event"] for row in daemon.activity.newest(100)]
    assert events.count("limited") == 1 and events.count("resumed") == 1


async def test_claude_code_calls_its_model_through_the_gateway_and_never_holds_the_key(
    tmp_path: Path, claude_home: Path
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    seen: list[dict[str, str]] = []
    with FakeAnthropic() as anthropic:
        board.write_workflow(
            agent={"kind": "claude", "max_turns": 1},
            prompt="Work on {{ issue.identifier }}. <<bash echo hi > hello.txt>> <<text done>>",
            claude={"command": str(CLAUDE_BIN), "model": "claude-sonnet-4-5",
                    "read_timeout_ms": 30_000},
        )  # fmt: skip
        env = {**claude_environment(claude_home, anthropic.base_url), "ANTHROPIC_API_KEY": SECRET}
        run = start(board, env, watch=False)
        daemon: Orchestrator = run.orchestrator

        def claude_seen() -> bool:
            for process in processes_using(claude_home / ".claude", "CLAUDE_CONFIG_DIR"):
                try:
                    seen.append(environ_of(process.pid))
                except OSError:
                    continue
            return bool(seen)

        try:
            await run.until(claude_seen, timeout=TIMEOUT_S)
            held = files_holding(claude_home, SECRET)
            await run.until(
                lambda: "ABC-1" in daemon.state.wire_totals and not daemon.state.running,
                timeout=TIMEOUT_S,
            )
        finally:
            await run.stop()
    assert len(anthropic.requests) >= 2
    assert {r["api_key"] for r in anthropic.requests} == {SECRET}
    assert all(SECRET not in "\0".join(e.values()) for e in seen)
    assert all(e["ANTHROPIC_API_KEY"].startswith("sym-") for e in seen)
    assert all("/anthropic" in e["ANTHROPIC_BASE_URL"] for e in seen)
    assert held == [] and files_holding(claude_home, SECRET) == []
    wire = daemon.state.wire_totals["ABC-1"]
    calls = len([r for r in anthropic.requests if r["stream"]])
    read, written = USAGE["cache_read_input_tokens"], USAGE["cache_creation_input_tokens"]
    assert wire.requests == calls
    assert wire.input_tokens == calls * (USAGE["input_tokens"] + read + written)
    assert wire.output_tokens == calls * USAGE["output_tokens"]
    assert daemon.state.ticket_totals["ABC-1"].total_tokens == wire.total_tokens

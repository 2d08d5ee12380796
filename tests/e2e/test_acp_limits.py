"""A real ACP agent refused by its model server: Zed's Claude Code adapter
(`@zed-industries/claude-agent-acp` 0.23.1, which runs the Claude Agent SDK's own Claude Code,
2.1.83) against the fake Anthropic API answering as the real one at its worst.

Measured: ACP has no field for a provider's limit. The adapter turns Claude's error result into
a JSON-RPC error of `session/prompt` (code -32603) whose message is the result's text:
`Internal error: API Error: 429 {"type":"error","error":{"type":"rate_limit_error",...}}` for an
API key's 429 (`API Error: 529 {...overloaded_error...}` for an overload), and for a
subscription's spent window `Internal error: You've hit your session limit · resets 7am (UTC)`:
the reset only as a clock time, rounded down to the minute, in the zone the agent runs in.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from symphony.agents import TURN_FAILED, AgentError, AgentLaunch
from symphony.agents.acp import AcpSession
from symphony.base.limits import LimitKind
from symphony.config.acp import parse_settings
from tests.e2e.conftest import claude_agent_environment, claude_environment
from tests.e2e.test_acp import ADAPTER, acp_block
from tests.e2e.test_claude_limits import as_subscriber, first
from tests.fakes.fake_anthropic import FakeAnthropic, overloaded, rate_limited, window_spent
from tests.harness import Board, start

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0


async def refused_prompt(workspace: Path, env: dict[str, str]) -> AgentError:
    session = AcpSession(
        AgentLaunch(
            workspace=workspace,
            settings=parse_settings(acp_block()),
            env={**env, "CLAUDE_CODE_MAX_RETRIES": "0"},
            kind="acp",
        )
    )
    try:
        await asyncio.wait_for(session.start(), TIMEOUT_S)
        with pytest.raises(AgentError) as caught:
            await asyncio.wait_for(session.run_turn("go", title="t"), TIMEOUT_S)
    finally:
        await session.stop()
    assert caught.value.category == TURN_FAILED
    return caught.value


@pytest.fixture
def adapter(claude_home: Path) -> Path:
    if not ADAPTER.exists():
        pytest.skip(f"the ACP adapter is not installed at {ADAPTER}; run npm ci --prefix tests/e2e")
    return ADAPTER


@pytest.fixture
def workspace(tmp_path: Path, adapter: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def test_a_429_from_the_model_ends_the_prompt_as_a_rate_limit(
    workspace: Path, claude_home: Path
) -> None:
    with FakeAnthropic(refuse=lambda _: rate_limited(30, time.time() + 30)) as api:
        error = await refused_prompt(workspace, claude_agent_environment(claude_home, api.base_url))
    assert len(api.requests) == 1
    assert (
        "Internal error: API Error: 429 " in error.message and "rate_limit_error" in error.message
    )
    assert error.limit is not None and error.limit.kind is LimitKind.RATE
    assert error.limit.resets_at is None  # nothing in the words names one


async def test_a_529_from_the_model_ends_the_prompt_as_an_overload(
    workspace: Path, claude_home: Path
) -> None:
    with FakeAnthropic(refuse=lambda _: overloaded()) as api:
        error = await refused_prompt(workspace, claude_agent_environment(claude_home, api.base_url))
    assert "API Error: 529" in error.message
    assert error.limit is not None and error.limit.kind is LimitKind.OVERLOADED


async def test_a_spent_subscription_window_is_a_usage_limit_until_the_minute_it_names_ends(
    workspace: Path, claude_home: Path
) -> None:
    reset = int(time.time()) + 2 * 3600 + 17
    with FakeAnthropic(refuse=lambda _: window_spent(reset)) as api:
        env = as_subscriber(claude_agent_environment(claude_home, api.base_url))
        error = await refused_prompt(workspace, env)
    assert "Internal error: You've hit your session limit · resets " in error.message
    assert error.limit is not None and error.limit.kind is LimitKind.USAGE
    # Only the minute reaches ACP: the pause lasts to its end, never short of the reset.
    named = datetime.fromtimestamp(reset, UTC)
    assert error.limit.resets_at == named.replace(second=0) + timedelta(minutes=1)


async def test_three_tickets_meet_the_acp_agents_usage_limit_and_all_finish_after_it(
    tmp_path: Path, adapter: Path, claude_home: Path
) -> None:
    """The daemon on the ACP adapter: the first ticket's first model call meets a spent window;
    nothing starts on acp until the end of the minute the adapter named, then all finish,
    the first in its own (loaded) session, with no failure counted."""
    board = Board(tmp_path)
    for identifier in ("ABC-1", "ABC-2", "ABC-3"):
        board.ticket(identifier)
    # The window resets 5 s before a minute ends, at least 8 s from now: the pause, to the
    # minute's end, is never shorter than the real one.
    lifts = (int(time.time()) + 8 + 59) // 60 * 60
    reset = lifts - 5
    move = json.dumps({"state": "Human Review"})
    with FakeAnthropic(refuse=first(1, window_spent(reset))) as api:
        board.write_workflow(
            polling_ms=1000,
            agent={"kind": "acp", "max_concurrent_agents": 1, "max_turns": 2},
            prompt="Finish {{ issue.identifier }}. "
            f"<<tool mcp__symphony__local_move_issue {move}>>",
            acp=acp_block(),
        )
        env = as_subscriber(claude_environment(claude_home, api.base_url))
        run = start(board, env, watch=False)
        daemon = run.orchestrator
        try:
            await run.until(lambda: "acp" in daemon.state.agent_pauses, timeout=TIMEOUT_S)
            pause = daemon.state.agent_pauses["acp"]
            assert pause.named and pause.until == datetime.fromtimestamp(lifts, UTC)
            lifts_at = time.monotonic() + (lifts - time.time())  # the fake's clock
            await run.until(
                lambda: all(
                    board.state_of(i) == "Human Review" for i in ("ABC-1", "ABC-2", "ABC-3")
                ),
                timeout=TIMEOUT_S + 70,
            )
        finally:
            await run.stop()
    refused, *rest = api.requests
    assert "Finish ABC-1" in refused["prompt"]
    assert rest and all(r["at"] >= lifts_at - 0.5 for r in rest), [r["at"] - lifts_at for r in rest]
    resumed = [r for r in rest if any("ABC-1" in t for t in r["user_texts"])]
    texts: list[Any] = resumed[0]["user_texts"] if resumed else []
    assert sum("Finish ABC-1." in t for t in texts) >= 1, texts
    assert any("this thread continues" in t for t in texts), texts
    assert not daemon.health.failures
    for identifier in ("ABC-1", "ABC-2", "ABC-3"):
        assert "(symphony)" not in (board.tickets / f"{identifier}.md").read_text()
    starts = {i: len(daemon.state.ledgers[i].starts) for i in ("ABC-1", "ABC-2", "ABC-3")}
    assert len(set(starts.values())) == 1, starts
    events = [row["event"] for row in daemon.activity.newest(100)]
    assert events.count("limited") == 1 and events.count("resumed") == 1

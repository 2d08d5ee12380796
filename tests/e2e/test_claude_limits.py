"""The real `claude` (2.1.332) refused by a fake Anthropic API answering like the real one at its
worst, and symphony reading it as the provider's limit.

Measured with `FakeAnthropic(refuse=...)`, stream-json on stdout:

- a 429 `rate_limit_error` with `retry-after: N` (and the `anthropic-ratelimit-*-reset`
  headers, which Claude does not pass on): one `system`/`api_retry` line per retry
  (`error: rate_limit`, `error_status: 429`, `retry_delay_ms` N s plus up to a quarter more),
  then an assistant line and an error `result` (`is_error`, `subtype: success`,
  `terminal_reason: api_error`, `api_error_status: 429`, `api_error_type: rate_limit_error`,
  `API Error: Request rejected (429) · <the server's message>`);
- a 529 `overloaded_error`: `api_retry` with `error: overloaded`, then `api_error_status: 529`,
  `API Error: 529 Overloaded. This is a server-side issue ...`; a burst shorter than
  `CLAUDE_CODE_MAX_RETRIES` is ridden out by Claude itself;
- a subscription's spent window (an OAuth token; `anthropic-ratelimit-unified-status:
  rejected`): never retried; a `rate_limit_event` (`status: rejected`, `resetsAt` epoch,
  `rateLimitType`), an assistant line with `api_error: usage_limit_reached` and
  `api_error_params.rate_limit_info`, and a result with `api_error: usage_limit_reached` and
  `You've hit your 5-hour limit · resets 6:58am (UTC)`. An API key meeting the same headers
  gets the plain 429 text. The old `Claude AI usage limit reached|<epoch>` is not in 2.1.332.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from symphony.agents import TURN_FAILED, AgentError, AgentLaunch
from symphony.agents.claude import ClaudeSession
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from symphony.config.claude import parse_settings
from tests.e2e.conftest import CLAUDE_BIN, claude_agent_environment, claude_environment
from tests.fakes.fake_anthropic import (
    FakeAnthropic,
    Refusal,
    overloaded,
    rate_limited,
    window_spent,
)
from tests.harness import Board, start

pytestmark = pytest.mark.slow

MODEL = "claude-sonnet-4-5"
TIMEOUT_S = 60.0
RESET_IN_S = 8.0
"""How far ahead the spent window resets in the daemon test."""
SUBSCRIPTION_TOKEN = "sk-ant-oat01-fake-subscription-token"


def claude_block(**overrides: Any) -> dict[str, Any]:
    return {"command": str(CLAUDE_BIN), "model": MODEL, "read_timeout_ms": 30_000, **overrides}


def as_subscriber(env: dict[str, str]) -> dict[str, str]:
    """The same environment logged in with a subscription's token instead of an API key."""
    env = {name: value for name, value in env.items() if name != "ANTHROPIC_API_KEY"}
    return {**env, "CLAUDE_CODE_OAUTH_TOKEN": SUBSCRIPTION_TOKEN}


def first(count: int, refusal: Refusal) -> Callable[[dict[str, Any]], Refusal | None]:
    """Refuse the first `count` requests, then answer."""
    return lambda request: refusal if request["n"] <= count else None


async def refused_turn(
    workspace: Path, env: dict[str, str], retries: int
) -> tuple[AgentError, list[AgentEvent], datetime]:
    """The error of one turn whose model calls are refused, its events, and when it failed."""
    events: list[AgentEvent] = []
    session = ClaudeSession(
        AgentLaunch(
            workspace=workspace,
            settings=parse_settings(claude_block()),
            env={**env, "CLAUDE_CODE_MAX_RETRIES": str(retries)},
            on_event=events.append,
            kind="claude",
        )
    )
    try:
        await asyncio.wait_for(session.start(), TIMEOUT_S)
        with pytest.raises(AgentError) as caught:
            await asyncio.wait_for(session.run_turn("go", title="t"), TIMEOUT_S)
        failed_at = datetime.now(UTC)
    finally:
        await session.stop()
    assert caught.value.category == TURN_FAILED
    return caught.value, events, failed_at


def retried(events: list[AgentEvent]) -> list[str]:
    return [e.message or "" for e in events if (e.message or "").startswith("api_retry")]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def test_a_rate_limit_waits_what_retry_after_asked_and_then_pauses_that_long(
    workspace: Path, claude_home: Path
) -> None:
    reset = time.time() + 2
    with FakeAnthropic(refuse=lambda _: rate_limited(2, reset)) as api:
        env = claude_agent_environment(claude_home, api.base_url)
        error, events, failed_at = await refused_turn(workspace, env, retries=1)
    assert len(api.requests) == 2  # the request and Claude's one retry
    assert api.requests[1]["at"] - api.requests[0]["at"] >= 2  # it waited the retry-after
    assert retried(events) == ["api_retry 1/1: rate_limit 429"]
    assert error.limit is not None and error.limit.kind is LimitKind.RATE
    assert "Request rejected (429)" in error.limit.detail and "(HTTP 429)" in error.message
    # The pause is Claude's own last wait again: the server's retry-after, with its jitter.
    assert error.limit.resets_at is not None
    ahead = (error.limit.resets_at - failed_at).total_seconds()
    assert 1.5 <= ahead <= 3.5, ahead


async def test_without_retries_a_rate_limit_names_no_reset(
    workspace: Path, claude_home: Path
) -> None:
    with FakeAnthropic(refuse=lambda _: rate_limited(30, time.time() + 30)) as api:
        env = claude_agent_environment(claude_home, api.base_url)
        error, events, _ = await refused_turn(workspace, env, retries=0)
    assert len(api.requests) == 1 and not retried(events)
    # The reset headers never reach Claude's output: the daemon's guess decides the pause.
    assert error.limit is not None and error.limit.kind is LimitKind.RATE
    assert error.limit.resets_at is None


async def test_an_overload_burst_is_ridden_out_by_claude_and_a_longer_one_is_an_overload(
    workspace: Path, claude_home: Path
) -> None:
    with FakeAnthropic(refuse=first(2, overloaded())) as api:
        env = claude_agent_environment(claude_home, api.base_url)
        events: list[AgentEvent] = []
        session = ClaudeSession(
            AgentLaunch(
                workspace=workspace,
                settings=parse_settings(claude_block()),
                env={**env, "CLAUDE_CODE_MAX_RETRIES": "2"},
                on_event=events.append,
                kind="claude",
            )
        )
        try:
            await session.start()
            result = await asyncio.wait_for(session.run_turn("go", title="t"), TIMEOUT_S)
        finally:
            await session.stop()
    assert result.message == "done" and len(api.requests) == 3
    assert retried(events) == ["api_retry 1/2: overloaded 529", "api_retry 2/2: overloaded 529"]

    with FakeAnthropic(refuse=lambda _: overloaded()) as api:
        env = claude_agent_environment(claude_home, api.base_url)
        error, _, _ = await refused_turn(workspace, env, retries=1)
    assert error.limit is not None and error.limit.kind is LimitKind.OVERLOADED
    assert error.limit.resets_at is None and "529 Overloaded" in error.limit.detail


async def test_a_spent_subscription_window_is_a_usage_limit_until_its_reset(
    workspace: Path, claude_home: Path
) -> None:
    reset = int(time.time()) + 3600
    with FakeAnthropic(refuse=lambda _: window_spent(reset)) as api:
        env = as_subscriber(claude_agent_environment(claude_home, api.base_url))
        error, events, _ = await refused_turn(workspace, env, retries=2)
    assert len(api.requests) == 1 and not retried(events)  # a spent window is not retried
    assert "rate_limit rejected five_hour" in [e.message for e in events]
    assert error.limit is not None and error.limit.kind is LimitKind.USAGE
    assert error.limit.resets_at == datetime.fromtimestamp(reset, UTC)  # to the second
    assert error.limit.detail.startswith("You've hit your 5-hour limit · resets ")


async def test_an_api_key_meeting_a_spent_window_is_a_rate_limit(
    workspace: Path, claude_home: Path
) -> None:
    reset = int(time.time()) + 3600
    with FakeAnthropic(refuse=lambda _: window_spent(reset)) as api:
        env = claude_agent_environment(claude_home, api.base_url)
        error, _, _ = await refused_turn(workspace, env, retries=0)
    assert error.limit is not None and error.limit.kind is LimitKind.RATE
    assert error.limit.resets_at is None


async def test_three_tickets_meet_claudes_usage_limit_wait_for_the_reset_and_all_finish(
    tmp_path: Path, claude_home: Path
) -> None:
    """The daemon end to end on the real Claude Code: the first ticket's first model call meets
    a spent subscription window that resets a few seconds later. Nothing else starts on claude
    until then; after it every ticket runs, the first in its own session, and none is charged
    a failure, a retry attempt or a failure comment."""
    board = Board(tmp_path)
    for identifier in ("ABC-1", "ABC-2", "ABC-3"):
        board.ticket(identifier)
    reset = int(time.time() + RESET_IN_S)
    reset_at = time.monotonic() + (reset - time.time())  # the fake's clock
    move = json.dumps({"state": "Human Review"})
    with FakeAnthropic(refuse=first(1, window_spent(reset))) as api:
        board.write_workflow(
            polling_ms=1000,  # a slot a finished run frees is filled at the next poll
            agent={"kind": "claude", "max_concurrent_agents": 1, "max_turns": 2},
            prompt="Finish {{ issue.identifier }}. "
            f"<<tool mcp__symphony__local_move_issue {move}>>",
            claude=claude_block(),
        )
        env = as_subscriber(claude_environment(claude_home, api.base_url))
        run = start(board, env, watch=False)
        daemon = run.orchestrator
        try:
            await run.until(lambda: "claude" in daemon.state.agent_pauses, timeout=TIMEOUT_S)
            pause = daemon.state.agent_pauses["claude"]
            assert pause.named and pause.until == datetime.fromtimestamp(reset, UTC)
            assert pause.limit is LimitKind.USAGE
            await run.until(
                lambda: all(
                    board.state_of(i) == "Human Review" for i in ("ABC-1", "ABC-2", "ABC-3")
                ),
                timeout=TIMEOUT_S + RESET_IN_S,
            )
        finally:
            await run.stop()
    refused, *rest = api.requests
    assert "ABC-1" in refused["prompt"]
    # Nothing asked the model between the refusal and the reset.
    assert rest and all(r["at"] >= reset_at - 0.5 for r in rest), [r["at"] - reset_at for r in rest]
    resumed = [r for r in rest if any("ABC-1" in t for t in r["user_texts"])]
    # Its own session: the refused prompt is still in the conversation Claude sends, with the
    # daemon's word that the thread continues after it.
    texts = resumed[0]["user_texts"] if resumed else []
    assert any("Finish ABC-1." in t for t in texts), texts
    assert any("this thread continues" in t for t in texts), texts
    assert not daemon.health.failures
    for identifier in ("ABC-1", "ABC-2", "ABC-3"):  # no comment of the daemon's on any
        assert "(symphony)" not in (board.tickets / f"{identifier}.md").read_text()
    # The refused run's start was given back: ABC-1 counts as many starts as the others.
    starts = {i: len(daemon.state.ledgers[i].starts) for i in ("ABC-1", "ABC-2", "ABC-3")}
    assert len(set(starts.values())) == 1, starts
    events = [row["event"] for row in daemon.activity.newest(100)]
    assert events.count("limited") == 1 and events.count("resumed") == 1

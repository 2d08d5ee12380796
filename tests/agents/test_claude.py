"""The Claude Code session against a scripted CLI: the error results Claude prints once its
own retries of a failing model are spent say which provider limit refused the turn."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from symphony.agents import TURN_FAILED, AgentError, AgentLaunch
from symphony.agents.claude import ClaudeSession
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from symphony.config.claude import parse_settings

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "fake_claude.py"


async def failed_turn(tmp_path: Path, turn: str, **env: str) -> AgentError:
    """The error of a second turn scripted `turn`, after a first that succeeds (the limit is
    the failing turn's, not left over from an earlier one)."""
    events: list[AgentEvent] = []
    launch = AgentLaunch(
        workspace=tmp_path,
        settings=parse_settings({"command": f"{sys.executable} {FAKE}", "read_timeout_ms": 5000}),
        env={"PATH": os.environ["PATH"], "FAKE_CLAUDE_TURN": f"ok,{turn}", **env},
        on_event=events.append,
        kind="claude",
    )
    session = ClaudeSession(launch, stop_grace_s=0.5)
    await session.start()
    try:
        assert (await session.run_turn("one", title="t")).message == "done"
        with pytest.raises(AgentError) as caught:
            await session.run_turn("two", title="t")
    finally:
        await session.stop()
    assert caught.value.category == TURN_FAILED
    assert events[-1].kind == "turn_failed"
    return caught.value


async def test_a_usage_limit_result_carries_the_reset_claude_named(tmp_path: Path) -> None:
    reset = int(time.time()) + 7200
    error = await failed_turn(tmp_path, "usage_limit", FAKE_CLAUDE_RESET=str(reset))

    assert error.limit is not None and error.limit.kind is LimitKind.USAGE
    assert error.limit.resets_at == datetime.fromtimestamp(reset, UTC)
    assert "usage limit reached" in error.limit.detail


async def test_a_rate_limit_lifts_after_the_wait_claude_was_told(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    error = await failed_turn(tmp_path, "rate_limited")

    assert error.limit is not None and error.limit.kind is LimitKind.RATE
    # Claude's last api_retry waited the server's retry-after (2 s): the reset is that far on.
    assert error.limit.resets_at is not None
    assert before + timedelta(seconds=2) <= error.limit.resets_at
    assert error.limit.resets_at <= datetime.now(UTC) + timedelta(seconds=2)


@pytest.mark.parametrize(
    ("turn", "kind"),
    [
        ("overloaded", LimitKind.OVERLOADED),
        ("outage", LimitKind.OUTAGE),
        ("refused", LimitKind.OUTAGE),
    ],
)
async def test_a_failing_model_server_is_the_providers_limit(
    tmp_path: Path, turn: str, kind: LimitKind
) -> None:
    error = await failed_turn(tmp_path, turn)

    assert error.limit is not None and error.limit.kind is kind
    assert error.limit.resets_at is None


async def test_a_refused_key_stays_an_ordinary_failure(tmp_path: Path) -> None:
    error = await failed_turn(tmp_path, "unauthorized")

    assert error.limit is None
    assert "401" in error.message

"""The real `codex app-server` refused by its model server: what codex 0.171 reports, and that
symphony reads it as the provider's limit (or not).

Measured with `FakeModel` answering HTTP errors, `request_max_retries=0`: a 429 whose body is a
usage-limit error (with the `x-codex-primary-*` headers the real service sends) gives an
`account/rateLimits/updated` with the spent window, then `error` and a failed turn with
`codexErrorInfo: "usageLimitExceeded"`; a plain 429 gives `responseTooManyFailedAttempts
{httpStatusCode: 429}`; a 529 or 503 `httpConnectionFailed {httpStatusCode}`; a 500
`internalServerError`; a 400 `other`.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from symphony.agents import TURN_FAILED, AgentError, AgentLaunch
from symphony.agents.codex import AppServerSession, CodexSettings
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from tests.e2e.conftest import codex_command
from tests.e2e.fake_model import Fail, FakeModel

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0


async def refused_turn(workspace: Path, env: dict[str, str], fail: Fail) -> AgentError:
    """The error of one turn whose only model call gets `fail`."""
    events: list[AgentEvent] = []
    with FakeModel([fail]) as model:
        settings = CodexSettings(
            command=codex_command(model.base_url),
            approval_policy="never",
            read_timeout_ms=30_000,
            turn_timeout_ms=60_000,
        )
        session = AppServerSession(
            AgentLaunch(workspace=workspace, settings=settings, env=env, on_event=events.append)
        )
        try:
            await asyncio.wait_for(session.start(), TIMEOUT_S)
            with pytest.raises(AgentError) as caught:
                await asyncio.wait_for(session.run_turn("go", title="ABC-1: go"), TIMEOUT_S)
        finally:
            await session.stop()
        assert len(model.requests) == 1  # no hidden retries
    assert caught.value.category == TURN_FAILED
    assert events[-1].kind == "turn_failed"
    return caught.value


async def test_a_spent_usage_window_is_a_usage_limit_until_the_window_resets(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    reset = int(time.time()) + 3600
    fail = Fail(
        429,
        body={
            "error": {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": "plus",
                "resets_at": reset,
            }
        },
        headers={
            "x-codex-primary-used-percent": "100",
            "x-codex-primary-window-minutes": "300",
            "x-codex-primary-reset-at": str(reset),
        },
    )
    error = await refused_turn(tmp_path, codex_env, fail)

    assert error.limit is not None and error.limit.kind is LimitKind.USAGE
    assert error.limit.resets_at == datetime.fromtimestamp(reset, UTC)
    assert "usage limit" in error.limit.detail


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, LimitKind.RATE),
        (529, LimitKind.OVERLOADED),
        (503, LimitKind.OUTAGE),
        (500, LimitKind.OUTAGE),
        (400, None),
    ],
)
async def test_an_http_error_of_the_model_server_is_read_by_its_status(
    tmp_path: Path, codex_env: dict[str, str], status: int, kind: LimitKind | None
) -> None:
    error = await refused_turn(tmp_path, codex_env, Fail(status))

    assert (error.limit.kind if error.limit else None) is kind
    if error.limit is not None:
        assert error.limit.resets_at is None  # no window named one

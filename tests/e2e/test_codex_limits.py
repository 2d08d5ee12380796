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
from symphony.agents.codex import AppServerSession
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind
from symphony.config.codex import CodexSettings
from tests.e2e.conftest import codex_command
from tests.e2e.fake_model import CallTool, Fail, FakeModel, ModelRequest, Say, Step
from tests.harness import Board, start

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
RESET_IN_S = 6.0
"""How far ahead the spent window resets in the daemon test."""


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


async def test_three_tickets_meet_codex_usage_limit_wait_for_the_reset_and_all_finish(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    """The daemon end to end on the real codex: the first ticket's first model call meets a
    spent usage window that resets a few seconds later. Nothing else starts on codex until
    then; after it every ticket runs, the first in its own thread, and none is charged a
    failure, a retry attempt or a failure comment."""
    board = Board(tmp_path)
    for identifier in ("ABC-1", "ABC-2", "ABC-3"):
        board.ticket(identifier)
    reset = time.time() + RESET_IN_S
    refused = Fail(
        429,
        body={"error": {"type": "usage_limit_reached", "message": "The usage limit has been "
                        "reached", "resets_at": int(reset)}},
        headers={"x-codex-primary-used-percent": "100",
                 "x-codex-primary-window-minutes": "300",
                 "x-codex-primary-reset-at": str(int(reset))},
    )  # fmt: skip
    first = [True]

    def script(request: ModelRequest) -> list[Step]:
        if first[0]:
            first[0] = False
            return [refused]
        if request.step == 0:
            return [CallTool("local_move_issue", {"state": "Human Review"})]
        return [Say("ready for review")]

    with FakeModel(script) as model:
        board.write_workflow(
            polling_ms=1000,  # a slot a finished run frees is filled at the next poll
            agent={"max_concurrent_agents": 1},
            codex={
                "command": codex_command(model.base_url),
                "approval_policy": "never",
                "read_timeout_ms": 30_000,
                "turn_timeout_ms": 60_000,
            },
        )
        run = start(board, codex_env, watch=False)
        daemon = run.orchestrator
        try:
            await run.until(lambda: "codex" in daemon.state.agent_pauses, timeout=TIMEOUT_S)
            pause = daemon.state.agent_pauses["codex"]
            assert pause.named and abs(pause.until.timestamp() - int(reset)) < 1
            await run.until(
                lambda: all(
                    board.state_of(i) == "Human Review" for i in ("ABC-1", "ABC-2", "ABC-3")
                ),
                timeout=TIMEOUT_S,
            )
        finally:
            await run.stop()
    assert model.script_errors == [] and model.unexpected_requests == []
    refused_at, *rest = model.requests
    # Nothing asked the model between the refusal and the reset.
    assert all(r.at >= refused_at.at + RESET_IN_S - 1.5 for r in rest), [r.at for r in rest]
    resumed = [r for r in rest if any("ABC-1" in t for t in r.user_texts)]
    assert resumed and len(resumed[0].user_texts) >= 2  # its thread: the first prompt is there
    assert not daemon.health.failures
    for identifier in ("ABC-1", "ABC-2", "ABC-3"):  # no comment of the daemon's on any
        assert "(symphony)" not in (board.tickets / f"{identifier}.md").read_text()
    events = [row["event"] for row in daemon.activity.newest(100)]
    assert events.count("limited") == 1 and events.count("resumed") == 1

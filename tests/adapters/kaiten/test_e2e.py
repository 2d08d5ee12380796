"""The daemon end to end against a local Kaiten fake: the real Orchestrator, the kaiten adapter
over HTTP under its 5 rps limit, and the scripted agent in a real subprocess. The fake counts
arrivals in a sliding one-second window, as Kaiten does, and records every excess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.kaiten.fake_kaiten import FakeKaiten, serve
from tests.adapters.kaiten.payloads import BOARD, column
from tests.harness import Running

pytestmark = pytest.mark.slow

TOKEN = "kaiten_e2e_token_value_0001"
QUEUE, PROGRESS, DOING, REVIEW, DONE = 201, 202, 221, 203, 204


def board() -> list[dict[str, Any]]:
    return [
        column(QUEUE, "Queue", 1, order=1),
        column(PROGRESS, "In Progress", 2, order=2),
        column(DOING, "Doing", 2, parent=PROGRESS, order=1),
        column(REVIEW, "Human Review", 2, order=3),
        column(DONE, "Done", 3, order=4),
    ]


@pytest.fixture
def kaiten() -> Iterator[FakeKaiten]:
    fake = FakeKaiten(token=TOKEN, columns=board())
    with serve(fake):
        yield fake


def start(
    tmp_path: Path,
    kaiten: FakeKaiten,
    scenario: str,
    *,
    polling_ms: int = 500,
    agent: dict[str, Any] | None = None,
    **extra: str,
) -> Running:
    tracker = {
        "kind": "kaiten",
        "provider": {"base_url": kaiten.base, "board_id": BOARD},
        "active_states": ["Queue", "In Progress"],
        "terminal_states": ["Done"],
    }
    env = {"FAKE_AGENT_SCENARIO": scenario, "KAITEN_TOKEN": TOKEN, **extra}
    workflow = write_workflow(tmp_path, tracker, polling_ms=polling_ms, agent=agent)
    return start_daemon(workflow, env, timeout=90, poll_s=0.2)


def within_5_per_second(kaiten: FakeKaiten) -> bool:
    """No request arrived while the last second already held 5 (the fake answered none 429)."""
    times = sorted(r.at for r in kaiten.requests)
    strict = all(times[i + 5] - times[i] >= 1.0 for i in range(len(times) - 5))
    return strict and not kaiten.over_limit


async def test_only_eligible_cards_run_and_the_agent_moves_them_on_kaiten(
    tmp_path: Path, kaiten: FakeKaiten
) -> None:
    kaiten.add(1, QUEUE, tags=["Bug"])
    kaiten.add(2, DOING)  # a sub-column: its parent's state, In Progress
    kaiten.add(3, QUEUE, blocked_by=[6])  # blocked by a card still in review
    kaiten.add(4, QUEUE, blocked=True)  # blocked by hand
    kaiten.add(5, QUEUE, condition=2)  # archived
    kaiten.add(6, REVIEW)
    kaiten.add(7, QUEUE, board_id=99)  # another board
    kaiten.add(8, QUEUE, blocked_by=[9])  # its blocker is done
    kaiten.add(9, DONE)
    run = start(
        tmp_path,
        kaiten,
        "tool,complete",
        FAKE_AGENT_TOOL="kaiten_move_card",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )
    try:
        await run.until(
            lambda: (
                all(kaiten.column_of(n) == REVIEW for n in (1, 2, 8))
                and not run.orchestrator.state.running
            )
        )
        # Let a few more polls pass: nothing else may be dispatched.
        await asyncio.sleep(2.0)
    finally:
        await run.stop()
    assert run.dispatched == {"1", "2", "8"}
    assert [kaiten.column_of(n) for n in (3, 4, 5, 7)] == [QUEUE] * 4
    listings = [r for r in kaiten.requests if r.path.endswith("/cards")]
    assert listings and all(r.query["condition"] == ["1"] for r in listings)
    assert within_5_per_second(kaiten)


async def test_moving_a_card_to_a_done_column_stops_its_run(
    tmp_path: Path, kaiten: FakeKaiten
) -> None:
    kaiten.add(1, QUEUE)
    kaiten.add(2, PROGRESS)
    run = start(tmp_path, kaiten, "hang")
    try:
        await run.until(lambda: set(run.orchestrator.state.running) == {"1", "2"})
        kaiten.move(1, DONE)
        run.orchestrator.request_refresh()
        await run.until(lambda: set(run.orchestrator.state.running) == {"2"})
        assert "1" not in run.orchestrator.state.retry_attempts
    finally:
        await run.stop()
    assert run.dispatched == {"1", "2"}


async def test_a_429_is_respected_until_its_reset(tmp_path: Path, kaiten: FakeKaiten) -> None:
    kaiten.add(1, QUEUE)
    reset = kaiten.limit_next(reset_in_s=2.0)
    run = start(tmp_path, kaiten, "hang")
    try:
        await run.until(lambda: "1" in run.orchestrator.state.running)
    finally:
        await run.stop()
    limited = [i for i, r in enumerate(kaiten.requests) if r.status == 429]
    assert len(limited) == 1
    after = kaiten.requests[limited[0] + 1 :]
    assert after, "the daemon never tried again"
    # Nothing was sent before the announced reset (the client's clock is this machine's too).
    assert min(r.at for r in after) >= reset - 0.05
    assert within_5_per_second(kaiten)


SOAK_S = float(os.environ.get("SYMPHONY_KAITEN_SOAK_S", "4"))
"""How long the rate test keeps the agents busy after its scripted steps (longer by hand)."""


@pytest.mark.parametrize("polling_ms", [300, 30_000])
async def test_daemon_stays_within_5_requests_per_second_as_kaiten_counts_them(
    tmp_path: Path, kaiten: FakeKaiten, polling_ms: int
) -> None:
    kaiten.add(1, QUEUE)  # agents on these two comment on every turn
    kaiten.add(2, DOING)
    kaiten.add(3, QUEUE, blocked_by=[6])  # its blocker is read on every poll
    kaiten.add(6, REVIEW)
    run = start(
        tmp_path,
        kaiten,
        "tool,tool,complete",
        polling_ms=polling_ms,
        agent={"max_turns": 3},
        FAKE_AGENT_TOOL="kaiten_add_comment",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"body": "progress note"}),
    )
    loop = asyncio.get_running_loop()

    def refresh() -> None:
        # At a 30 s poll nothing would look again within the test; a person's refresh does.
        if polling_ms > 1000:
            run.orchestrator.request_refresh()

    async def dispatched(card: str) -> None:
        while card not in run.dispatched:
            refresh()
            with contextlib.suppress(TimeoutError):
                await run.until(lambda: card in run.dispatched, timeout=1.0)

    try:
        await run.until(lambda: {"1", "2"} <= run.dispatched)
        await run.until(lambda: sum(len(c.comments) for c in kaiten.cards.values()) >= 4)
        # A 429 arrives, and a new card is added while the client waits for its reset.
        reset = kaiten.limit_next(reset_in_s=1.0)
        kaiten.add(10, QUEUE)
        refresh()
        await run.until(lambda: any(r.status == 429 for r in kaiten.requests))
        await dispatched("10")
        dispatched_after_reset = time.time() - reset
        kaiten.move(6, DONE)
        await dispatched("3")
        soak_until = loop.time() + SOAK_S
        while loop.time() < soak_until:
            refresh()
            await asyncio.sleep(0.5)
    finally:
        await run.stop()
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]
    assert within_5_per_second(kaiten), sorted(r.at for r in kaiten.requests)
    # The next poll follows the reset (a person's refresh, or the 300 ms poll) instead of a
    # backoff or a 30 s poll; the bound leaves room for a loaded machine.
    assert dispatched_after_reset < 8.0, dispatched_after_reset
    assert sum(1 for r in kaiten.requests if r.path.endswith("/comments")) >= 4
    assert any(r.path.endswith("/cards/6") for r in kaiten.requests)  # blocker reads
    listings = [r for r in kaiten.requests if r.path.endswith("/cards")]
    columns = [r for r in kaiten.requests if r.path.endswith("/columns")]
    assert len(listings) > len(columns)  # the board layout is not re-read on every poll

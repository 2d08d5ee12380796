"""The local board is watched: a ticket written or moved is seen at once, not at the next poll
(polling stays the safety net for when the watch cannot run)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import Board, scenario_env, start


async def test_a_ticket_written_to_the_board_starts_without_waiting_for_the_poll(
    tmp_path: Path,
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-0", state="Done")
    board.write_workflow(polling_ms=600_000)  # the poll alone would take ten minutes
    run = start(board, scenario_env("hang"))  # watch on, as the CLI runs it
    try:
        await run.until(lambda: run.orchestrator.health.last_tick_at is not None)
        board.ticket("ABC-1")
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running, timeout=10)
        # A person moves it out of the active states: the run stops just as promptly.
        board.ticket("ABC-1", state="Done")
        await run.until(lambda: "ABC-1" not in run.orchestrator.state.running, timeout=10)
    finally:
        await run.stop()

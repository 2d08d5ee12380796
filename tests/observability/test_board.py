"""The board view: rows per poll, their live status, and who moved a ticket."""

from __future__ import annotations

from symphony import core
from symphony.observability.board import Board, board_row
from tests.factories import WALL, make_issue, make_settings


def test_a_move_to_a_pending_transitions_target_is_the_daemons_not_a_persons() -> None:
    board, settings = Board(), make_settings()
    board.update([make_issue("A-1")], {"id-A-1": None}, settings)
    # Seen in its target while the daemon is still confirming the move.
    pending = {"id-A-1": "Plan Review"}
    assert board.update([make_issue("A-1", state="Plan Review")], {}, settings, pending) == []
    (person,) = board.update([make_issue("A-1", state="Ready")], {}, settings)
    assert (person.identifier, person.from_state, person.to_state) == (
        "A-1",
        "Plan Review",
        "Ready",
    )


def test_a_confirmed_move_is_where_a_persons_next_move_starts() -> None:
    board, settings = Board(), make_settings()
    board.update([make_issue("A-1")], {}, settings)
    board.moved("id-A-1", "Plan Review")  # no poll saw it there
    (person,) = board.update([make_issue("A-1", state="Ready")], {}, settings)
    assert (person.from_state, person.to_state) == ("Plan Review", "Ready")
    assert board.update([make_issue("A-1", state="Ready")], {}, settings) == []


def test_rows_show_the_live_status_over_the_polls_reason() -> None:
    board, settings, state = Board(), make_settings(), core.SchedulerState()
    board.update(
        [make_issue("A-1"), make_issue("A-2", state="Plan Review")],
        {"id-A-1": "blocked by B-1 (Todo)"},
        settings,
        {},
    )
    rows = {row.identifier: board_row(row, state) for row in board.rows.values()}
    assert (rows["A-1"]["status"], rows["A-1"]["reason"]) == ("waiting", "blocked by B-1 (Todo)")
    assert rows["A-2"]["reason"] == "in Plan Review: waiting for a person (a checkpoint)"
    core.select_dispatches(state, [make_issue("A-1")], settings, 0.0, WALL)
    assert board_row(board.rows["id-A-1"], state)["status"] == "running"

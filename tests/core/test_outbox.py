"""The core's outbox: what the store has not saved yet is handed over in one piece, and comes
back whole when writing it failed."""

from __future__ import annotations

from datetime import UTC, datetime

from symphony.core.outcomes import HANDOFF, REWORK, OutcomeRecord
from symphony.core.state import Outbox, SchedulerState

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def record(kind: str, identifier: str) -> OutcomeRecord:
    return OutcomeRecord(NOW, kind, f"id-{identifier}", identifier, {})


def test_taking_the_outbox_hands_over_its_items_and_empties_it() -> None:
    state = SchedulerState()
    state.new_outcomes.append(record(HANDOFF, "A-1"))
    state.changed_totals.add("id-A-1")
    state.changed_ledgers.add("id-B-1")
    outbox = state.take_outbox()
    assert outbox == Outbox((record(HANDOFF, "A-1"),), frozenset({"id-A-1"}), frozenset({"id-B-1"}))
    assert (state.new_outcomes, state.changed_totals, state.changed_ledgers) == ([], set(), set())
    assert state.take_outbox() == Outbox()


def test_an_outbox_given_back_goes_before_what_came_since() -> None:
    state = SchedulerState()
    state.new_outcomes.append(record(HANDOFF, "A-1"))
    state.changed_totals.add("id-A-1")
    outbox = state.take_outbox()
    state.new_outcomes.append(record(REWORK, "A-1"))
    state.changed_totals.add("id-C-1")
    state.give_back(outbox)
    assert state.new_outcomes == [record(HANDOFF, "A-1"), record(REWORK, "A-1")]
    assert state.changed_totals == {"id-A-1", "id-C-1"}

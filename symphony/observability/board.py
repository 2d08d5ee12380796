"""The board view: every ticket the workflow knows, by state and stage, and why each waits.

The orchestrator hands the board what each poll read (the active states, plus in stage mode
the checkpoint states where a person takes over) with the reason each candidate is not
running. Rows are kept until the next poll; their status (running, retrying, moving, waiting)
is overlaid from the scheduler state when a snapshot is taken, so it is never stale. Comparing
one poll with the last also shows who moved a ticket: the daemon (it says so when it does) or a
person.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from symphony.base.issue import Issue, normalize_state
from symphony.config.sections import Settings
from symphony.core.state import SchedulerState

SNAPSHOT_ROWS = 500
"""The fleet snapshot carries at most this many rows; the count says how many there are."""


@dataclass(frozen=True, slots=True)
class BoardRow:
    """One ticket as the last poll read it, with its stage and why it is not running."""

    issue_id: str
    identifier: str
    title: str
    state: str
    stage: str | None
    url: str | None
    reason: str | None
    """Why it is not running, as of the last poll (None: it was dispatched)."""


@dataclass(frozen=True, slots=True)
class PersonMove:
    """A change of state between two polls that no daemon transition explains: a person's move."""

    identifier: str
    from_state: str
    to_state: str


class Board:
    def __init__(self) -> None:
        self.rows: dict[str, BoardRow] = {}
        self._order: dict[str, int] = {}
        """Each state's place in the workflow (stages in declaration order, then checkpoints)."""

    def update(
        self,
        issues: Iterable[Issue],
        reasons: Mapping[str, str | None],
        settings: Settings,
        pending: Mapping[str, str] | None = None,
    ) -> list[PersonMove]:
        """Replace the rows with this poll's; returns the moves no daemon transition explains.

        A change to the target of a transition the daemon is still writing (`pending`, id ->
        target) is the daemon's; one it confirmed earlier is already in the rows (`moved`).
        """
        pending = pending or {}
        machine = settings.machine
        tracker = settings.tracker
        order = (*tracker.active_states, *tracker.other_states, *tracker.terminal_states)
        self._order = {normalize_state(state): index for index, state in enumerate(order)}
        moves: list[PersonMove] = []
        rows: dict[str, BoardRow] = {}
        for issue in issues:
            stage = machine.stage_for(issue.state) if machine is not None else None
            if issue.id in reasons:
                reason = reasons[issue.id]
            else:
                reason = f"in {issue.state}: waiting for a person (a checkpoint)"
            rows[issue.id] = BoardRow(
                issue.id,
                issue.identifier,
                issue.title,
                issue.state,
                stage.name if stage is not None else None,
                issue.url,
                reason,
            )
            now = normalize_state(issue.state)
            before = self.rows.get(issue.id)
            target = pending.get(issue.id)
            if before is None or normalize_state(before.state) == now:
                continue
            if target is None or normalize_state(target) != now:
                moves.append(PersonMove(issue.identifier, before.state, issue.state))
        self.rows = rows
        return moves

    def moved(self, issue_id: str, state: str) -> None:
        """The daemon confirmed it put the ticket in `state`: the board knows without a poll,
        so a person's next move is seen as starting there."""
        row = self.rows.get(issue_id)
        if row is not None:
            self.rows[issue_id] = dataclasses.replace(row, state=state, reason=None)

    def row(self, wanted: str) -> BoardRow | None:
        return next((r for r in self.rows.values() if wanted in (r.issue_id, r.identifier)), None)

    def snapshot(self, state: SchedulerState) -> dict[str, Any]:
        last = len(self._order)
        ordered = sorted(
            self.rows.values(),
            key=lambda r: (self._order.get(normalize_state(r.state), last), r.state, r.identifier),
        )
        return {
            "count": len(ordered),
            "rows": [board_row(row, state) for row in ordered[:SNAPSHOT_ROWS]],
        }


def board_row(row: BoardRow, state: SchedulerState) -> dict[str, Any]:
    status, reason = "waiting", row.reason
    pending = state.transitions.get(row.issue_id)
    if row.issue_id in state.running:
        status, reason = "running", None
    elif pending is not None:
        status = "moving"
        reason = f"the daemon is moving it to {pending.plan.target}" + (
            f" (last try failed: {pending.error})" if pending.error else ""
        )
    elif row.issue_id in state.retry_attempts:
        retry = state.retry_attempts[row.issue_id]
        status, reason = "retrying", retry.error or "continues shortly"
    elif reason is None:
        reason = "waiting for the next poll"
    return {
        "issue_id": row.issue_id,
        "issue_identifier": row.identifier,
        "title": row.title,
        "state": row.state,
        "stage": row.stage,
        "url": row.url,
        "status": status,
        "reason": reason,
    }

"""A board's columns and how they map to workflow states.

A state is a column title. A card in a sub-column (a column whose `column_id` names a parent)
takes its parent's title, unless the sub-column's own title is one of the workflow's states:
that lets a workflow treat e.g. "Review" inside "In Progress" as a state of its own.

Column types are Kaiten's: 1 queue, 2 in progress, 3 done. `discover_states()` uses the
top-level columns only: sub-columns inherit their parent's state anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from symphony.base.issue import normalize_state

from .._support.normalize import as_int, text_or_none

QUEUE, IN_PROGRESS, DONE = 1, 2, 3
ACTIVE_TYPES = frozenset({QUEUE, IN_PROGRESS})


@dataclass(frozen=True, slots=True)
class Column:
    """A board column or a sub-column of one (`parent_id`), with Kaiten's type of column."""

    id: int
    title: str
    type: int | None
    parent_id: int | None
    sort_order: float


def column_from(raw: Any, parent_id: int | None = None) -> Column | None:
    """A column from a Kaiten column object; None when it has no integer id or no title."""
    if not isinstance(raw, Mapping):
        return None
    column_id = as_int(raw.get("id"))
    title = text_or_none(raw.get("title"))
    if column_id is None or title is None:
        return None
    sort_order = raw.get("sort_order")
    return Column(
        id=column_id,
        title=title.strip(),
        type=as_int(raw.get("type")),
        parent_id=as_int(raw.get("column_id")) or parent_id,
        sort_order=float(sort_order) if isinstance(sort_order, int | float) else 0.0,
    )


class Layout:
    """The columns of one board, read once and used for every card of a poll."""

    def __init__(self, columns: Iterable[Column], read_at: float = 0.0) -> None:
        ordered = sorted(columns, key=lambda c: (c.sort_order, c.id))
        self.columns: dict[int, Column] = {}
        for column in ordered:
            self.columns.setdefault(column.id, column)
        self.read_at = read_at

    @property
    def top_level(self) -> list[Column]:
        return [c for c in self.columns.values() if c.parent_id is None]

    def children(self, column_id: int) -> list[Column]:
        return [c for c in self.columns.values() if c.parent_id == column_id]

    def state_of(self, column_id: int, named: frozenset[str]) -> str | None:
        """The state of a card in `column_id` (`named`: the workflow's normalized states)."""
        column = self.columns.get(column_id)
        if column is None:
            return None
        if column.parent_id is None or normalize_state(column.title) in named:
            return column.title
        parent = self.columns.get(column.parent_id)
        return parent.title if parent is not None else column.title

    def column_ids_for(self, states: Sequence[str], named: frozenset[str]) -> list[int]:
        """Every column whose cards are in one of `states`."""
        wanted = {normalize_state(s) for s in states}
        return [
            c.id
            for c in self.columns.values()
            if normalize_state(self.state_of(c.id, named) or "") in wanted
        ]

    def is_done(self, column_id: int) -> bool:
        """Kaiten's own verdict: the column (or, for a sub-column, its parent) is of type done."""
        column = self.columns.get(column_id)
        if column is not None and column.parent_id is not None:
            column = self.columns.get(column.parent_id, column)
        return column is not None and column.type == DONE

    def target_for(
        self, state: str, named: frozenset[str] = frozenset(), current: int | None = None
    ) -> Column | None:
        """Where a card moved to `state` goes: a top-level column with that title first, else
        a sub-column with it. Cards live in the leaves, so a column that has sub-columns
        receives the card in its first sub-column, unless the card's `current` column already
        carries `state` (a sub-column inheriting its parent's title): then it stays there, so
        moving a card to the state it is in changes nothing."""
        key = normalize_state(state)
        here = self.state_of(current, named) if current is not None else None
        if current is not None and here is not None and normalize_state(here) == key:
            return self.columns[current]
        matches = [c for c in self.columns.values() if normalize_state(c.title) == key]
        if not matches:
            return None
        column = min(matches, key=lambda c: c.parent_id is not None)
        children = self.children(column.id)
        return children[0] if children else column

    def titles(self) -> list[str]:
        """Column titles in board order, each sub-column as `Parent / Child` after its parent."""
        names = []
        for top in self.top_level:
            names.append(top.title)
            names += [f"{top.title} / {child.title}" for child in self.children(top.id)]
        return names

    def states(self, named: frozenset[str]) -> list[str]:
        """Every state a card on the board can be in, in board order: each top-level title,
        and the title of each sub-column that is a state of its own (see `state_of`)."""
        ordered: list[Column] = []
        for top in self.top_level:
            ordered += [top, *self.children(top.id)]
        ordered += [c for c in self.columns.values() if c not in ordered]  # orphaned sub-columns
        states: dict[str, str] = {}
        for column in ordered:
            state = self.state_of(column.id, named)
            if state is not None:
                states.setdefault(normalize_state(state), state)
        return list(states.values())

    def discover(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(active, terminal) titles of the top-level columns by type, in board order."""
        active: dict[str, None] = {}
        terminal: dict[str, None] = {}
        for column in self.top_level:
            if column.type in ACTIVE_TYPES:
                active.setdefault(column.title, None)
            elif column.type == DONE:
                terminal.setdefault(column.title, None)
        return tuple(active), tuple(terminal)

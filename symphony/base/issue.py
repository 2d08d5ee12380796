"""The normalized Issue every part of the core speaks, whatever tracker it came from."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

TemplateShape = str | Mapping[str, "TemplateShape"] | tuple["TemplateShape"]
"""What a template may read below a value: `VALUE` (text, a number or null), `ANYTHING` (data
the adapter owns), a map of named fields, or a one-item tuple for a list of that shape."""
VALUE = "value"
ANYTHING = "anything"

ISSUE_TEMPLATE_SHAPE: Mapping[str, TemplateShape] = {
    "id": VALUE,
    "identifier": VALUE,
    "title": VALUE,
    "description": VALUE,
    "priority": VALUE,
    "state": VALUE,
    "branch_name": VALUE,
    "url": VALUE,
    "assignee_id": VALUE,
    "labels": (VALUE,),
    "blocked_by": ({"id": VALUE, "identifier": VALUE, "state": VALUE},),
    "dispatchable": VALUE,
    "created_at": VALUE,
    "updated_at": VALUE,
    "author": VALUE,
    "native_ref": ANYTHING,
}
"""The shape of `Issue.to_template()`, which prompt templates are checked against."""


def normalize_state(state: str) -> str:
    """States are compared after trimming and lower-casing; their spelling is kept for display."""
    return state.strip().lower()


def normalize_labels(labels: object) -> tuple[str, ...]:
    """Trimmed, lower-cased, blank-free, de-duplicated labels in first-seen order; interned,
    since a board's thousands of tickets share a handful of labels."""
    if not isinstance(labels, list | tuple):
        return ()
    seen: dict[str, None] = {}
    for label in labels:
        if isinstance(label, str) and label.strip():
            seen.setdefault(sys.intern(label.strip().lower()), None)
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class BlockerRef:
    """A ticket that blocks this one, as its tracker names it; a field the tracker did not give is
    None (a blocker whose state is unknown counts as open)."""

    id: str | None
    identifier: str | None
    state: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Issue:
    """A schedulable ticket. `id` is an opaque dispatch identity; `identifier` names workspaces."""

    id: str
    identifier: str
    title: str
    state: str
    dispatchable: bool
    description: str | None = None
    priority: int | None = None
    branch_name: str | None = None
    url: str | None = None
    assignee_id: str | None = None
    labels: tuple[str, ...] = ()
    blocked_by: tuple[BlockerRef, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
    author: str | None = None
    """Who opened the ticket (login, username or name) where the tracker says; None otherwise."""
    native_ref: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        # Timestamps are instants: a naive one is taken as UTC so every pair compares.
        for name in ("created_at", "updated_at"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))

    def to_template(self) -> dict[str, Any]:
        """Plain data for prompt templates and JSON: string keys, lists, ISO timestamps."""
        return {
            "id": self.id,
            "identifier": self.identifier,
            "title": self.title,
            "description": self.description,
            "priority": self.priority,
            "state": self.state,
            "branch_name": self.branch_name,
            "url": self.url,
            "assignee_id": self.assignee_id,
            "labels": list(self.labels),
            "blocked_by": [
                {"id": b.id, "identifier": b.identifier, "state": b.state} for b in self.blocked_by
            ],
            "dispatchable": self.dispatchable,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "author": self.author,
            "native_ref": dict(self.native_ref) if self.native_ref is not None else None,
        }

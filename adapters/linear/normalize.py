"""Linear issue nodes (the `SymphonyIssue` fragment) turned into normalized Issues."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from symphony.base.issue import BlockerRef, Issue, normalize_labels, normalize_state

from .._support.errors import Malformed as Malformed
from .._support.normalize import as_int, parse_timestamp, text_or_none

# Linear's own "this is finished" state types. A blocker in such a state no longer blocks even
# when its team names the state differently from the workflow's terminal states.
_DONE_TYPES = frozenset({"completed", "canceled", "duplicate"})


def issue_from_node(
    node: Any, *, terminal_states: frozenset[str], assignee_id: str | None
) -> Issue:
    """The Issue for one node. `terminal_states` are normalized names; `assignee_id`, when set,
    is the only assignee whose issues are dispatchable. Raises `Malformed`."""
    if not isinstance(node, Mapping):
        raise Malformed("issue node is not an object", "?")
    key = _text(node.get("id")) or _text(node.get("identifier")) or "?"
    state = node.get("state")
    required = {
        "id": _text(node.get("id")),
        "identifier": _text(node.get("identifier")),
        "title": _text(node.get("title")),
        "state": _text(state.get("name")) if isinstance(state, Mapping) else None,
    }
    missing = [name for name, value in required.items() if value is None]
    if missing:
        raise Malformed(f"missing or blank {', '.join(missing)}", key)
    assert isinstance(state, Mapping)
    team = _object(node.get("team"))
    project = _object(node.get("project"))
    assignee = _text(_object(node.get("assignee")).get("id"))
    blockers = _blockers(node.get("inverseRelations"))
    blocked = any(_still_blocks(blocker, kind, terminal_states) for blocker, kind in blockers)
    someone_else = assignee_id is not None and assignee != assignee_id
    return Issue(
        id=str(required["id"]),
        identifier=str(required["identifier"]),
        title=str(required["title"]),
        state=str(required["state"]),
        dispatchable=not blocked and not someone_else,
        description=text_or_none(node.get("description")),
        priority=_priority(node.get("priority")),
        branch_name=text_or_none(node.get("branchName")),
        url=text_or_none(node.get("url")),
        assignee_id=assignee,
        labels=normalize_labels(
            [label.get("name") for label in _nodes(node.get("labels")) if isinstance(label, dict)]
        ),
        blocked_by=tuple(blocker for blocker, _ in blockers),
        created_at=parse_timestamp(node.get("createdAt")),
        author=text_or_none(_object(node.get("creator")).get("name")),
        updated_at=parse_timestamp(node.get("updatedAt")),
        native_ref={
            "team_id": _text(team.get("id")),
            "team_key": _text(team.get("key")),
            "state_id": _text(state.get("id")),
            "state_type": _text(state.get("type")),
            "project_id": _text(project.get("id")),
            "project_slug_id": _text(project.get("slugId")),
        },
    )


def _priority(value: Any) -> int | None:
    # Linear: 0 = no priority, 1 urgent .. 4 low. Only 1..4 rank; anything else is unknown.
    number = as_int(value)
    return number if number is not None and 1 <= number <= 4 else None


def _blockers(relations: Any) -> list[tuple[BlockerRef, str | None]]:
    """Issues blocking this one, with their Linear state type. "X is blocked by Y" is an entry
    in X's inverse relations of type `blocks` whose `issue` is Y."""
    found: dict[str, tuple[BlockerRef, str | None]] = {}
    for relation in _nodes(relations):
        if not isinstance(relation, Mapping) or relation.get("type") != "blocks":
            continue
        other = _object(relation.get("issue"))
        state = _object(other.get("state"))
        ref = BlockerRef(
            id=_text(other.get("id")),
            identifier=_text(other.get("identifier")),
            state=_text(state.get("name")),
        )
        if ref.id is None and ref.identifier is None:
            continue  # nothing to show or match: an unusable best-effort entry
        found.setdefault(ref.id or ref.identifier or "", (ref, _text(state.get("type"))))
    return list(found.values())


def _still_blocks(blocker: BlockerRef, kind: str | None, terminal: frozenset[str]) -> bool:
    if kind is not None and kind.lower() in _DONE_TYPES:
        return False
    # A blocker whose state cannot be read is assumed open: dispatching early is the worse error.
    return blocker.state is None or normalize_state(blocker.state) not in terminal


def _nodes(connection: Any) -> list[Any]:
    nodes = connection.get("nodes") if isinstance(connection, Mapping) else None
    return nodes if isinstance(nodes, list) else []


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    # Kept as Linear spells it (ids are opaque); only a blank value counts as absent.
    return value if isinstance(value, str) and value.strip() else None

"""GitLab REST payloads to the core's values: issues (`API_Entities_Issue`,
`API_Entities_RelatedIssue`) to normalized `Issue`s, notes (`APIEntitiesNote`) to `Comment`s,
and issue references (`group/project#12`, `#12`) to the project and iid they name.

`Malformed` marks a record that cannot become an Issue (no iid, title or opened/closed state)
or a Comment (no id or body): state reads skip it, id refreshes and comment reads fail on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from symphony.base.issue import BlockerRef, Issue, normalize_labels, normalize_state
from symphony.tracker.contract import Comment

from .._support.errors import Malformed as Malformed
from .._support.label_scope import CLOSED_FLAG
from .._support.label_scope import label_names as label_names
from .._support.normalize import as_int, numbered_record, parse_timestamp, text_or_none
from .config import GitLabConfig, is_project

OPENED = "opened"
CLOSED = CLOSED_FLAG


def required(item: Any) -> tuple[int, str, str]:
    """iid, title and the opened/closed flag, or `Malformed`."""
    return numbered_record(item, "iid", (OPENED, CLOSED))


def state_of(item: Mapping[str, Any], config: GitLabConfig) -> str | None:
    """closed -> `closed_state`; opened -> the state its labels give it; None when opened
    without a state label (outside the scope)."""
    return config.label_states.state_of_record(item)


def project_path(item: Mapping[str, Any], base_url: str) -> str | None:
    """`group/sub/project` from `references.full` (`group/project#12`), else from `web_url`
    (`<base_url>/group/sub/project/-/issues/12`; also `/-/work_items/12` on newer instances)."""
    references = item.get("references")
    full = references.get("full") if isinstance(references, Mapping) else None
    if isinstance(full, str) and "#" in full:
        path = full.rsplit("#", 1)[0]
        if path:
            return path
    web_url = item.get("web_url")
    if isinstance(web_url, str) and web_url.startswith(base_url + "/"):
        path, marker, _ = web_url[len(base_url) + 1 :].partition("/-/")
        if marker and path:
            return path
    return None


def identifier(item: Mapping[str, Any], config: GitLabConfig, iid: int) -> str:
    """`<project path>#<iid>`, GitLab's own full reference; with a numeric project id and no
    path in the record, `<id>#<iid>`."""
    return f"{project_path(item, config.base_url) or config.project}#{iid}"


def priority_of(labels: Sequence[str], config: GitLabConfig) -> int | None:
    """The best (lowest) priority among the issue's priority labels."""
    found = [config.priority_labels[label] for label in labels if label in config.priority_labels]
    return min(found) if found else None


def to_issue(
    item: Mapping[str, Any],
    config: GitLabConfig,
    state: str,
    blockers: Sequence[BlockerRef] = (),
) -> Issue:
    """An Issue whose `id` is the iid as text (stable within the project, unlike the global
    `id`, which is kept in `native_ref`)."""
    iid, title, _ = required(item)
    labels = normalize_labels(label_names(item.get("labels")))
    return Issue(
        id=str(iid),
        identifier=identifier(item, config, iid),
        title=title.strip(),
        state=state,
        dispatchable=not any(blocks(b, config) for b in blockers),
        description=text_or_none(item.get("description")),
        priority=priority_of(labels, config),
        url=text_or_none(item.get("web_url")),
        assignee_id=_assignee(item),
        labels=labels,
        blocked_by=tuple(blockers),
        created_at=parse_timestamp(item.get("created_at")),
        updated_at=parse_timestamp(item.get("updated_at")),
        author=text_or_none(user.get("username"))
        if isinstance(user := item.get("author"), Mapping)
        else None,
        native_ref={"project": config.project, "iid": iid, "id": as_int(item.get("id"))},
    )


def _assignee(item: Mapping[str, Any]) -> str | None:
    """The username of `assignee`, else of the first of `assignees` (GitLab sends both; the
    singular one is deprecated)."""
    candidates: list[Any] = [item.get("assignee")]
    if isinstance(item.get("assignees"), list):
        candidates += item["assignees"]
    for user in candidates:
        if isinstance(user, Mapping) and (name := text_or_none(user.get("username"))):
            return name
    return None


def blocker(link: Any, config: GitLabConfig, project_id: int | None) -> BlockerRef | None:
    """A blocker ref from an issue-links entry with `link_type == "is_blocked_by"`; None for
    other link types and unusable entries (the list is best effort)."""
    if not isinstance(link, Mapping) or link.get("link_type") != "is_blocked_by":
        return None
    try:
        iid, _, flag = required(link)
    except Malformed:
        return None
    same = project_id is not None and as_int(link.get("project_id")) == project_id
    state = state_of(link, config) if same else None
    if state is None:
        state = config.label_states.outside_scope(flag == CLOSED, OPENED)
    global_id = as_int(link.get("id"))
    return BlockerRef(
        id=str(iid) if same else (str(global_id) if global_id is not None else None),
        identifier=f"{project_path(link, config.base_url) or link.get('project_id')}#{iid}",
        state=state,
    )


def blocks(ref: BlockerRef, config: GitLabConfig) -> bool:
    """A blocker blocks until it reaches a terminal state (closing it is one)."""
    return normalize_state(ref.state or "") not in config.terminal_states


def reference(text: str, project: str) -> tuple[str, int] | None:
    """The project and iid an issue reference names: `<project path or id>#<iid>` (the
    `identifier` format), or `#<iid>` for an issue of `project`; None when it is neither."""
    path, marker, number = text.strip().rpartition("#")
    if not marker or not (number.isascii() and number.isdigit()) or int(number) < 1:
        return None
    path = path.strip("/") or project
    return (path, int(number)) if is_project(path) else None


def to_comment(note: Any) -> Comment:
    """A Comment from a note: `id` as text, `author` its author's username, `created_at` in
    UTC; `Malformed` without an id or a body."""
    if not isinstance(note, Mapping):
        raise Malformed("note record is not an object")
    note_id = as_int(note.get("id"))
    if note_id is None or note_id < 1:
        raise Malformed("note has no id")
    body = note.get("body")
    if not isinstance(body, str):
        raise Malformed(f"note {note_id} has no body")
    author = note.get("author")
    created = parse_timestamp(note.get("created_at"))
    return Comment(
        id=str(note_id),
        body=body,
        author=text_or_none(author.get("username")) if isinstance(author, Mapping) else None,
        created_at=created.astimezone(UTC) if created else None,
    )

"""GitHub payloads to the normalized values: issues (REST objects and GraphQL `Issue` nodes) to
`Issue`s, issue comments to `Comment`s, and `owner/name#number` references back to their parts.

`Malformed` marks a record that cannot become an Issue (no number, title or state): state reads
skip it, id refreshes fail on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from symphony.base.issue import BlockerRef, Issue, normalize_labels
from symphony.tracker.contract import Comment

from .._support.errors import Malformed as Malformed
from .._support.label_scope import CLOSED_FLAG
from .._support.label_scope import label_names as label_names
from .._support.normalize import as_int, numbered_record, parse_timestamp, text_or_none
from .config import GitHubConfig

_REPO_IN_URL = re.compile(r"/repos/([^/]+/[^/]+)/?$")
_REPO_IN_HTML = re.compile(r"^https?://[^/]+/([^/]+/[^/]+)/(?:issues|pull)/\d+")
_ISSUE_IN_URL = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)/?$")
_REPOSITORY = r"[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?(?:#|$))[A-Za-z0-9._-]+"
_REFERENCE = re.compile(rf"^(?P<repository>{_REPOSITORY})?#(?P<number>[1-9][0-9]*)$")


def identifier(repository: str, number: int) -> str:
    """GitHub's own cross-repository reference form, unique across repositories."""
    return f"{repository}#{number}"


def parse_reference(text: str, repository: str) -> tuple[str, int] | None:
    """(`owner/name`, number) of an `owner/name#n` reference, or of `#n` in `repository`; None
    when `text` is neither."""
    match = _REFERENCE.match(text.strip())
    if match is None:
        return None
    return match.group("repository") or repository, int(match.group("number"))


def is_repository(text: str) -> bool:
    """Whether `text` is an `owner/name` GitHub could hold (and safe inside a URL path)."""
    return re.fullmatch(_REPOSITORY, text) is not None


def repository_of(item: Mapping[str, Any]) -> str | None:
    """`owner/name` of a REST issue, from `repository_url` or else `html_url`."""
    for key, pattern in (("repository_url", _REPO_IN_URL), ("html_url", _REPO_IN_HTML)):
        value = item.get(key)
        if isinstance(value, str) and (match := pattern.search(value)):
            return match.group(1)
    return None


def priority_of(labels: Sequence[str], config: GitHubConfig) -> int | None:
    """The best (lowest) priority among the issue's priority labels."""
    found = [config.priority_labels[label] for label in labels if label in config.priority_labels]
    return min(found) if found else None


def rest_state(item: Mapping[str, Any], config: GitHubConfig) -> str | None:
    """The workflow state of a REST issue in the label scope: closed -> `closed_state`;
    open -> its state label; None when open without one (outside the scope)."""
    return config.label_states.state_of_record(item)


def required(item: Any) -> tuple[int, str, str]:
    """number, title and open/closed flag, or `Malformed`."""
    return numbered_record(item, "number", ("open", CLOSED_FLAG))


def rest_issue(
    item: Mapping[str, Any],
    config: GitHubConfig,
    state: str,
    blockers: Sequence[BlockerRef] = (),
) -> Issue:
    """A label-scope Issue. `id` is the issue number as text (stable within the repository)."""
    number, title, _ = required(item)
    repository = config.repository or repository_of(item) or ""
    labels = normalize_labels(label_names(item.get("labels")))
    assignee = item.get("assignee")
    node_id = text_or_none(item.get("node_id"))
    return Issue(
        id=str(number),
        identifier=identifier(repository, number),
        title=title.strip(),
        state=state,
        dispatchable=not any(_open_blocker(b, config) for b in blockers),
        description=text_or_none(item.get("body")),
        priority=priority_of(labels, config),
        url=text_or_none(item.get("html_url")),
        assignee_id=text_or_none(assignee.get("login")) if isinstance(assignee, Mapping) else None,
        labels=labels,
        blocked_by=tuple(blockers),
        author=text_or_none(user.get("login"))
        if isinstance(user := item.get("user"), Mapping)
        else None,
        created_at=parse_timestamp(item.get("created_at")),
        updated_at=parse_timestamp(item.get("updated_at")),
        native_ref={"repository": repository, "number": number, "node_id": node_id},
    )


def rest_blocker(item: Any, config: GitHubConfig) -> BlockerRef | None:
    """A blocker ref from a `blocked_by` entry; None when unusable (best-effort list)."""
    try:
        number, _, flag = required(item)
    except Malformed:
        return None
    repository = repository_of(item)
    if repository is None:
        return None
    same = repository.lower() == (config.repository or "").lower()
    state = rest_state(item, config) if same else None
    if state is None:
        state = config.label_states.outside_scope(flag == CLOSED_FLAG, "open")
    return BlockerRef(
        id=str(number) if same else text_or_none(item.get("node_id")),
        identifier=identifier(repository, number),
        state=state,
    )


def _open_blocker(blocker: BlockerRef, config: GitHubConfig) -> bool:
    return (blocker.state or "").strip().lower() != config.label_states.closed_state.strip().lower()


def graphql_issue(
    content: Mapping[str, Any],
    config: GitHubConfig,
    *,
    item_id: str,
    state: str,
) -> Issue:
    """A project-scope Issue from a ProjectV2Item's `content` Issue: `id` is the item id."""
    number = as_int(content.get("number"))
    title = content.get("title")
    repo = content.get("repository")
    repository = repo.get("nameWithOwner") if isinstance(repo, Mapping) else None
    if number is None or not isinstance(title, str) or not title.strip():
        raise Malformed(f"project item {item_id} has an issue without number or title")
    if not isinstance(repository, str) or "/" not in repository:
        raise Malformed(f"project item {item_id} has an issue without a repository")
    labels = normalize_labels(label_names(content.get("labels")))
    assignees = content.get("assignees")
    nodes = assignees.get("nodes") if isinstance(assignees, Mapping) else None
    logins = [n.get("login") for n in nodes or [] if isinstance(n, Mapping)]
    return Issue(
        id=item_id,
        identifier=identifier(repository, number),
        title=title.strip(),
        state=state,
        # Projects v2 carry no blocker data in this schema version; a closed issue whose card
        # was not moved must not be worked on.
        dispatchable=content.get("issueState") == "OPEN",
        description=text_or_none(content.get("body")),
        priority=priority_of(labels, config),
        url=text_or_none(content.get("url")),
        assignee_id=next((x for x in logins if isinstance(x, str)), None),
        labels=labels,
        created_at=parse_timestamp(content.get("createdAt")),
        updated_at=parse_timestamp(content.get("updatedAt")),
        native_ref={
            "repository": repository,
            "number": number,
            "node_id": text_or_none(content.get("id")),
            "project_item_id": item_id,
        },
    )


def comment_of(item: Any) -> Comment:
    """A REST issue comment (`issue-comment`); `Malformed` without an id."""
    if not isinstance(item, Mapping):
        raise Malformed("comment record is not an object")
    comment_id = as_int(item.get("id"))
    if comment_id is None or comment_id < 1:
        raise Malformed("comment has no id")
    body = item.get("body")
    user = item.get("user")
    created = parse_timestamp(item.get("created_at"))
    return Comment(
        id=str(comment_id),
        body=body if isinstance(body, str) else "",
        # A deleted account leaves `user` null (GitHub shows it as "ghost").
        author=text_or_none(user.get("login")) if isinstance(user, Mapping) else None,
        created_at=created.astimezone(UTC) if created else None,
        author_member=is_member(item.get("author_association")),
    )


MEMBER_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
"""GitHub's `author_association` values of the repository's own people: its owner, members of
the organization that owns it, and invited collaborators. A contributor whose pull request was
once merged, a first-timer and anyone else (`NONE`) are not."""


def is_member(association: Any) -> bool | None:
    """Whether an `author_association` (REST) or `authorAssociation` (GraphQL) is one of the
    repository's people; None when GitHub sent none."""
    if not isinstance(association, str):
        return None
    return association.upper() in MEMBER_ASSOCIATIONS


def issue_of_comment(item: Mapping[str, Any]) -> tuple[str, int] | None:
    """(`owner/name`, number) of the issue a REST comment belongs to, from its `issue_url`."""
    value = item.get("issue_url")
    match = _ISSUE_IN_URL.search(value) if isinstance(value, str) else None
    return (match.group(1), int(match.group(2))) if match else None

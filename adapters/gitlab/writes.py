"""The writes to one GitLab project's issues, which the agent tools (`run_tool`) and the daemon's
own writes share, over the tracker's one HTTP client: a move is one `PUT` of the issue's labels
and open/closed state; comments are issue notes, and so is the link to a merge request (posted
once per URL); creating an issue posts it with its state label (closing it afterwards for the
closed state) and records each blocker as an `is_blocked_by` issue link. State labels need not
exist beforehand (GitLab creates a label it is asked to add); `ensure_states` creates them with
a colour. A write refused before any request is `Rejected`: a `tracker_rejected` TrackerError
that also carries the failure code an agent tool reports for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import structlog

from symphony.base.issue import Issue, normalize_state
from symphony.base.tools import INVALID_ARGUMENTS, ToolResult, is_inline
from symphony.tracker import tools as generic
from symphony.tracker.contract import (
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerError,
)
from symphony.tracker.tools import AddComment, MoveIssue

from .._support.errors import Rejected as Rejected
from .._support.http import HttpClient, Response
from .._support.normalize import as_int
from . import tools
from .config import MAX_LABEL_CHARS, GitLabConfig
from .members import ProjectMembers, author_id
from .normalize import (
    Malformed,
    identifier,
    label_names,
    reference,
    required,
    state_of,
    to_comment,
)
from .reads import ProjectIssues, issues_path, list_all

log = structlog.get_logger(__name__)

MAX_TITLE_CHARS = 255  # GitLab's limit on an issue title
STATE_COLOR = "#1f75cb"
TERMINAL_COLOR = "#108548"
"""Colours of the state labels `ensure_states` creates (GitLab requires one)."""


# Checks: the daemon's writes check their arguments as the tools check theirs.


def checked_state(state: str, config: GitLabConfig) -> str:
    call = tools.parse_call(tools.MOVE_ISSUE, {"state": state}, config.base_url)
    if not isinstance(call, MoveIssue):
        raise _refusal(call)
    return call.state


def checked_body(body: str, config: GitLabConfig) -> str:
    call = tools.parse_call(tools.ADD_COMMENT, {"body": body}, config.base_url)
    if not isinstance(call, AddComment):
        raise _refusal(call)
    return call.body


def _refusal(result: tools.ToolCall | ToolResult) -> Rejected:
    output = result.output if isinstance(result, ToolResult) else None
    if isinstance(output, Mapping):
        return Rejected(str(output.get("message")), str(output.get("error")))
    return Rejected("unexpected arguments", INVALID_ARGUMENTS)  # pragma: no cover


def _target(issue: Issue, config: GitLabConfig) -> int:
    """The session's own issue iid, checked against the configured project."""
    ref = issue.native_ref or {}
    project, iid = ref.get("project"), ref.get("iid")
    if not isinstance(iid, int) or isinstance(iid, bool) or iid < 1:
        raise Rejected(f"{issue.identifier} has no iid", tools.NOT_IN_SCOPE)
    if str(project) != config.project or issue.id != str(iid):
        raise Rejected(
            f"{issue.identifier} is not an issue of project {config.project}", tools.NOT_IN_SCOPE
        )
    return iid


def _closes(state: str, config: GitLabConfig) -> bool:
    return normalize_state(state) == normalize_state(config.label_states.closed_state)


def _state_label(state: str, config: GitLabConfig) -> str | None:
    """The label an opened issue in `state` carries; None for the closed state without a
    label of its own (closing the issue is that state)."""
    labels = config.label_states.labels
    if _closes(state, config) and normalize_state(state) not in labels.by_state:
        return None
    label = labels.label_for(state)
    if len(label) > MAX_LABEL_CHARS:
        raise Rejected(f"label {label!r} for that state is too long", INVALID_ARGUMENTS)
    return label


# Agent tools


async def run_tool(
    http: HttpClient, config: GitLabConfig, call: tools.ToolCall, issue: Issue
) -> ToolResult:
    """Run a parsed tool call on the session's issue; a refusal is the tool's failure result."""
    try:
        if isinstance(call, MoveIssue):
            answer = await move(http, config, issue, call.state)
            return ToolResult(
                True,
                {
                    "identifier": issue.identifier,
                    "state": call.state,
                    "previous_state": issue.state,
                    "changed": normalize_state(issue.state) != normalize_state(call.state),
                    "labels": label_names(answer.get("labels")),
                    "issue_state": answer.get("state"),
                },
            )
        extra: dict[str, Any] = {}
        if isinstance(call, AddComment):
            note = await post_note(http, config, issue, call.body)
            note_id, commented = as_int(note.get("id")), True
        else:
            note_id, commented = await link_merge_request(http, config, issue, call.url)
            extra["merge_request"] = call.url
    except Rejected as refused:
        return ToolResult.failure(refused.code, refused.message)
    return ToolResult(
        True,
        {
            "identifier": issue.identifier,
            "commented": commented,
            "note_id": note_id,
            "note_url": f"{issue.url}#note_{note_id}" if issue.url and note_id else None,
            **extra,
        },
    )


# Moves


async def move(
    http: HttpClient, config: GitLabConfig, issue: Issue, state: str
) -> Mapping[str, Any]:
    """Put the session's issue in `state` with one PUT; returns GitLab's answer."""
    iid = _target(issue, config)
    answer = await _put_issue(http, config, iid, _move_body(config, state, issue.labels))
    log.info("issue moved", issue_identifier=issue.identifier, state=state)
    return answer


def _move_body(config: GitLabConfig, state: str, current: Sequence[str]) -> dict[str, Any]:
    labels = config.label_states.labels
    target = _state_label(state, config)
    # Every other state label is removed explicitly: scoped labels replace each other only
    # on paid tiers, and a Free instance would otherwise keep both. The issue's own
    # prefixed labels are added so a hand-off label from an earlier move goes too.
    others = [*labels.by_state.values(), *(x for x in current if labels.is_state_label(x))]
    remove = [name for name in dict.fromkeys(others) if name.lower() != (target or "").lower()]
    # `reopen` on an opened issue is a no-op in GitLab, so it is sent on every non-closing
    # move: the session's snapshot may not know the issue was closed.
    body: dict[str, Any] = {
        "remove_labels": ",".join(remove),
        "state_event": "close" if _closes(state, config) else "reopen",
    }
    if target is not None:
        body["add_labels"] = target
    return body


async def _put_issue(
    http: HttpClient, config: GitLabConfig, iid: int, body: Mapping[str, Any]
) -> Mapping[str, Any]:
    response = await http.request("PUT", f"{issues_path(config)}/{iid}", json_body=body)
    answer = response.body
    try:
        required(answer)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitLab issue {iid}: {exc}") from None
    assert isinstance(answer, Mapping)
    return answer


# Comments (notes)


async def post_note(
    http: HttpClient, config: GitLabConfig, issue: Issue, body: str
) -> Mapping[str, Any]:
    """`POST …/issues/{iid}/notes` on the session's issue; the answer ({} when not an object)."""
    iid = _target(issue, config)
    response = await http.request(
        "POST", f"{issues_path(config)}/{iid}/notes", json_body={"body": body}
    )
    log.info("issue commented", issue_identifier=issue.identifier)
    return response.body if isinstance(response.body, Mapping) else {}


def comment_from(note: Any, issue: Issue) -> Comment:
    try:
        return to_comment(note)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitLab note on {issue.identifier}: {exc}") from None


async def edit_comment(
    http: HttpClient, config: GitLabConfig, issue: Issue, comment_id: str, body: str
) -> Comment:
    iid = _target(issue, config)
    text = checked_body(body, config)
    if not (comment_id.isascii() and comment_id.isdigit()) or int(comment_id) < 1:
        raise TrackerError(TRACKER_REJECTED, f"{comment_id!r} is not a GitLab note id")
    # GitLab answers 403 for a note someone else wrote and 404 for one that is gone (or
    # belongs to another issue): neither will change on a retry.
    response = await http.request(
        "PUT",
        f"{issues_path(config)}/{iid}/notes/{int(comment_id)}",
        json_body={"body": text},
        ok=(200, 400, 403, 404),
    )
    if response.status != 200:
        raise TrackerError(
            TRACKER_REJECTED,
            f"GitLab refused to edit note {comment_id} of {issue.identifier} "
            f"({response.status}){_said(response)}",
        )
    log.info("comment edited", issue_identifier=issue.identifier, comment_id=comment_id)
    return comment_from(response.body, issue)


async def list_comments(
    http: HttpClient, config: GitLabConfig, issue: Issue, members: ProjectMembers | None = None
) -> list[Comment]:
    """The issue's notes, oldest first, without GitLab's system notes; with `members`, each
    says whether its author is a member of the project (one members request for the authors
    not known yet)."""
    iid = _target(issue, config)
    params = {"sort": "asc", "order_by": "created_at"}
    notes = await list_all(http, f"{issues_path(config)}/{iid}/notes", params)
    kept: dict[str, tuple[Comment, int | None]] = {}
    for note in notes:
        if isinstance(note, Mapping) and note.get("system") is True:
            continue  # GitLab's own activity lines ("changed the label"), not comments
        comment = comment_from(note, issue)
        # A note added mid-listing shifts pages: the first reading of each stands.
        kept.setdefault(comment.id, (comment, author_id(note.get("author"))))
    if members is None:
        return [comment for comment, _ in kept.values()]
    member = await members.of(user for _, user in kept.values())
    return [
        replace(comment, author_member=member.get(user) if user is not None else None)
        for comment, user in kept.values()
    ]


# Merge request links

LINK_PREFIX = "Linked merge request: "


def checked_link(url: str) -> str:
    """`url` trimmed when it is an http(s) URL, or `Rejected`."""
    call = generic.http_link({"url": url.strip()})
    if isinstance(call, ToolResult):
        raise _refusal(call)
    return call.url


def of_the_project(url: str, config: GitLabConfig) -> bool:
    """Whether `url` is a merge request page of the configured project (named by its path)."""
    found = tools.merge_request_pattern(config.base_url).match(url)
    return found is not None and found.group(1).lower() == config.project.lower()


async def link_merge_request(
    http: HttpClient, config: GitLabConfig, issue: Issue, url: str
) -> tuple[int | None, bool]:
    """Name the merge request at `url` on the issue, once: (the note's id, whether this call
    posted it).

    GitLab has no API that links an existing merge request to an issue: a closing reference
    (`Closes #<iid>`) in the merge request's description is what links it, and the daemon
    writes one only when the tracker is the merge request's project; an agent's merge request
    may have none. So the link is the note `Linked merge request: <url>`, which holds whatever
    project the merge request is in, and which GitLab renders as a reference showing the merge
    request's own title (so no text of ours is added). A note whose first line is already that
    (posted by the link tool or an earlier call) is found first: linking the same URL again
    posts nothing.
    """
    line = LINK_PREFIX + url
    for comment in await list_comments(http, config, issue):
        if comment.body.strip().split("\n", 1)[0].strip() == line:
            return (int(comment.id) if comment.id.isdigit() else None), False
    note = await post_note(http, config, issue, line)
    return as_int(note.get("id")), True


# Issues, blockers and state labels


async def create_issue(
    http: HttpClient, config: GitLabConfig, ticket: NewTicket, issues: ProjectIssues
) -> Issue:
    """Post the issue in `ticket.state`, blocked by `ticket.blocked_by`; returns it as
    `issues` reads it."""
    if ticket.parent is not None:
        _target(ticket.parent, config)  # one project: the parent must be one of its issues
    title = ticket.title.strip()
    if not title or len(title) > MAX_TITLE_CHARS or not is_inline(title):
        raise Rejected(
            f"a new issue needs a one-line title of at most {MAX_TITLE_CHARS} characters",
            INVALID_ARGUMENTS,
        )
    state = checked_state(ticket.state, config)
    label = _state_label(state, config)
    blockers: dict[tuple[str, int], str] = {}
    for given in dict.fromkeys(ticket.blocked_by):
        blockers.setdefault(await _resolve_blocker(http, config, given), given)

    body: dict[str, Any] = {"title": title}
    if ticket.description.strip():
        body["description"] = ticket.description
    if label is not None:
        body["labels"] = label
    response = await http.request("POST", issues_path(config), json_body=body, ok=(201, 400, 422))
    if response.status != 201:
        raise TrackerError(
            TRACKER_REJECTED,
            f"GitLab refused to create the issue ({response.status}){_said(response)}",
        )
    created = response.body
    try:
        iid, _, _ = required(created)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitLab created issue: {exc}") from None
    new = identifier(created, config, iid)
    log.info("issue created", issue_identifier=new, state=state)
    try:
        if _closes(state, config):
            # Issues are created opened: closing is the move GitLab offers.
            created = await _put_issue(http, config, iid, _move_body(config, state, ()))
        for (project_id, blocker_iid), blocker_name in blockers.items():
            await _link_blocker(http, config, iid, new, project_id, blocker_iid, blocker_name)
        actual = state_of(created, config)
        if actual is None:
            raise TrackerError(TRACKER_RESPONSE, "GitLab's answer carries no state label")
        return await issues.issue_in(created, actual)
    except TrackerError as exc:
        # The issue exists: say so, lest a retry create it twice unknowingly.
        raise TrackerError(
            exc.category,
            f"created {new}, then: {exc.message}",
            retry_after_s=exc.retry_after_s,
        ) from None


async def _resolve_blocker(http: HttpClient, config: GitLabConfig, name: str) -> tuple[str, int]:
    """The project id and iid of the issue `name` refers to, read from GitLab; an
    identifier that names no visible issue is `tracker_rejected`."""
    ref = reference(name, config.project)
    if ref is None:
        raise TrackerError(
            TRACKER_REJECTED,
            f"blocker {name!r} is not a GitLab issue reference like {config.project}#12",
        )
    project, iid = ref
    response = await http.request(
        "GET",
        f"/projects/{quote(project, safe='')}/issues/{iid}",
        conditional=True,
        ok=(200, 404),
    )
    if response.status == 404:
        raise TrackerError(TRACKER_REJECTED, f"blocker {name!r}: GitLab has no such issue")
    try:
        required(response.body)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitLab blocker {name!r}: {exc}") from None
    project_id = as_int(response.body.get("project_id"))
    return (str(project_id) if project_id is not None else project, iid)


async def _link_blocker(
    http: HttpClient,
    config: GitLabConfig,
    iid: int,
    name: str,
    project_id: str,
    blocker_iid: int,
    blocker_name: str,
) -> None:
    response = await http.request(
        "POST",
        f"{issues_path(config)}/{iid}/links",
        json_body={
            "target_project_id": project_id,
            "target_issue_iid": str(blocker_iid),
            "link_type": "is_blocked_by",
        },
        ok=(200, 201, 403, 404, 409),
    )
    if response.status == 409:
        return  # already linked
    answer = response.body if isinstance(response.body, Mapping) else {}
    if response.status in (403, 404) or answer.get("link_type") == "relates_to":
        # Blocking links are a paid feature: without it GitLab refuses them (403) or, on
        # some versions, records a plain relation. The issue stands without the blocker,
        # as reads on such an instance see none.
        log.warning(
            "blocker not recorded",
            issue_identifier=name,
            blocker=blocker_name,
            reason=f"GitLab answered {response.status}{_said(response)}",
        )


async def ensure_states(http: HttpClient, config: GitLabConfig, states: Sequence[str]) -> list[str]:
    """Create the state labels `states` need and the project lacks; the states they serve."""
    wanted: dict[str, str] = {}
    for state in states:
        label = _state_label(checked_state(state, config), config)
        if label is not None:  # the closed state is a closed issue, not a label
            wanted.setdefault(label, state)
    if not wanted:
        return []
    url = f"/projects/{config.project_ref}/labels"
    listed = await list_all(http, url, {})
    # The project's labels include its groups' (GitLab's default), which a move also uses.
    existing = {x.get("name") for x in listed if isinstance(x, Mapping)}
    created: list[str] = []
    for label, state in wanted.items():
        if label in existing:
            continue
        terminal = normalize_state(state) in config.terminal_states
        response = await http.request(
            "POST",
            url,
            json_body={
                "name": label,
                "color": TERMINAL_COLOR if terminal else STATE_COLOR,
                "description": f"Workflow state {state.strip()}",
            },
            ok=(201, 400, 409),
        )
        if response.status == 409:
            continue  # created meanwhile, or present in another spelling
        if response.status != 201:
            raise TrackerError(
                TRACKER_REJECTED,
                f"GitLab refused to create the label {label!r} ({response.status})"
                f"{_said(response)}",
            )
        log.info("state label created", label=label, state=state)
        created.append(state)
    return created


def _said(response: Response) -> str:
    """GitLab's reason for a refusal, from `message` (text, or a map of field errors) or
    `error`, as a `: …` suffix."""
    body = response.body if isinstance(response.body, Mapping) else {}
    reason = body.get("message") or body.get("error")
    if reason is None:
        return ""
    text = reason if isinstance(reason, str) else json.dumps(reason, ensure_ascii=False)
    return f": {text.strip()[:200]}"

"""`GitLabTracker`: the `Tracker` for the issues of one GitLab project, whose workflow state is
a label, over the shared HTTP client.

Reads list `GET /projects/{id}/issues` one state label at a time, always with `state=opened`
(GitLab's default is `all`, which would return closed issues still carrying an active label).
Pages follow `x-next-page` (an empty value ends the listing), or `Link: rel="next"` when that
header is absent; `x-total` is never used (GitLab omits it above 10,000 results). A refresh
asks for up to 100 iids in one request (`iids[]=`). Blockers come from the issue links
endpoint: `blocking_issues_count` counts the issues an issue *blocks*, not its blockers, so it
cannot spare that request.

Writes (the agent tools and the daemon's own, over the same functions and the same client):
a move is one `PUT` of the issue's labels and open/closed state; comments are issue notes;
creating an issue posts it with its state label (closing it afterwards for the closed state)
and records each blocker as an `is_blocked_by` issue link. State labels need not exist
beforehand (GitLab creates a label it is asked to add); `ensure_states` creates them with a
colour.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import structlog

from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.base.tools import INVALID_ARGUMENTS, ToolResult, ToolSpec, is_inline
from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerError,
)
from symphony.tracker.tools import AddComment, MoveIssue

from .._support.http import HttpClient, RateLimitHeaders, Response, follow_link, get_pages
from .._support.label_scope import issues_in_states
from .._support.normalize import as_int
from .._support.skipped import SkippedRecords
from .._support.tool_calls import guarded
from . import tools
from .config import MAX_LABEL_CHARS, GitLabConfig
from .normalize import (
    CLOSED,
    Malformed,
    blocker,
    identifier,
    label_names,
    reference,
    required,
    state_of,
    to_comment,
    to_issue,
)
from .webhook import GitLabWebhook

log = structlog.get_logger(__name__)

PER_PAGE = 100  # GitLab's maximum; larger values are clamped
IIDS_PER_REQUEST = 100
MAX_PAGES = 100
"""Guards against a listing that never ends (10,000 issues per state label)."""

# GitLab reports its quota as `RateLimit-*` (reset in epoch seconds) and adds `Retry-After`
# to a 429; the shared client prefers Retry-After, then the reset.
RATE_LIMIT_HEADERS = RateLimitHeaders(remaining="ratelimit-remaining", reset="ratelimit-reset")

MAX_TITLE_CHARS = 255  # GitLab's limit on an issue title
STATE_COLOR = "#1f75cb"
TERMINAL_COLOR = "#108548"
"""Colours of the state labels `ensure_states` creates (GitLab requires one)."""


class GitLabTracker:
    def __init__(
        self,
        config: GitLabConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self.http = HttpClient(
            provider="GitLab",
            base_url=config.api_url,
            headers={
                "PRIVATE-TOKEN": config.token.value,
                "Accept": "application/json",
                "User-Agent": "symphony",
            },
            rate_limits=RATE_LIMIT_HEADERS,
            transport=transport,
            clock=clock,
            sleep=sleep,
        )
        self._issues = f"/projects/{config.project_ref}/issues"
        self._skipped = SkippedRecords(log, "issue", "record", project=self.config.project)

    # Reads

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        skipped: dict[str, str] = {}
        found = await issues_in_states(states, self.config.label_states, self, skipped)
        self._skipped.update(skipped)
        return found

    async def closed_issues(self) -> list[Any]:
        params = {"state": CLOSED, "order_by": "updated_at", "sort": "desc"}
        return await self._list(params, self.config.closed_page_limit)

    async def labelled_issues(self, label: str) -> list[Any]:
        return await self._list({"state": "opened", "labels": label}, MAX_PAGES)

    def record_state(self, item: Any) -> tuple[str, str | None]:
        return str(required(item)[0]), state_of(item, self.config)

    def record_key(self, item: Any) -> str:
        return _record_key(item)

    async def issue_in(self, item: Any, state: str) -> Issue:
        return await self._issue(item, state)

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        # Ids are iids; anything else was never an id of this tracker.
        iids = [i for i in dict.fromkeys(ids) if i.isdigit() and int(i) > 0]
        result: list[Issue] = []
        for start in range(0, len(iids), IIDS_PER_REQUEST):
            chunk = iids[start : start + IIDS_PER_REQUEST]
            params = {"iids[]": chunk, "state": "all", "per_page": PER_PAGE}
            for item in await get_pages(self.http, self._issues, params, MAX_PAGES, self._next):
                try:
                    iid, _, _ = required(item)
                except Malformed as exc:
                    raise TrackerError(
                        TRACKER_RESPONSE, f"GitLab issue in {self.config.project}: {exc}"
                    ) from None
                if str(iid) not in chunk:
                    continue  # an instance that ignored the filter: never report strangers
                state = state_of(item, self.config)
                if state is None:
                    continue  # opened without a state label: outside the scope
                result.append(await self._issue(item, state))
        return result

    async def _issue(self, item: Mapping[str, Any], state: str) -> Issue:
        return to_issue(item, self.config, state, await self._blockers(item))

    async def _blockers(self, item: Mapping[str, Any]) -> list[BlockerRef]:
        if not self.config.blockers or item.get("state") == CLOSED:
            return []  # a closed issue is never dispatched: its blockers do not matter
        url = f"{self._issues}/{item['iid']}/links"
        # Blocking links are a paid feature; an instance or project without the links API
        # (404, or 403 when the token may not read them) simply has no blockers.
        response = await self.http.request("GET", url, conditional=True, ok=(200, 403, 404))
        if response.status != 200:
            return []
        if not isinstance(response.body, list):
            raise TrackerError(TRACKER_RESPONSE, f"GitLab {url} did not answer with a list")
        project_id = as_int(item.get("project_id"))
        refs = (blocker(link, self.config, project_id) for link in response.body)
        return [ref for ref in refs if ref is not None]

    async def _list(self, params: Mapping[str, Any], page_limit: int) -> list[Any]:
        params = {**params, "per_page": PER_PAGE}
        return await get_pages(self.http, self._issues, params, page_limit, self._next)

    @staticmethod
    def _next(
        headers: httpx.Headers, url: str, params: Mapping[str, Any] | None
    ) -> tuple[str, Mapping[str, Any] | None] | None:
        """The next page: `x-next-page` when GitLab sent it (empty on the last page), else
        the `Link` header's `rel="next"` (keyset pagination sends only that)."""
        if "x-next-page" in headers:
            page = headers["x-next-page"].strip()
            if not page:
                return None
            if not page.isdigit():
                raise TrackerError(TRACKER_PAGINATION, f"GitLab sent x-next-page {page[:20]!r}")
            return url, {**(params or {}), "page": page}
        return follow_link(headers, url, params)

    # Tools

    def agent_tools(self) -> list[ToolSpec]:
        config = self.config
        scope = config.label_states
        example = scope.labels.label_for("Human Review")
        states = (
            f"Closing the issue is the state {scope.closed_state!r}; other states are labels "
            f"(configured, or the state name lower-cased after {scope.labels.prefix!r}, "
            f"e.g. 'Human Review' -> {example!r})."
        )
        return tools.tool_specs(config.project, states)

    def secret_env_names(self) -> list[str]:
        secrets = (self.config.token, self.config.webhook_secret)
        return [s.env_name for s in secrets if s is not None and s.env_name]

    def webhook(self) -> GitLabWebhook | None:
        """Deliveries are accepted only with `provider.webhook_secret` set."""
        secret = self.config.webhook_secret
        return GitLabWebhook(self.config, secret.value) if secret is not None else None

    async def aclose(self) -> None:
        await self.http.aclose()

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments, self.config.base_url)
        if isinstance(call, ToolResult):
            return call
        return await guarded("gitlab", name, issue, self._execute(call, issue))

    async def _execute(self, call: tools.ToolCall, issue: Issue) -> ToolResult:
        try:
            if isinstance(call, MoveIssue):
                answer = await self._move(issue, call.state)
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
            if isinstance(call, AddComment):
                body, extra = call.body, {}
            else:
                body = f"Linked merge request: {call.url}"
                extra = {"merge_request": call.url}
            note = await self._post_note(issue, body)
        except _Refused as refused:
            return ToolResult.failure(refused.code, refused.message)
        note_id = as_int(note.get("id"))
        return ToolResult(
            True,
            {
                "identifier": issue.identifier,
                "commented": True,
                "note_id": note_id,
                "note_url": f"{issue.url}#note_{note_id}" if issue.url and note_id else None,
                **extra,
            },
        )

    # The daemon's writes (the `Tracker` write contract). Arguments are checked as the tools
    # check them; a refusal made before any request is `tracker_rejected`.

    async def move_issue(self, issue: Issue, state: str) -> None:
        with _rejected():
            await self._move(issue, self._checked_state(state))

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        with _rejected():
            note = await self._post_note(issue, self._checked_body(body))
        return _comment(note, issue)

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        with _rejected():
            iid = self._target(issue)
            text = self._checked_body(body)
        if not (comment_id.isascii() and comment_id.isdigit()) or int(comment_id) < 1:
            raise TrackerError(TRACKER_REJECTED, f"{comment_id!r} is not a GitLab note id")
        # GitLab answers 403 for a note someone else wrote and 404 for one that is gone (or
        # belongs to another issue): neither will change on a retry.
        response = await self.http.request(
            "PUT",
            f"{self._issues}/{iid}/notes/{int(comment_id)}",
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
        return _comment(response.body, issue)

    async def list_comments(self, issue: Issue) -> list[Comment]:
        with _rejected():
            iid = self._target(issue)
        params = {"sort": "asc", "order_by": "created_at", "per_page": PER_PAGE}
        notes = await get_pages(
            self.http, f"{self._issues}/{iid}/notes", params, MAX_PAGES, self._next
        )
        comments: dict[str, Comment] = {}
        for note in notes:
            if isinstance(note, Mapping) and note.get("system") is True:
                continue  # GitLab's own activity lines ("changed the label"), not comments
            comment = _comment(note, issue)
            comments.setdefault(comment.id, comment)  # a note added mid-listing shifts pages
        return list(comments.values())

    async def create_issue(self, ticket: NewTicket) -> Issue:
        config = self.config
        with _rejected():
            if ticket.parent is not None:
                self._target(ticket.parent)  # one project: the parent must be one of its issues
            title = ticket.title.strip()
            if not title or len(title) > MAX_TITLE_CHARS or not is_inline(title):
                raise _Refused(
                    INVALID_ARGUMENTS,
                    f"a new issue needs a one-line title of at most {MAX_TITLE_CHARS} characters",
                )
            state = self._checked_state(ticket.state)
            label = self._state_label(state)
        blockers: dict[tuple[str, int], str] = {}
        for given in dict.fromkeys(ticket.blocked_by):
            blockers.setdefault(await self._resolve_blocker(given), given)

        body: dict[str, Any] = {"title": title}
        if ticket.description.strip():
            body["description"] = ticket.description
        if label is not None:
            body["labels"] = label
        response = await self.http.request("POST", self._issues, json_body=body, ok=(201, 400, 422))
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
            if self._closes(state):
                # Issues are created opened: closing is the move GitLab offers.
                created = await self._put_issue(iid, self._move_body(state, ()))
            for (project_id, blocker_iid), blocker_name in blockers.items():
                await self._link_blocker(iid, new, project_id, blocker_iid, blocker_name)
            actual = state_of(created, config)
            if actual is None:
                raise TrackerError(TRACKER_RESPONSE, "GitLab's answer carries no state label")
            return await self._issue(created, actual)
        except TrackerError as exc:
            # The issue exists: say so, lest a retry create it twice unknowingly.
            raise TrackerError(
                exc.category,
                f"created {new}, then: {exc.message}",
                retry_after_s=exc.retry_after_s,
            ) from None

    async def tracker_states(self) -> list[str] | None:
        return None  # states are labels, and GitLab takes any label name

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        wanted: dict[str, str] = {}
        with _rejected():
            for state in states:
                label = self._state_label(self._checked_state(state))
                if label is not None:  # the closed state is a closed issue, not a label
                    wanted.setdefault(label, state)
        if not wanted:
            return []
        url = f"/projects/{self.config.project_ref}/labels"
        listed = await get_pages(self.http, url, {"per_page": PER_PAGE}, MAX_PAGES, self._next)
        # The project's labels include its groups' (GitLab's default), which a move also uses.
        existing = {x.get("name") for x in listed if isinstance(x, Mapping)}
        created: list[str] = []
        for label, state in wanted.items():
            if label in existing:
                continue
            terminal = normalize_state(state) in self.config.terminal_states
            response = await self.http.request(
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

    # Writes shared by the tools and the daemon

    async def _move(self, issue: Issue, state: str) -> Mapping[str, Any]:
        """Put the session's issue in `state` with one PUT; returns GitLab's answer."""
        iid = self._target(issue)
        answer = await self._put_issue(iid, self._move_body(state, issue.labels))
        log.info("issue moved", issue_identifier=issue.identifier, state=state)
        return answer

    def _move_body(self, state: str, current: Sequence[str]) -> dict[str, Any]:
        labels = self.config.label_states.labels
        target = self._state_label(state)
        # Every other state label is removed explicitly: scoped labels replace each other only
        # on paid tiers, and a Free instance would otherwise keep both. The issue's own
        # prefixed labels are added so a hand-off label from an earlier move goes too.
        others = [*labels.by_state.values(), *(x for x in current if labels.is_state_label(x))]
        remove = [name for name in dict.fromkeys(others) if name.lower() != (target or "").lower()]
        # `reopen` on an opened issue is a no-op in GitLab, so it is sent on every non-closing
        # move: the session's snapshot may not know the issue was closed.
        body: dict[str, Any] = {
            "remove_labels": ",".join(remove),
            "state_event": "close" if self._closes(state) else "reopen",
        }
        if target is not None:
            body["add_labels"] = target
        return body

    async def _put_issue(self, iid: int, body: Mapping[str, Any]) -> Mapping[str, Any]:
        response = await self.http.request("PUT", f"{self._issues}/{iid}", json_body=body)
        answer = response.body
        try:
            required(answer)
        except Malformed as exc:
            raise TrackerError(TRACKER_RESPONSE, f"GitLab issue {iid}: {exc}") from None
        assert isinstance(answer, Mapping)
        return answer

    async def _post_note(self, issue: Issue, body: str) -> Mapping[str, Any]:
        iid = self._target(issue)
        response = await self.http.request(
            "POST", f"{self._issues}/{iid}/notes", json_body={"body": body}
        )
        log.info("issue commented", issue_identifier=issue.identifier)
        return response.body if isinstance(response.body, Mapping) else {}

    async def _resolve_blocker(self, name: str) -> tuple[str, int]:
        """The project id and iid of the issue `name` refers to, read from GitLab; an
        identifier that names no visible issue is `tracker_rejected`."""
        ref = reference(name, self.config.project)
        if ref is None:
            raise TrackerError(
                TRACKER_REJECTED,
                f"blocker {name!r} is not a GitLab issue reference like {self.config.project}#12",
            )
        project, iid = ref
        response = await self.http.request(
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
        self, iid: int, name: str, project_id: str, blocker_iid: int, blocker_name: str
    ) -> None:
        response = await self.http.request(
            "POST",
            f"{self._issues}/{iid}/links",
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

    def _checked_state(self, state: str) -> str:
        call = tools.parse_call(tools.MOVE_ISSUE, {"state": state}, self.config.base_url)
        if not isinstance(call, MoveIssue):
            raise _refusal(call)
        return call.state

    def _checked_body(self, body: str) -> str:
        call = tools.parse_call(tools.ADD_COMMENT, {"body": body}, self.config.base_url)
        if not isinstance(call, AddComment):
            raise _refusal(call)
        return call.body

    def _closes(self, state: str) -> bool:
        return normalize_state(state) == normalize_state(self.config.label_states.closed_state)

    def _state_label(self, state: str) -> str | None:
        """The label an opened issue in `state` carries; None for the closed state without a
        label of its own (closing the issue is that state)."""
        labels = self.config.label_states.labels
        if self._closes(state) and normalize_state(state) not in labels.by_state:
            return None
        label = labels.label_for(state)
        if len(label) > MAX_LABEL_CHARS:
            raise _Refused(INVALID_ARGUMENTS, f"label {label!r} for that state is too long")
        return label

    def _target(self, issue: Issue) -> int:
        """The session's own issue iid, checked against the configured project."""
        ref = issue.native_ref or {}
        project, iid = ref.get("project"), ref.get("iid")
        if not isinstance(iid, int) or isinstance(iid, bool) or iid < 1:
            raise _Refused(tools.NOT_IN_SCOPE, f"{issue.identifier} has no iid")
        if str(project) != self.config.project or issue.id != str(iid):
            raise _Refused(
                tools.NOT_IN_SCOPE,
                f"{issue.identifier} is not an issue of project {self.config.project}",
            )
        return iid


class _Refused(Exception):
    """A write refused before any request: a tool reports `code`, the daemon's writes raise
    `tracker_rejected`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _refusal(result: tools.ToolCall | ToolResult) -> _Refused:
    output = result.output if isinstance(result, ToolResult) else None
    if isinstance(output, Mapping):
        return _Refused(str(output.get("error")), str(output.get("message")))
    return _Refused(INVALID_ARGUMENTS, "unexpected arguments")  # pragma: no cover


@contextmanager
def _rejected() -> Iterator[None]:
    try:
        yield
    except _Refused as refused:
        raise TrackerError(TRACKER_REJECTED, refused.message) from None


def _comment(note: Any, issue: Issue) -> Comment:
    try:
        return to_comment(note)
    except Malformed as exc:
        raise TrackerError(TRACKER_RESPONSE, f"GitLab note on {issue.identifier}: {exc}") from None


def _said(response: Response) -> str:
    """GitLab's reason for a refusal, from `message` (text, or a map of field errors) or
    `error`, as a `: …` suffix."""
    body = response.body if isinstance(response.body, Mapping) else {}
    reason = body.get("message") or body.get("error")
    if reason is None:
        return ""
    text = reason if isinstance(reason, str) else json.dumps(reason, ensure_ascii=False)
    return f": {text.strip()[:200]}"


def _record_key(item: Any) -> str:
    if isinstance(item, Mapping):
        for key in ("web_url", "id"):
            if isinstance(item.get(key), str | int):
                return str(item[key])
    return repr(item)[:80]

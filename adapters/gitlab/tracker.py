"""`GitLabTracker`: the `Tracker` for the issues of one GitLab project, whose workflow state is
a label, over the shared HTTP client.

Reads list `GET /projects/{id}/issues` one state label at a time, always with `state=opened`
(GitLab's default is `all`, which would return closed issues still carrying an active label).
Pages follow `x-next-page` (an empty value ends the listing), or `Link: rel="next"` when that
header is absent; `x-total` is never used (GitLab omits it above 10,000 results). A refresh
asks for up to 100 iids in one request (`iids[]=`). Blockers come from the issue links
endpoint: `blocking_issues_count` counts the issues an issue *blocks*, not its blockers, so it
cannot spare that request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
import structlog

from symphony.issue import BlockerRef, Issue, normalize_state
from symphony.tools import ToolResult, ToolSpec
from symphony.tracker import (
    TRACKER_PAGINATION,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerError,
)

from .._support.http import HttpClient, RateLimitHeaders, follow_link, get_pages
from .._support.normalize import as_int
from .._support.skipped import SkippedRecords
from .._support.tool_calls import guarded
from . import tools
from .config import MAX_LABEL_CHARS, GitLabConfig
from .normalize import (
    CLOSED,
    Malformed,
    blocker,
    label_names,
    required,
    state_of,
    to_issue,
)

log = structlog.get_logger(__name__)

PER_PAGE = 100  # GitLab's maximum; larger values are clamped
IIDS_PER_REQUEST = 100
MAX_PAGES = 100
"""Guards against a listing that never ends (10,000 issues per state label)."""

# GitLab reports its quota as `RateLimit-*` (reset in epoch seconds) and adds `Retry-After`
# to a 429; the shared client prefers Retry-After, then the reset.
RATE_LIMIT_HEADERS = RateLimitHeaders(remaining="ratelimit-remaining", reset="ratelimit-reset")


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
        wanted = {normalize_state(s): s for s in states}
        closed = normalize_state(self.config.closed_state)
        found: dict[str, Issue] = {}
        skipped: dict[str, str] = {}
        for key, state in wanted.items():
            items: list[Any] = []
            if key == closed:
                # Closed issues are many and only matter for startup cleanup: newest first,
                # up to `closed_page_limit` pages.
                params = {"state": CLOSED, "order_by": "updated_at", "sort": "desc"}
                items += await self._list(params, self.config.closed_page_limit)
            if key != closed or key in self.config.state_labels.by_state:
                label = self.config.state_labels.label_for(state)
                items += await self._list({"state": "opened", "labels": label}, MAX_PAGES)
            for item in items:
                try:
                    iid, _, _ = required(item)
                except Malformed as exc:
                    skipped[_record_key(item)] = str(exc)
                    continue
                actual = state_of(item, self.config)
                if actual is None or normalize_state(actual) not in wanted:
                    continue  # e.g. also carries a state label that takes precedence
                if str(iid) not in found:
                    found[str(iid)] = await self._issue(item, actual)
        self._skipped.update(skipped)
        return list(found.values())

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
        example = config.state_labels.label_for("Human Review")
        states = (
            f"Closing the issue is the state {config.closed_state!r}; other states are labels "
            f"(configured, or the state name lower-cased after {config.state_labels.prefix!r}, "
            f"e.g. 'Human Review' -> {example!r})."
        )
        return tools.tool_specs(config.project, states)

    def secret_env_names(self) -> list[str]:
        name = self.config.token.env_name
        return [name] if name else []

    async def aclose(self) -> None:
        await self.http.aclose()

    # The daemon's writes: not yet offered by this adapter.

    async def move_issue(self, issue: Issue, state: str) -> None:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def list_comments(self, issue: Issue) -> list[Comment]:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def create_issue(self, ticket: NewTicket) -> Issue:
        raise TrackerError(TRACKER_REJECTED, "this tracker does not offer daemon writes yet")

    async def tracker_states(self) -> list[str] | None:
        return None

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments, self.config.base_url)
        if isinstance(call, ToolResult):
            return call
        return await guarded("gitlab", name, issue, self._execute(call, issue))

    async def _execute(self, call: tools.ToolCall, issue: Issue) -> ToolResult:
        iid = self._target(issue)
        if isinstance(iid, ToolResult):
            return iid
        if isinstance(call, tools.MoveIssue):
            return await self._move(issue, iid, call.state)
        if isinstance(call, tools.AddComment):
            body, extra = call.body, {}
        else:
            body = f"Linked merge request: {call.url}"
            extra = {"merge_request": call.url}
        response = await self.http.request(
            "POST", f"{self._issues}/{iid}/notes", json_body={"body": body}
        )
        answer = response.body if isinstance(response.body, dict) else {}
        note_id = as_int(answer.get("id"))
        log.info("issue commented", issue_identifier=issue.identifier)
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

    async def _move(self, issue: Issue, iid: int, state: str) -> ToolResult:
        config = self.config
        labels = config.state_labels
        closing = normalize_state(state) == normalize_state(config.closed_state)
        explicit = normalize_state(state) in labels.by_state
        target = labels.label_for(state) if explicit or not closing else None
        if target is not None and len(target) > MAX_LABEL_CHARS:
            return ToolResult.failure(
                tools.INVALID_ARGUMENTS, f"label {target!r} for that state is too long"
            )
        # Every other state label is removed explicitly: scoped labels replace each other only
        # on paid tiers, and a Free instance would otherwise keep both. The snapshot's own
        # prefixed labels are added so a hand-off label from an earlier move goes too.
        others = [*labels.by_state.values(), *(x for x in issue.labels if labels.is_state_label(x))]
        remove = [name for name in dict.fromkeys(others) if name.lower() != (target or "").lower()]
        # One PUT does it all. `reopen` on an opened issue is a no-op in GitLab, so it is sent
        # on every non-closing move: the session's snapshot may not know the issue was closed.
        body: dict[str, Any] = {
            "remove_labels": ",".join(remove),
            "state_event": "close" if closing else "reopen",
        }
        if target is not None:
            body["add_labels"] = target
        response = await self.http.request("PUT", f"{self._issues}/{iid}", json_body=body)
        answer = response.body
        try:
            required(answer)
        except Malformed as exc:
            raise TrackerError(TRACKER_RESPONSE, f"GitLab issue {iid}: {exc}") from None
        log.info("issue moved", issue_identifier=issue.identifier, state=state)
        return ToolResult(
            True,
            {
                "identifier": issue.identifier,
                "state": state,
                "previous_state": issue.state,
                "changed": normalize_state(issue.state) != normalize_state(state),
                "labels": label_names(answer.get("labels")),
                "issue_state": answer.get("state"),
            },
        )

    def _target(self, issue: Issue) -> int | ToolResult:
        """The session's own issue iid, checked against the configured project."""
        ref = issue.native_ref or {}
        project, iid = ref.get("project"), ref.get("iid")
        if not isinstance(iid, int) or isinstance(iid, bool) or iid < 1:
            return ToolResult.failure(tools.NOT_IN_SCOPE, f"{issue.identifier} has no iid")
        if str(project) != self.config.project or issue.id != str(iid):
            return ToolResult.failure(
                tools.NOT_IN_SCOPE,
                f"{issue.identifier} is not an issue of project {self.config.project}",
            )
        return iid


def _record_key(item: Any) -> str:
    if isinstance(item, Mapping):
        for key in ("web_url", "id"):
            if isinstance(item.get(key), str | int):
                return str(item[key])
    return repr(item)[:80]

"""Label scope: the issues of one repository, whose workflow state is a label.

Reads are REST and conditional: the shared client sends `If-None-Match` with the ETag of the
previous answer to the same URL, and GitHub answers an unchanged page with 304, which does not
count against the rate limit. That makes one request per active state per poll free while the
board is still, so the state list is read one label at a time (`labels=<state label>`) rather
than as all open issues: a change to an unrelated open issue then invalidates no cached page,
and a large repository does not cost one page per 100 open issues on every change.

Refresh by id uses one conditional `GET /issues/{number}` per id, in sequence: a 304 costs
nothing, whereas one batched GraphQL `nodes(ids:)` would cost a point on every tick (GraphQL has
no conditional requests), and GitHub asks clients to send requests serially.

Writes keep to the same label scheme: a move adds the target state label and removes the other
state labels one at a time (closing or reopening the issue for the closed state); a new issue is
opened with its state label and, for the closed state, closed at once; `ensure_states` creates
the state labels the repository lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import structlog

from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.base.tools import INVALID_ARGUMENTS
from symphony.tracker.contract import TRACKER_RESPONSE, NewTicket, TrackerError

from .._support.http import HttpClient, get_pages
from .._support.label_scope import issues_in_states
from .._support.normalize import as_int
from .._support.skipped import SkippedRecords
from .config import MAX_LABEL_CHARS, GitHubConfig
from .normalize import (
    Malformed,
    identifier,
    label_names,
    repository_of,
    required,
    rest_blocker,
    rest_issue,
    rest_state,
)
from .tools import NOT_IN_SCOPE
from .writes import (
    Rejected,
    after_creation,
    checked_state,
    checked_title,
    open_issue,
    record_blockers,
    resolve_blockers,
)

log = structlog.get_logger(__name__)

PER_PAGE = 100
MAX_PAGES = 100
"""Guards against a `next` link that never ends (10,000 issues per state label)."""
STATE_LABEL_COLOR = "ededed"  # GitHub's own default grey


class RepositoryScope:
    def __init__(self, http: HttpClient, config: GitHubConfig) -> None:
        assert config.repository is not None
        self.http = http
        self.config = config
        self.repository = config.repository
        self._path = f"/repos/{config.repository}/issues"
        self._skipped = SkippedRecords(log, "issue", "record", repository=self.repository)

    # Reads

    async def by_states(self, states: Sequence[str]) -> list[Issue]:
        skipped: dict[str, str] = {}
        found = await issues_in_states(states, self.config.label_states, self, skipped)
        self._skipped.update(skipped)
        return found

    async def closed_issues(self) -> list[Any]:
        params = {"state": "closed", "sort": "updated", "direction": "desc"}
        return self._issues_only(await self._list(params, self.config.closed_page_limit))

    async def labelled_issues(self, label: str) -> list[Any]:
        return self._issues_only(await self._list({"state": "open", "labels": label}, MAX_PAGES))

    def record_state(self, item: Any) -> tuple[str, str | None]:
        return str(required(item)[0]), rest_state(item, self.config)

    def record_key(self, item: Any) -> str:
        return _record_key(item)

    async def issue_in(self, item: Any, state: str) -> Issue:
        return await self._issue(item, state)

    @staticmethod
    def _issues_only(items: list[Any]) -> list[Any]:
        # The issues endpoint also lists pull requests.
        return [i for i in items if not (isinstance(i, Mapping) and "pull_request" in i)]

    async def by_ids(self, ids: Sequence[str]) -> list[Issue]:
        result: list[Issue] = []
        for issue_id in dict.fromkeys(ids):
            # Ids are issue numbers; anything else was never an id of this scope.
            if not issue_id.isdigit():
                continue
            response = await self.http.request(
                "GET", f"{self._path}/{issue_id}", conditional=True, ok=(200, 404, 410)
            )
            if response.status != 200:
                continue  # deleted (410), or gone from the token's view (404)
            item = response.body
            try:
                required(item)
            except Malformed as exc:
                raise TrackerError(
                    TRACKER_RESPONSE, f"GitHub issue {issue_id} in {self.repository}: {exc}"
                ) from None
            if "pull_request" in item:
                continue
            if (repository_of(item) or "").lower() != self.repository.lower():
                continue  # transferred: GitHub redirected us to another repository
            state = rest_state(item, self.config)
            if state is None:
                continue  # open without a state label: outside the scope
            result.append(await self._issue(item, state))
        return result

    async def _issue(self, item: Mapping[str, Any], state: str) -> Issue:
        return rest_issue(item, self.config, state, await self._blockers(item))

    async def _blockers(self, item: Mapping[str, Any]) -> list[BlockerRef]:
        summary = item.get("issue_dependencies_summary")
        total = as_int(summary.get("total_blocked_by")) if isinstance(summary, Mapping) else None
        if not total:
            return []  # no request unless GitHub says there is something to list
        url = f"{self._path}/{item['number']}/dependencies/blocked_by"
        entries = await get_pages(self.http, url, {"per_page": PER_PAGE}, MAX_PAGES)
        refs = (rest_blocker(entry, self.config) for entry in entries)
        return [ref for ref in refs if ref is not None]

    async def _list(self, params: Mapping[str, Any], page_limit: int) -> list[Any]:
        # A next link carries every parameter (and may name /repositories/<id>/...).
        params = {**params, "per_page": PER_PAGE}
        return await get_pages(self.http, self._path, params, page_limit)

    # Writes

    def state_target(self, state: str) -> tuple[str | None, bool]:
        """The label an issue in `state` carries (None for the closed state, unless one is
        configured for it) and whether the issue is closed; `Rejected` for a label GitHub
        would refuse."""
        config = self.config
        closing = normalize_state(state) == normalize_state(config.label_states.closed_state)
        explicit = normalize_state(state) in config.label_states.labels.by_state
        target = config.label_states.labels.label_for(state) if explicit or not closing else None
        if target is not None and len(target) > MAX_LABEL_CHARS:
            raise Rejected(
                f"label {target!r} for that state exceeds {MAX_LABEL_CHARS} characters",
                INVALID_ARGUMENTS,
            )
        return target, closing

    async def move(self, issue: Issue, number: int, state: str) -> dict[str, Any]:
        """Put the issue in `state`; the move tool's result. Idempotent."""
        target, closing = self.state_target(state)
        path = f"{self._path}/{number}"
        current = await self.http.request("GET", path, conditional=True)
        try:
            required(current.body)
        except Malformed as exc:
            raise TrackerError(TRACKER_RESPONSE, f"GitHub issue {number}: {exc}") from None
        body: dict[str, Any] = current.body
        previous = rest_state(body, self.config)
        labels, flag, changed = await self._settle(path, body, target, closing)
        log.info("issue moved", issue_identifier=issue.identifier, state=state, changed=changed)
        return {
            "identifier": issue.identifier,
            "state": state,
            "previous_state": previous,
            "changed": changed,
            "labels": labels,
            "issue_state": flag,
        }

    async def _settle(
        self, path: str, body: Mapping[str, Any], target: str | None, closing: bool
    ) -> tuple[list[str], str, bool]:
        """Make the issue `body` (as last read) carry `target` alone among the state labels and
        be open or closed as `closing` says: (labels, open/closed, whether anything changed)."""
        config = self.config
        labels = label_names(body.get("labels"))
        changed = False
        if target is not None and target.lower() not in {n.lower() for n in labels}:
            await self.http.request("POST", f"{path}/labels", json_body={"labels": [target]})
            labels.append(target)
            changed = True
        # Remove the other state labels one by one rather than replacing the whole set, so a
        # label a person adds meanwhile is not lost.
        for name in list(labels):
            if (
                config.label_states.labels.is_state_label(name)
                and name.lower() != (target or "").lower()
            ):
                await self.http.request(
                    "DELETE", f"{path}/labels/{quote(name, safe='')}", ok=(200, 404)
                )
                labels.remove(name)
                changed = True
        flag = str(body["state"])
        if closing != (flag == "closed"):
            patch = (
                {"state": "closed", "state_reason": "completed"} if closing else {"state": "open"}
            )
            await self.http.request("PATCH", path, json_body=patch)
            flag = "closed" if closing else "open"
            changed = True
        return labels, flag, changed

    async def create(self, ticket: NewTicket) -> Issue:
        """Open an issue in `ticket.state` (its state label, or closed), blocked by
        `ticket.blocked_by`; returns it as a refresh reads it."""
        title = checked_title(ticket.title)
        state = checked_state(ticket.state)
        parent = ticket.parent
        if parent is not None:
            repository = (parent.native_ref or {}).get("repository")
            if not isinstance(repository, str) or repository.lower() != self.repository.lower():
                raise Rejected(
                    f"{parent.identifier} is not an issue of {self.repository}", NOT_IN_SCOPE
                )
        target, closing = self.state_target(state)
        blockers = await resolve_blockers(self.http, ticket.blocked_by, self.repository)
        created = await open_issue(
            self.http, self.repository, title, ticket.description, [target] if target else []
        )
        number = int(created["number"])
        name = identifier(self.repository, number)
        with after_creation(name):
            # GitHub silently drops labels given by a token without push access; the move's
            # own steps add the label then, and close the issue for the closed state.
            await self._settle(f"{self._path}/{number}", created, target, closing)
            await record_blockers(self.http, self.repository, number, blockers)
            found = await self.by_ids([str(number)])
        if not found:
            raise TrackerError(TRACKER_RESPONSE, f"GitHub created {name} but cannot read it back")
        log.info(
            "issue created",
            issue_identifier=name,
            state=found[0].state,
            blocked_by=[b.identifier for b in blockers] or None,
        )
        return found[0]

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        """Create the repository labels `states` need and it lacks; the states they serve."""
        wanted: dict[str, tuple[str, str]] = {}
        for state in states:
            target, _ = self.state_target(checked_state(state))
            if target is not None:
                wanted.setdefault(target.lower(), (target, state.strip()))
        if not wanted:
            return []
        labels_path = f"/repos/{self.repository}/labels"
        existing = await get_pages(self.http, labels_path, {"per_page": PER_PAGE}, MAX_PAGES)
        have = {name.lower() for name in label_names(existing)}
        created: list[str] = []
        for key, (label, state) in wanted.items():
            if key in have:
                continue
            response = await self.http.request(
                "POST",
                labels_path,
                json_body={
                    "name": label,
                    "color": STATE_LABEL_COLOR,
                    "description": f"Workflow state: {state}"[:100],
                },
                ok=(201, 422),
            )
            if response.status == 422:
                if _already_exists(response.body):
                    continue  # someone created it since we listed the labels
                raise Rejected(f"GitHub refused the label {label!r}: {_message(response.body)}")
            created.append(state)
        if created:
            log.info("state labels created", repository=self.repository, states=created)
        return created


def _already_exists(body: Any) -> bool:
    errors = body.get("errors") if isinstance(body, Mapping) else None
    return isinstance(errors, list) and any(
        isinstance(e, Mapping) and e.get("code") == "already_exists" for e in errors
    )


def _message(body: Any) -> str:
    message = body.get("message") if isinstance(body, Mapping) else None
    return str(message)[:200] if message else "validation failed"


def _record_key(item: Any) -> str:
    if isinstance(item, Mapping):
        for key in ("html_url", "node_id", "url"):
            if isinstance(item.get(key), str):
                return str(item[key])
    return repr(item)[:80]

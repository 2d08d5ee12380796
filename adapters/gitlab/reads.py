"""The reads of one GitLab project's issues, whose workflow state is a label: issues list
`GET /projects/{id}/issues` one state label at a time, always with `state=opened` (GitLab's
default is `all`, which would return closed issues still carrying an active label). Pages follow
`x-next-page` (an empty value ends the listing), or `Link: rel="next"` when that header is
absent; `x-total` is never used (GitLab omits it above 10,000 results). A refresh asks for up to
100 iids in one request (`iids[]=`). Blockers come from the issue links endpoint:
`blocking_issues_count` counts the issues an issue *blocks*, not its blockers, so it cannot
spare that request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import structlog

from symphony.base.issue import BlockerRef, Issue
from symphony.tracker.contract import TRACKER_PAGINATION, TRACKER_RESPONSE, TrackerError

from .._support.http import HttpClient, follow_link, get_pages
from .._support.label_scope import issues_in_states
from .._support.normalize import as_int
from .._support.skipped import SkippedRecords
from .config import GitLabConfig
from .normalize import CLOSED, Malformed, blocker, required, state_of, to_issue

log = structlog.get_logger(__name__)

PER_PAGE = 100  # GitLab's maximum; larger values are clamped
IIDS_PER_REQUEST = 100
MAX_PAGES = 100
"""Guards against a listing that never ends (10,000 issues per state label)."""


def issues_path(config: GitLabConfig) -> str:
    return f"/projects/{config.project_ref}/issues"


async def list_all(
    http: HttpClient, path: str, params: Mapping[str, Any], page_limit: int = MAX_PAGES
) -> list[Any]:
    """Every record of a GitLab listing, `PER_PAGE` a page, at most `page_limit` pages."""
    params = {**params, "per_page": PER_PAGE}
    return await get_pages(http, path, params, page_limit, next_page)


def next_page(
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


class ProjectIssues:
    """The project's issues as the core sees them; also the `LabelledIssues` source that
    `issues_in_states` lists them from."""

    def __init__(self, http: HttpClient, config: GitLabConfig) -> None:
        self.http = http
        self.config = config
        self._issues = issues_path(config)
        self._skipped = SkippedRecords(log, "issue", "record", project=config.project)

    async def by_states(self, states: Sequence[str]) -> list[Issue]:
        skipped: dict[str, str] = {}
        found = await issues_in_states(states, self.config.label_states, self, skipped)
        self._skipped.update(skipped)
        return found

    async def closed_issues(self) -> list[Any]:
        params = {"state": CLOSED, "order_by": "updated_at", "sort": "desc"}
        return await list_all(self.http, self._issues, params, self.config.closed_page_limit)

    async def labelled_issues(self, label: str) -> list[Any]:
        return await list_all(self.http, self._issues, {"state": "opened", "labels": label})

    def record_state(self, item: Any) -> tuple[str, str | None]:
        return str(required(item)[0]), state_of(item, self.config)

    def record_key(self, item: Any) -> str:
        return _record_key(item)

    async def issue_in(self, item: Any, state: str) -> Issue:
        """`item` as an Issue in `state`, with its blockers read from GitLab."""
        return to_issue(item, self.config, state, await self._blockers(item))

    async def by_ids(self, ids: Sequence[str]) -> list[Issue]:
        # Ids are iids; anything else was never an id of this tracker.
        iids = [i for i in dict.fromkeys(ids) if i.isdigit() and int(i) > 0]
        result: list[Issue] = []
        for start in range(0, len(iids), IIDS_PER_REQUEST):
            chunk = iids[start : start + IIDS_PER_REQUEST]
            params = {"iids[]": chunk, "state": "all"}
            for item in await list_all(self.http, self._issues, params):
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
                result.append(await self.issue_in(item, state))
        return result

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


def _record_key(item: Any) -> str:
    if isinstance(item, Mapping):
        for key in ("web_url", "id"):
            if isinstance(item.get(key), str | int):
                return str(item[key])
    return repr(item)[:80]

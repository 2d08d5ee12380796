"""A small GitLab REST v4 server for end-to-end and contract tests (stdlib only).

It holds one project's issues in memory and speaks the endpoints the adapter uses: list
(`state`, `labels`, `iids[]`, `per_page`/`page` with `x-next-page` and `Link` headers), get,
update (`add_labels`, `remove_labels`, `labels`, `state_event`), issue links and notes. It
checks `PRIVATE-TOKEN`, sends `RateLimit-*` headers, and can answer the next request with a 429
whose `RateLimit-Reset` lies in the future. Every request is recorded with its arrival time.
"""

from __future__ import annotations

import math
import re
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.adapters import fake_http
from tests.adapters.gitlab import payloads

LIMIT = 2000


@dataclass
class FakeIssue:
    iid: int
    title: str
    labels: list[str] = field(default_factory=list)
    state: str = "opened"
    blocked_by: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    version: int = 0


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    at: float
    body: Any = None
    answer: Any = None


class FakeGitLab:
    def __init__(
        self,
        project: str = payloads.PROJECT,
        token: str = "glpat-fake_token_value",
        project_id: int = payloads.PROJECT_ID,
    ) -> None:
        self.project = project
        self.project_id = project_id
        self.token = token
        self.issues: dict[int, FakeIssue] = {}
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.base = ""
        self.links_available = True
        self._limited: float | None = None
        self.limited_at: float | None = None
        self.limited_until: float | None = None

    # Board edits (as a person in the GitLab UI would make them)

    def add(self, iid: int, title: str | None = None, **fields: Any) -> FakeIssue:
        with self.lock:
            item = FakeIssue(iid, title or f"Issue {iid}", **fields)
            self.issues[iid] = item
            return item

    def edit(self, iid: int, **fields: Any) -> None:
        with self.lock:
            item = self.issues[iid]
            for key, value in fields.items():
                setattr(item, key, value)
            item.version += 1

    def labels_of(self, iid: int) -> list[str]:
        with self.lock:
            return list(self.issues[iid].labels)

    def rate_limit_next(self, seconds: float) -> None:
        """Answer the next request 429 with a `RateLimit-Reset` at least `seconds` away."""
        with self.lock:
            self._limited = seconds

    # Rendering

    def body_of(self, item: FakeIssue) -> dict[str, Any]:
        return payloads.issue(
            item.iid,
            item.title,
            labels=item.labels,
            state=item.state,
            project=self.project,
            project_id=self.project_id,
            base=self.base,
            updated_at=f"2026-01-02T03:{item.version // 60 % 60:02d}:{item.version % 60:02d}Z",
        )

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        now = time.time()
        with self.lock:
            if self._limited is not None:
                # GitLab's reset is whole epoch seconds.
                reset = math.ceil(now + self._limited)
                self._limited = None
                self.limited_at, self.limited_until = now, float(reset)
                status, out, answer = (
                    429,
                    {"RateLimit-Remaining": "0", "RateLimit-Reset": str(reset)},
                    {"message": {"error": "This endpoint has been requested too many times."}},
                )
            else:
                status, out, answer = self._route(method, parts.path, query, headers, body)
                out = {**out, "RateLimit-Limit": str(LIMIT)}
                out["RateLimit-Remaining"] = str(LIMIT - len(self.requests) - 1)
                out["RateLimit-Reset"] = str(int(now) + 60)
            self.requests.append(Request(method, parts.path, query, status, now, body, answer))
        return status, out, answer

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, dict[str, str], Any]:
        if headers.get("private-token") != self.token:
            return 401, {}, payloads.error("401 Unauthorized")
        match = re.fullmatch(r"/api/v4/projects/([^/]+)/issues(/.*)?", path)
        if match is None or unquote(match.group(1)) not in (self.project, str(self.project_id)):
            return 404, {}, payloads.error("404 Project Not Found")
        rest = match.group(2) or ""
        if rest == "" and method == "GET":
            return self._list(query)
        found = re.fullmatch(r"/(\d+)(/.*)?", rest)
        if found is None or int(found.group(1)) not in self.issues:
            return 404, {}, payloads.error("404 Not found")
        item = self.issues[int(found.group(1))]
        tail = found.group(2) or ""
        if tail == "" and method == "GET":
            return 200, {}, self.body_of(item)
        if tail == "" and method == "PUT":
            self._update(item, body or {})
            return 200, {}, self.body_of(item)
        if tail == "/links" and method == "GET":
            if not self.links_available:
                return 403, {}, payloads.error("403 Forbidden")
            entries = [
                payloads.link(self.body_of(self.issues[n]))
                for n in item.blocked_by
                if n in self.issues
            ]
            return 200, {}, entries
        if tail == "/notes" and method == "POST":
            item.notes.append(body["body"])
            item.version += 1
            return 201, {}, payloads.note(len(item.notes), body["body"], iid=item.iid)
        return 404, {}, payloads.error("404 Not found")

    def _update(self, item: FakeIssue, body: dict[str, Any]) -> None:
        def names(key: str) -> list[str]:
            return [x.strip() for x in str(body.get(key) or "").split(",") if x.strip()]

        if "labels" in body:
            item.labels = names("labels")
        # GitLab matches label titles exactly when removing them.
        item.labels = [x for x in item.labels if x not in names("remove_labels")]
        for name in names("add_labels"):
            if name not in item.labels:
                item.labels.append(name)
        event = body.get("state_event")
        if event == "close":
            item.state = "closed"
        elif event == "reopen":
            item.state = "opened"
        item.version += 1

    def _list(self, query: dict[str, list[str]]) -> tuple[int, dict[str, str], Any]:
        state = query.get("state", ["all"])[0]
        wanted = [x for x in query.get("labels", [""])[0].split(",") if x]
        iids = {int(x) for x in query.get("iids[]", [])}
        per_page = min(int(query.get("per_page", ["20"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        matching = [
            item
            for item in sorted(self.issues.values(), key=lambda i: i.iid)
            if (state == "all" or item.state == state)
            and all(w in item.labels for w in wanted)
            and (not iids or item.iid in iids)
        ]
        chunk = matching[(page - 1) * per_page : page * per_page]
        more = page * per_page < len(matching)
        headers = {
            "x-page": str(page),
            "x-per-page": str(per_page),
            "x-next-page": str(page + 1) if more else "",
            "x-total": str(len(matching)),
        }
        if more:
            params = "&".join(
                f"{quote(k)}={quote(x)}" for k, v in sorted(query.items()) if k != "page" for x in v
            )
            path = f"/api/v4/projects/{quote(self.project, safe='')}/issues"
            headers["Link"] = f'<{self.base}{path}?{params}&page={page + 1}>; rel="next"'
        return 200, headers, [self.body_of(item) for item in chunk]


def serve(fake: FakeGitLab) -> AbstractContextManager[FakeGitLab]:
    """Run `fake` on 127.0.0.1 with an ephemeral port; `fake.base` is its URL."""
    return fake_http.serve(fake)

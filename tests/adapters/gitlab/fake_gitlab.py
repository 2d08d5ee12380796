"""A small GitLab REST v4 server for end-to-end and contract tests (stdlib only).

It holds one project's issues and labels in memory and speaks the endpoints the adapter uses:
list issues (`state`, `labels`, `iids[]`, `per_page`/`page` with `x-next-page` and `Link`
headers), get, create and update issues (`add_labels`, `remove_labels`, `labels`,
`state_event`), issue links (list; create, `is_blocked_by`), notes (list with `sort`, create,
edit: only the token's user may edit a note), project labels (list, create) and the project's
members (`fake_members.FakeMembers`). Labels an issue
is given are created as GitLab creates them. It checks `PRIVATE-TOKEN`, sends `RateLimit-*`
headers, and can answer the next request with a 429 whose `RateLimit-Reset` lies in the future.
Every request is recorded with its arrival time. Given `merge_requests`
(`fake_merge_requests.FakeMergeRequests`), it also serves that project's merge requests,
pipelines and jobs, and the project itself.
"""

from __future__ import annotations

import math
import re
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from tests.adapters import fake_http
from tests.adapters.gitlab import payloads
from tests.adapters.gitlab.fake_members import FakeMembers
from tests.adapters.gitlab.fake_merge_requests import FakeMergeRequests

LIMIT = 2000
BOT = "symphony-bot"
"""The user the fake's token belongs to: the author of the notes the adapter posts."""


@dataclass
class FakeNote:
    id: int
    body: str
    author: str
    created_at: str
    system: bool = False


@dataclass
class FakeIssue:
    iid: int
    title: str
    labels: list[str] = field(default_factory=list)
    state: str = "opened"
    blocked_by: list[int] = field(default_factory=list)
    notes: list[FakeNote] = field(default_factory=list)
    description: str | None = "Please do the thing."
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
        merge_requests: FakeMergeRequests | None = None,
    ) -> None:
        self.project = project
        self.merge_requests = merge_requests
        self.members = merge_requests.members if merge_requests is not None else FakeMembers()
        self.project_id = project_id
        self.token = token
        self.issues: dict[int, FakeIssue] = {}
        self.labels: dict[str, dict[str, Any]] = {}
        self.requests: list[Request] = []
        self._note_ids = 0
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
            for name in item.labels:
                self._label(name)
            return item

    def add_note(self, iid: int, body: str, author: str = "amy", *, system: bool = False) -> int:
        """A note as a person (or GitLab itself, `system`) writes it; returns its id."""
        with self.lock:
            return self._note(self.issues[iid], body, author, system).id

    def add_label(self, name: str) -> None:
        with self.lock:
            self._label(name)

    def edit(self, iid: int, **fields: Any) -> None:
        with self.lock:
            item = self.issues[iid]
            for key, value in fields.items():
                setattr(item, key, value)
            for name in item.labels:
                self._label(name)
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
            description=item.description,
            updated_at=f"2026-01-02T03:{item.version // 60 % 60:02d}:{item.version % 60:02d}Z",
        )

    def note_of(self, item: FakeIssue, note: FakeNote) -> dict[str, Any]:
        return payloads.note(
            note.id,
            note.body,
            iid=item.iid,
            project_id=self.project_id,
            author=note.author,
            created_at=note.created_at,
            system=note.system,
        )

    def _note(self, item: FakeIssue, body: str, author: str, system: bool = False) -> FakeNote:
        self._note_ids += 1
        n = self._note_ids
        note = FakeNote(
            n, body, author, f"2026-01-03T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z", system
        )
        item.notes.append(note)
        item.version += 1
        return note

    def _label(
        self, name: str, color: str = "#6699cc", description: str | None = None
    ) -> dict[str, Any]:
        if name not in self.labels:
            self.labels[name] = payloads.label(len(self.labels) + 1, name, color, description)
        return self.labels[name]

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
        routed = self.merge_requests
        if routed is not None and routed.serves(path):
            routed.base = self.base
            target = f"{path}?{urlencode(query, doseq=True)}" if query else path
            return routed.handle(method, target, headers, body)
        match = re.fullmatch(r"/api/v4/projects/([^/]+)(/.*)", path)
        if match is None or not self._is_project(unquote(match.group(1))):
            return 404, {}, payloads.error("404 Project Not Found")
        rest = match.group(2)
        members = self.members.handle(method, rest, query)
        if members is not None:
            return members
        if rest == "/labels":
            return self._labels(method, path, query, body or {})
        if rest == "/issues" and method == "GET":
            return self._page([self.body_of(i) for i in self._matching(query)], path, query)
        if rest == "/issues" and method == "POST":
            return self._create(body or {})
        found = re.fullmatch(r"/issues/(\d+)(/.*)?", rest)
        if found is None or int(found.group(1)) not in self.issues:
            return 404, {}, payloads.error("404 Not found")
        item = self.issues[int(found.group(1))]
        tail = found.group(2) or ""
        if tail == "" and method == "GET":
            return 200, {}, self.body_of(item)
        if tail == "" and method == "PUT":
            self._update(item, body or {})
            return 200, {}, self.body_of(item)
        if tail == "/links":
            return self._links(method, item, body or {})
        if tail == "/notes" and method == "GET":
            notes = item.notes
            if query.get("order_by", ["created_at"])[0] == "updated_at":
                notes = sorted(notes, key=lambda n: n.created_at)  # never edited otherwise
            if query.get("sort", ["desc"])[0] == "desc":  # GitLab's default order
                notes = list(reversed(notes))
            return self._page([self.note_of(item, n) for n in notes], path, query)
        if tail == "/notes" and method == "POST":
            if not str((body or {}).get("body") or "").strip():
                return 400, {}, {"error": "body is missing"}
            note = self._note(item, body["body"], BOT)
            return 201, {}, self.note_of(item, note)
        edit = re.fullmatch(r"/notes/(\d+)", tail)
        if edit is not None and method == "PUT":
            edited = next((n for n in item.notes if n.id == int(edit.group(1))), None)
            if edited is None:
                return 404, {}, payloads.error("404 Note Not Found")
            if edited.author != BOT or edited.system:
                return 403, {}, payloads.error("403 Forbidden")
            edited.body = str((body or {}).get("body", edited.body))
            item.version += 1
            return 200, {}, self.note_of(item, edited)
        return 404, {}, payloads.error("404 Not found")

    def _is_project(self, ref: str) -> bool:
        return ref in (self.project, str(self.project_id))

    def _create(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        title = str(body.get("title") or "").strip()
        if not title:
            return 400, {}, {"error": "title is missing"}
        if len(title) > 255:
            return 400, {}, payloads.error({"title": ["is too long (maximum is 255 characters)"]})
        labels = body.get("labels") or []
        names = labels if isinstance(labels, list) else str(labels).split(",")
        item = FakeIssue(
            max(self.issues, default=0) + 1,
            title,
            labels=[],
            description=body.get("description"),
        )
        for name in (x.strip() for x in names):
            if name and name not in item.labels:
                item.labels.append(name)
                self._label(name)
        self.issues[item.iid] = item
        return 201, {}, self.body_of(item)

    def _links(
        self, method: str, item: FakeIssue, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        if method == "GET":
            if not self.links_available:
                return 403, {}, payloads.error("403 Forbidden")
            entries = [
                payloads.link(self.body_of(self.issues[n]))
                for n in item.blocked_by
                if n in self.issues
            ]
            return 200, {}, entries
        if method != "POST":
            return 404, {}, payloads.error("404 Not found")
        if not {"target_project_id", "target_issue_iid"} <= set(body):
            return 400, {}, {"error": "target_project_id is missing"}
        if not self._is_project(str(body["target_project_id"])):
            return 404, {}, payloads.error("404 Project Not Found")
        target = self.issues.get(int(body["target_issue_iid"]))
        if target is None:
            return 404, {}, payloads.error("No matching issue found.")
        link_type = body.get("link_type", "relates_to")
        if link_type != "relates_to" and not self.links_available:
            return 403, {}, payloads.error("Blocked issues not available for current license")
        if link_type != "is_blocked_by":
            return 400, {}, payloads.error("the fake records is_blocked_by links only")
        if target.iid in item.blocked_by:
            return 409, {}, payloads.error("Issue(s) already assigned")
        item.blocked_by.append(target.iid)
        link_id = 7000 + len(item.blocked_by)
        answer = payloads.issue_link(link_id, self.body_of(target), self.body_of(item))
        return 201, {}, answer

    def _labels(
        self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        if method == "GET":
            return self._page(list(self.labels.values()), path, query)
        if method != "POST":
            return 404, {}, payloads.error("404 Not found")
        name, color = str(body.get("name") or "").strip(), body.get("color")
        if not name or not color:
            return 400, {}, {"error": "name is missing" if not name else "color is missing"}
        if name in self.labels:
            return 409, {}, payloads.error("Label already exists")
        return 201, {}, self._label(name, str(color), body.get("description"))

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
        for name in item.labels:
            self._label(name)
        event = body.get("state_event")
        if event == "close":
            item.state = "closed"
        elif event == "reopen":
            item.state = "opened"
        item.version += 1

    def _matching(self, query: dict[str, list[str]]) -> list[FakeIssue]:
        state = query.get("state", ["all"])[0]
        wanted = [x for x in query.get("labels", [""])[0].split(",") if x]
        iids = {int(x) for x in query.get("iids[]", [])}
        return [
            item
            for item in sorted(self.issues.values(), key=lambda i: i.iid)
            if (state == "all" or item.state == state)
            and all(w in item.labels for w in wanted)
            and (not iids or item.iid in iids)
        ]

    def _page(
        self, everything: list[Any], path: str, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], Any]:
        """One page of a list, with GitLab's offset pagination headers."""
        per_page = min(int(query.get("per_page", ["20"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        chunk = everything[(page - 1) * per_page : page * per_page]
        more = page * per_page < len(everything)
        headers = {
            "x-page": str(page),
            "x-per-page": str(per_page),
            "x-next-page": str(page + 1) if more else "",
            "x-total": str(len(everything)),
        }
        if more:
            params = "&".join(
                f"{quote(k)}={quote(x)}" for k, v in sorted(query.items()) if k != "page" for x in v
            )
            headers["Link"] = f'<{self.base}{path}?{params}&page={page + 1}>; rel="next"'
        return 200, headers, chunk


def serve(fake: FakeGitLab) -> AbstractContextManager[FakeGitLab]:
    """Run `fake` on 127.0.0.1 with an ephemeral port; `fake.base` is its URL."""
    return fake_http.serve(fake)

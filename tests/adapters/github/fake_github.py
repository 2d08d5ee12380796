"""A small GitHub server for end-to-end tests and the quota benchmark (stdlib only).

It holds one repository's issues, comments and labels in memory and speaks the REST endpoints
the adapter uses: issues (list with state/labels filters, get, create, update), issue labels
(add, remove), comments (list, create, get and edit by id), repository labels (list, create),
and `dependencies/blocked_by` (list, add). Lists page with `per_page`/`page` and a `Link` header.
Every GET carries an `ETag`; a matching `If-None-Match` gets 304 without a body and, as on
GitHub, costs no quota. `quota_used` counts the answers that do cost. `fail` makes the next
requests matching a method and path answer with a server error instead, as a GitHub outage would.

Given a `FakeProject`, it also answers the adapter's Projects v2 GraphQL operations at
`/graphql`, by operation name: the project lookup, item pages, items by id, setting the Status
and adding an issue to the project.

Pull requests, their checks, reviews, threads, merges and job logs are `FakePulls`' (`pulls`),
the same fake the code host's unit tests use: what it serves is served here, over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from tests.adapters import fake_http
from tests.adapters.github import payloads
from tests.adapters.github.fake_pulls import FakePulls

LIMIT = 5000


@dataclass
class FakeIssue:
    number: int
    title: str
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    pull_request: bool = False
    blocked_by: list[int] = field(default_factory=list)
    body: str | None = "Please do the thing."
    version: int = 0


@dataclass
class FakeComment:
    id: int
    issue: int
    body: str
    author: str | None = "octocat"
    created_at: str = payloads.STAMP
    updated_at: str | None = None
    association: str = "OWNER"
    """GitHub's `author_association`: `NONE` for someone with no part in the repository."""


@dataclass
class FakeItem:
    """A project item: an issue of the repository, with a Status option name."""

    number: int
    status: str | None
    archived: bool = False


@dataclass
class FakeProject:
    owner: str = "acme"
    number: int = 3
    project_id: str = "PVT_1"
    field_id: str = "PVTSSF_1"
    options: dict[str, str] = field(
        default_factory=lambda: {
            "opt-todo": "Todo",
            "opt-prog": "In Progress",
            "opt-review": "Human Review",
            "opt-done": "Done",
        }
    )
    """option id -> name."""
    items: dict[str, FakeItem] = field(default_factory=dict)


@dataclass
class Fault:
    """Answer the next `times` requests of `method` whose path matches `path` with `status`."""

    method: str
    path: str
    times: int
    status: int = 502


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    if_none_match: str | None
    answer: Any = None
    body: Any = None


class FakeGitHub:
    def __init__(
        self,
        repo: str = payloads.REPO,
        token: str = "ghp_fake_token_value",
        project: FakeProject | None = None,
        pulls: FakePulls | None = None,
    ) -> None:
        self.repo = repo
        self.pulls = pulls or FakePulls(slug=repo, downloads=None)
        self.token = token
        self.project = project
        self.issues: dict[int, FakeIssue] = {}
        self.comments: dict[int, FakeComment] = {}
        self.repo_labels: list[str] = []
        self.push_access = True
        """False: like a token without push access, creating an issue drops its labels."""
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self.base = ""

    # Board edits (as a person on github.com would make them)

    def add(self, number: int, title: str | None = None, **fields: Any) -> FakeIssue:
        with self.lock:
            item = FakeIssue(number, title or f"Issue {number}", **fields)
            self.issues[number] = item
            return item

    def edit(self, number: int, **fields: Any) -> None:
        with self.lock:
            item = self.issues[number]
            for key, value in fields.items():
                setattr(item, key, value)
            item.version += 1

    def comment(self, number: int, body: str, **fields: Any) -> FakeComment:
        with self.lock:
            return self._comment(number, body, **fields)

    def put_on_project(self, number: int, status: str | None) -> str:
        assert self.project is not None
        with self.lock:
            item_id = f"PVTI_{len(self.project.items) + 1}"
            self.project.items[item_id] = FakeItem(number, status)
            return item_id

    def fail(self, method: str, path: str, times: int, status: int = 502) -> Fault:
        """Answer the next `times` `method` requests whose path fully matches the regular
        expression `path` with `status` (nothing is applied); `Fault.times` counts down."""
        with self.lock:
            fault = Fault(method, path, times, status)
            self.faults.append(fault)
            return fault

    def labels_of(self, number: int) -> list[str]:
        with self.lock:
            return list(self.issues[number].labels)

    def comments_of(self, number: int) -> list[str]:
        with self.lock:
            return [c.body for c in self.comments.values() if c.issue == number]

    @property
    def quota_used(self) -> int:
        return sum(
            1 for r in self.requests if r.status != 304 and not r.path.startswith("/_downloads")
        )

    # Rendering

    def body_of(self, item: FakeIssue) -> dict[str, Any]:
        open_blockers = sum(
            1 for n in item.blocked_by if n in self.issues and self.issues[n].state == "open"
        )
        return payloads.issue(
            item.number,
            item.title,
            labels=item.labels,
            state=item.state,
            repo=self.repo,
            body=item.body,
            pull_request=item.pull_request,
            blocked_by=len(item.blocked_by),
            open_blockers=open_blockers,
            api=self.base,
            updated_at=f"2026-01-02T03:{item.version // 60 % 60:02d}:{item.version % 60:02d}Z",
        )

    def comment_body(self, comment: FakeComment) -> dict[str, Any]:
        return payloads.comment(
            comment.id,
            comment.body,
            repo=self.repo,
            number=comment.issue,
            author=comment.author,
            created_at=comment.created_at,
            updated_at=comment.updated_at,
            api=self.base,
            association=comment.association,
        )

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        path = parts.path
        fault = self._fault(method, path)
        status: int
        extra: dict[str, str]
        answer: Any
        if fault is not None:
            status, extra, answer = fault.status, {}, payloads.error("Server Error")
        else:
            status, extra, answer = self._route(method, path, query, headers, body)
        out = dict(extra)
        if method == "GET" and status == 200 and not isinstance(answer, bytes):
            etag = '"' + hashlib.sha1(json.dumps(answer, sort_keys=True).encode()).hexdigest() + '"'
            out["ETag"] = etag
            if headers.get("if-none-match") == etag:
                status, answer = 304, None
        with self.lock:
            self.requests.append(
                Request(method, path, query, status, headers.get("if-none-match"), answer, body)
            )
            out["x-ratelimit-limit"] = str(LIMIT)
            out["x-ratelimit-remaining"] = str(LIMIT - self.quota_used)
            out["x-ratelimit-reset"] = "4102444800"
        return status, out, answer

    def _fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and re.fullmatch(fault.path, path):
                    fault.times -= 1
                    return fault
        return None

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, dict[str, str], Any]:
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, payloads.error("Bad credentials")
        answered = self.pulls.route(method, path, query, body, self.base)
        if answered is not None:
            return answered
        if path == "/graphql" and method == "POST" and self.project is not None:
            with self.lock:
                return 200, {}, self._graphql(body["query"], body.get("variables") or {})
        repository = f"/repos/{self.repo}"
        with self.lock:
            if path == f"{repository}/labels":
                return self._repo_labels(method, path, query, body)
            if path == f"{repository}/issues" and method == "POST":
                return self._create(body)
            match = re.fullmatch(rf"{re.escape(repository)}/issues/comments/(\d+)", path)
            if match:
                return self._comment_by_id(method, int(match.group(1)), body)
        prefix = f"{repository}/issues"
        if not path.startswith(prefix):
            return 404, {}, payloads.error("Not Found")
        rest = path[len(prefix) :]
        with self.lock:
            if rest == "" and method == "GET":
                return self._list(query)
            match = re.fullmatch(r"/(\d+)(/.*)?", rest)
            if match is None or int(match.group(1)) not in self.issues:
                return 404, {}, payloads.error("Not Found")
            item = self.issues[int(match.group(1))]
            tail = match.group(2) or ""
            if tail == "" and method == "GET":
                return 200, {}, self.body_of(item)
            if tail == "" and method == "PATCH":
                if "state" in body:
                    item.state = body["state"]
                if "labels" in body:
                    item.labels = list(body["labels"])
                item.version += 1
                return 200, {}, self.body_of(item)
            if tail == "/labels" and method == "POST":
                for name in body["labels"]:
                    if name not in item.labels:
                        item.labels.append(name)
                    self._ensure_repo_label(name)
                item.version += 1
                return 200, {}, [payloads.label(n, repo=self.repo) for n in item.labels]
            if tail.startswith("/labels/") and method == "DELETE":
                name = unquote(tail[len("/labels/") :])
                if name not in item.labels:
                    return 404, {}, payloads.error("Label does not exist")
                item.labels.remove(name)
                item.version += 1
                return 200, {}, [payloads.label(n, repo=self.repo) for n in item.labels]
            if tail == "/comments" and method == "POST":
                comment = self._comment(item.number, body["body"])
                item.version += 1
                return 201, {}, self.comment_body(comment)
            if tail == "/comments" and method == "GET":
                mine = [c for c in self.comments.values() if c.issue == item.number]
                return self._page(path, query, [self.comment_body(c) for c in mine])
            if tail == "/dependencies/blocked_by" and method == "GET":
                found = [self.body_of(self.issues[n]) for n in item.blocked_by if n in self.issues]
                return self._page(path, query, found)
            if tail == "/dependencies/blocked_by" and method == "POST":
                return self._add_blocker(item, body)
        return 404, {}, payloads.error("Not Found")

    # REST operations

    def _comment(self, number: int, body: str, **fields: Any) -> FakeComment:
        comment_id = max(self.comments, default=100) + 1
        comment = FakeComment(comment_id, number, body, **fields)
        self.comments[comment_id] = comment
        return comment

    def _comment_by_id(
        self, method: str, comment_id: int, body: Any
    ) -> tuple[int, dict[str, str], Any]:
        comment = self.comments.get(comment_id)
        if comment is None:
            return 404, {}, payloads.error("Not Found")
        if method == "PATCH":
            comment.body = body["body"]
            comment.updated_at = "2026-01-03T00:00:00Z"
        elif method != "GET":
            return 404, {}, payloads.error("Not Found")
        return 200, {}, self.comment_body(comment)

    def _create(self, body: Any) -> tuple[int, dict[str, str], Any]:
        number = max(self.issues, default=0) + 1
        labels = [str(n) for n in body.get("labels") or []] if self.push_access else []
        for name in labels:
            self._ensure_repo_label(name)
        item = FakeIssue(number, str(body["title"]), labels, body=body.get("body") or None)
        self.issues[number] = item
        return 201, {}, self.body_of(item)

    def _add_blocker(self, item: FakeIssue, body: Any) -> tuple[int, dict[str, str], Any]:
        # payloads.issue gives issue n the database id 1000 + n.
        blocker = int(body["issue_id"]) - 1000
        if blocker not in self.issues:
            return 404, {}, payloads.error("Not Found")
        if blocker in item.blocked_by or blocker == item.number:
            return (
                422,
                {},
                payloads.validation_failed("Validation Failed", "invalid", resource="Issue"),
            )
        item.blocked_by.append(blocker)
        item.version += 1
        return 201, {}, self.body_of(item)

    def _ensure_repo_label(self, name: str) -> None:
        # Like GitHub, labelling an issue with an unknown name creates the label.
        if name.lower() not in (n.lower() for n in self.repo_labels):
            self.repo_labels.append(name)

    def _repo_labels(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        if method == "GET":
            return self._page(
                path, query, [payloads.label(n, repo=self.repo) for n in self.repo_labels]
            )
        if method == "POST":
            name = str(body["name"])
            if name.lower() in (n.lower() for n in self.repo_labels):
                return 422, {}, payloads.validation_failed("Validation Failed", "already_exists")
            self.repo_labels.append(name)
            return 201, {}, payloads.label(name, repo=self.repo)
        return 404, {}, payloads.error("Not Found")

    def _list(self, query: dict[str, list[str]]) -> tuple[int, dict[str, str], Any]:
        state = query.get("state", ["open"])[0]
        wanted = [x for x in query.get("labels", [""])[0].split(",") if x]
        matching = [
            item
            for item in sorted(self.issues.values(), key=lambda i: i.number)
            if (state == "all" or item.state == state)
            and all(w.lower() in (x.lower() for x in item.labels) for w in wanted)
        ]
        path = f"/repos/{self.repo}/issues"
        return self._page(path, query, [self.body_of(item) for item in matching])

    def _page(
        self, path: str, query: dict[str, list[str]], entries: list[Any]
    ) -> tuple[int, dict[str, str], Any]:
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        chunk = entries[(page - 1) * per_page : page * per_page]
        headers: dict[str, str] = {}
        if page * per_page < len(entries):
            params = "&".join(f"{k}={v[0]}" for k, v in sorted(query.items()) if k != "page")
            headers["Link"] = f'<{self.base}{path}?{params}&page={page + 1}>; rel="next"'
        return 200, headers, chunk

    # Projects v2 (GraphQL)

    def _graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        project = self.project
        assert project is not None
        match = re.search(r"\b(?:query|mutation)\s+(\w+)", query)
        name = match.group(1) if match else ""
        if name in ("ProjectOfOrganization", "ProjectOfUser"):
            if (variables["owner"], variables["number"]) != (project.owner, project.number):
                return {"data": {"owner": {"projectV2": None}}}
            options = [{"id": k, "name": v} for k, v in project.options.items()]
            field_ = {"id": project.field_id, "options": options}
            return {"data": {"owner": {"projectV2": {"id": project.project_id, "field": field_}}}}
        if name == "ProjectItems":
            nodes = [self._item(i) for i in project.items]
            info = {"hasNextPage": False, "endCursor": None}
            return {"data": {"node": {"items": {"pageInfo": info, "nodes": nodes}}}}
        if name == "ProjectItemsById":
            found = [
                {"__typename": "ProjectV2Item", **self._item(i)} if i in project.items else None
                for i in variables["ids"]
            ]
            return {"data": {"nodes": found}}
        if name == "SetItemStatus":
            item = project.items.get(variables["itemId"])
            option = project.options.get(variables["optionId"])
            if item is None or option is None or variables["fieldId"] != project.field_id:
                return {"data": None, "errors": [{"type": "NOT_FOUND", "message": "not found"}]}
            item.status = option
            return {
                "data": {
                    "updateProjectV2ItemFieldValue": {"projectV2Item": {"id": variables["itemId"]}}
                }
            }
        if name == "AddProjectItem":
            number = next((n for n in self.issues if f"I_node{n}" == variables["contentId"]), None)
            if number is None or variables["projectId"] != project.project_id:
                return {"data": None, "errors": [{"type": "NOT_FOUND", "message": "not found"}]}
            item_id = (
                next((k for k, v in project.items.items() if v.number == number), None)
                or f"PVTI_{len(project.items) + 1}"
            )
            project.items.setdefault(item_id, FakeItem(number, None))
            return {"data": {"addProjectV2ItemById": {"item": {"id": item_id}}}}
        return {"errors": [{"message": f"unknown operation {name!r}"}]}

    def _item(self, item_id: str) -> dict[str, Any]:
        project = self.project
        assert project is not None
        entry = project.items[item_id]
        issue = self.issues[entry.number]
        option = next((k for k, v in project.options.items() if v == entry.status), None)
        return {
            "id": item_id,
            "isArchived": entry.archived,
            "project": {"id": project.project_id},
            "status": {"name": entry.status, "optionId": option} if entry.status else None,
            "content": {
                "__typename": "Issue",
                "id": f"I_node{issue.number}",
                "number": issue.number,
                "title": issue.title,
                "body": issue.body or "",
                "url": f"{payloads.WEB}/{self.repo}/issues/{issue.number}",
                "createdAt": "2026-01-01T00:00:00Z",
                "updatedAt": "2026-01-02T00:00:00Z",
                "issueState": issue.state.upper(),
                "repository": {"nameWithOwner": self.repo},
                "labels": {"nodes": [{"name": n} for n in issue.labels]},
                "assignees": {"nodes": []},
            },
        }


def serve(fake: FakeGitHub) -> AbstractContextManager[FakeGitHub]:
    """Run `fake` on 127.0.0.1 with an ephemeral port; `fake.base` is its URL."""
    return fake_http.serve(fake)


def transport(fake: FakeGitHub, base: str = "https://api.github.com") -> httpx.MockTransport:
    """An in-process httpx transport onto `fake`, for runs that need no socket."""
    fake.base = base

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        body = json.loads(request.content) if request.content else None
        target = request.url.raw_path.decode("ascii")
        status, out, payload = fake.handle(request.method, target, headers, body)
        if isinstance(payload, bytes):
            return httpx.Response(status, headers=out, content=payload)
        return httpx.Response(status, headers=out, json=payload if payload is not None else None)

    return httpx.MockTransport(answer)

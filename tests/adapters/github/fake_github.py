"""A small GitHub REST server for end-to-end tests and the quota benchmark (stdlib only).

It holds one repository's issues in memory and speaks the issue endpoints the adapter uses:
list (state/labels filters, `per_page`/`page` with a `Link` header), get, update, add/remove
label, create comment and `dependencies/blocked_by`. Every GET carries an `ETag`; a matching
`If-None-Match` gets 304 without a body and, as on GitHub, costs no quota. `quota_used` counts
the answers that do cost.
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

LIMIT = 5000


@dataclass
class FakeIssue:
    number: int
    title: str
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    pull_request: bool = False
    blocked_by: list[int] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    version: int = 0


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    if_none_match: str | None
    answer: Any = None


class FakeGitHub:
    def __init__(self, repo: str = payloads.REPO, token: str = "ghp_fake_token_value") -> None:
        self.repo = repo
        self.token = token
        self.issues: dict[int, FakeIssue] = {}
        self.requests: list[Request] = []
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

    def labels_of(self, number: int) -> list[str]:
        with self.lock:
            return list(self.issues[number].labels)

    @property
    def quota_used(self) -> int:
        return sum(1 for r in self.requests if r.status != 304)

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
            pull_request=item.pull_request,
            blocked_by=len(item.blocked_by),
            open_blockers=open_blockers,
            api=self.base,
            updated_at=f"2026-01-02T03:{item.version // 60 % 60:02d}:{item.version % 60:02d}Z",
        )

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        path = parts.path
        status, extra, answer = self._route(method, path, query, headers, body)
        out = dict(extra)
        if method == "GET" and status == 200:
            etag = '"' + hashlib.sha1(json.dumps(answer, sort_keys=True).encode()).hexdigest() + '"'
            out["ETag"] = etag
            if headers.get("if-none-match") == etag:
                status, answer = 304, None
        with self.lock:
            self.requests.append(
                Request(method, path, query, status, headers.get("if-none-match"), answer)
            )
            out["x-ratelimit-limit"] = str(LIMIT)
            out["x-ratelimit-remaining"] = str(LIMIT - self.quota_used)
            out["x-ratelimit-reset"] = "4102444800"
        return status, out, answer

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
        prefix = f"/repos/{self.repo}/issues"
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
                item.comments.append(body["body"])
                item.version += 1
                return 201, {}, payloads.comment(len(item.comments), body["body"], repo=self.repo)
            if tail == "/dependencies/blocked_by" and method == "GET":
                found = [self.body_of(self.issues[n]) for n in item.blocked_by if n in self.issues]
                return 200, {}, found
        return 404, {}, payloads.error("Not Found")

    def _list(self, query: dict[str, list[str]]) -> tuple[int, dict[str, str], Any]:
        state = query.get("state", ["open"])[0]
        wanted = [x for x in query.get("labels", [""])[0].split(",") if x]
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        matching = [
            item
            for item in sorted(self.issues.values(), key=lambda i: i.number)
            if (state == "all" or item.state == state)
            and all(w.lower() in (x.lower() for x in item.labels) for w in wanted)
        ]
        chunk = matching[(page - 1) * per_page : page * per_page]
        headers: dict[str, str] = {}
        if page * per_page < len(matching):
            params = "&".join(f"{k}={v[0]}" for k, v in sorted(query.items()) if k != "page")
            headers["Link"] = (
                f'<{self.base}/repos/{self.repo}/issues?{params}&page={page + 1}>; rel="next"'
            )
        return 200, headers, [self.body_of(item) for item in chunk]


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
        return httpx.Response(status, headers=out, json=payload if payload is not None else None)

    return httpx.MockTransport(answer)

"""A small GitHub pulls API in memory: a repository's pull requests as GitHub lists, opens,
labels, edits and merges them, with each head commit's check runs and statuses, the reviews,
review threads and branch protection, as the code host adapter reads them.

`FakePulls.route` is the router (a request in; `(status, headers, answer)` out, or None for a
path it does not serve). Both `transport()` here and `FakeGitHub`'s HTTP server use it, so unit
and end-to-end tests talk to one fake. Standalone, `handle` adds what GitHub adds to every
answer: an ETag on each GET, and a bare 304 (costing no quota) when `If-None-Match` matches it.
Tests change the fake as a person or CI would: `add_pull`, `push`, `add_check`, `add_status`,
`add_review`, `add_thread`, `resolve`, `set_mergeable`, `protect`, `merge`; `fail` makes GitHub
fail once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

WEB = "https://github.com"
Answer = tuple[int, dict[str, str], Any]
"""(status, headers, JSON answer; bytes for a download; None for no body)."""


@dataclass
class FakeCheck:
    id: int
    name: str
    sha: str
    status: str = "completed"
    conclusion: str | None = "success"
    summary: str | None = None
    annotations: list[tuple[str, int, str]] = field(default_factory=list)
    """(path, line, message)."""
    log: str | None = None
    """The log of the Actions job that ran it; None: another app ran it."""


@dataclass
class FakeStatus:
    context: str
    sha: str
    state: str
    description: str | None = None
    target_url: str | None = None


@dataclass
class FakeReview:
    id: int
    number: int
    author: str
    state: str
    """APPROVED | CHANGES_REQUESTED | COMMENTED | DISMISSED"""
    body: str = ""


@dataclass
class FakeThread:
    id: str
    number: int
    path: str
    line: int | None
    diff_hunk: str
    comments: list[tuple[int, str, str]]
    """(id, author, body)."""
    resolved: bool = False
    side: str = "RIGHT"
    start_line: int | None = None
    review: int | None = None
    """The review it was posted with (`POST .../reviews`), if any."""


@dataclass
class Exchange:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int
    answer: Any
    token: str | None


@dataclass
class _Fault:
    method: str
    path: str
    status: int
    applied: bool


@dataclass
class FakePulls:
    slug: str = "acme/widgets"
    default_branch: str = "main"
    branches: set[str] = field(default_factory=lambda: {"main"})
    pulls: list[dict[str, Any]] = field(default_factory=list)
    checks: list[FakeCheck] = field(default_factory=list)
    statuses: list[FakeStatus] = field(default_factory=list)
    reviews: list[FakeReview] = field(default_factory=list)
    threads: list[FakeThread] = field(default_factory=list)
    required: set[str] = field(default_factory=set)
    """Names of the checks the base branch requires."""
    outsiders: set[str] = field(default_factory=set)
    """Logins with no part in the repository (`author_association` NONE); everyone else is a
    collaborator."""
    protection: dict[str, int] = field(default_factory=dict)
    """Protected branch -> approvals its rule requires; others answer 404."""
    dismiss_stale: bool = False
    """A push dismisses the pull request's approvals, as a branch rule may ask."""
    own_pulls: bool = False
    """The token opened every pull request: GitHub refuses it a verdict on them (422)."""
    downloads: str | None = "https://downloads.example.test"
    """Where job logs are downloaded from; None: the API's own host."""
    requests: list[Exchange] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _faults: list[_Fault] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    # Changes made from outside (a person, a push, CI)

    def association(self, login: str) -> str:
        return "NONE" if login in self.outsiders else "COLLABORATOR"

    def record(self, number: int) -> dict[str, Any]:
        return next(p for p in self.pulls if p["number"] == number)

    def add_pull(self, branch: str, sha: str, base: str = "main", title: str = "A change") -> int:
        with self.lock:
            return self._open({"head": branch, "base": base, "title": title, "body": ""}, sha)

    def push(self, number: int, sha: str) -> None:
        with self.lock:
            self.record(number)["head"]["sha"] = sha
            if self.dismiss_stale:
                for review in self.reviews:
                    if review.number == number and review.state == "APPROVED":
                        review.state = "DISMISSED"

    def add_check(
        self,
        number: int,
        name: str,
        conclusion: str | None = "success",
        *,
        status: str = "completed",
        summary: str | None = None,
        required: bool = False,
        annotations: tuple[tuple[str, int, str], ...] = (),
        log: str | None = None,
    ) -> FakeCheck:
        """A check run on the pull request's head; a new run of a name replaces the old."""
        with self.lock:
            sha = self.record(number)["head"]["sha"]
            self.checks = [c for c in self.checks if (c.sha, c.name) != (sha, name)]
            check = FakeCheck(
                next(self._ids), name, sha, status, conclusion, summary, list(annotations), log
            )
            self.checks.append(check)
            if required:
                self.required.add(name)
            return check

    def add_status(
        self, number: int, context: str, state: str, *, required: bool = False, **fields: Any
    ) -> None:
        with self.lock:
            sha = self.record(number)["head"]["sha"]
            self.statuses = [s for s in self.statuses if (s.sha, s.context) != (sha, context)]
            self.statuses.append(FakeStatus(context, sha, state, **fields))
            if required:
                self.required.add(context)

    def add_review(self, number: int, author: str, state: str, body: str = "") -> None:
        with self.lock:
            self.reviews.append(FakeReview(next(self._ids), number, author, state, body))

    def add_thread(
        self, number: int, path: str, line: int | None, *said: tuple[str, str]
    ) -> FakeThread:
        """A review thread of (author, body) comments on `path` at `line`."""
        with self.lock:
            thread_id = f"PRRT_{next(self._ids)}"
            hunk = f"@@ -{line or 1},2 +{line or 1},3 @@ {path}"
            comments = [(next(self._ids), author, body) for author, body in said]
            thread = FakeThread(thread_id, number, path, line, hunk, comments)
            self.threads.append(thread)
            self.add_review(number, said[0][0], "COMMENTED")  # as GitHub files a comment
            return thread

    def resolve(self, thread: FakeThread) -> None:
        with self.lock:
            thread.resolved = True

    def set_mergeable(self, number: int, mergeable: bool | None) -> None:
        with self.lock:
            self.record(number)["mergeable"] = mergeable

    def protect(self, branch: str, approvals: int) -> None:
        with self.lock:
            self.protection[branch] = approvals

    def merge(self, number: int) -> None:
        with self.lock:
            self.record(number).update(
                state="closed", merged_at="2026-12-02T10:00:00Z", merge_commit_sha=f"m{number}"
            )

    def fail(self, method: str, path: str, status: int = 502, *, applied: bool = False) -> None:
        """Answer the next `method` request whose path fully matches `path` with `status`,
        having done what it asked when `applied` (a merge whose answer was lost)."""
        with self.lock:
            self._faults.append(_Fault(method, path, status, applied))

    @property
    def quota_used(self) -> int:
        """GitHub API answers that cost quota: not a 304, not a log download."""
        return sum(
            1 for r in self.requests if r.status != 304 and not r.path.startswith("/_downloads")
        )

    def operations(self) -> list[str]:
        """The GraphQL operations sent, by name, in order."""
        return [_operation(r.body["query"]) for r in self.requests if r.path == "/graphql"]

    # Serving

    def transport(self) -> httpx.MockTransport:
        def answer(request: httpx.Request) -> httpx.Response:
            headers = {k.lower(): v for k, v in request.headers.items()}
            body = json.loads(request.content) if request.content else None
            target = request.url.raw_path.decode("ascii")
            status, out, payload = self.handle(request.method, target, headers, body)
            if isinstance(payload, bytes):
                return httpx.Response(status, headers=out, content=payload)
            return httpx.Response(status, headers=out, json=payload)

        return httpx.MockTransport(answer)

    def handle(self, method: str, target: str, headers: dict[str, str], body: Any) -> Answer:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        answered = self.route(method, parts.path, query, body, "https://api.github.com")
        status, out, answer = answered or (404, {}, {"message": "Not Found"})
        if method == "GET" and status == 200 and not isinstance(answer, bytes):
            etag = '"' + hashlib.sha1(json.dumps(answer, sort_keys=True).encode()).hexdigest() + '"'
            out = {**out, "ETag": etag}
            if headers.get("if-none-match") == etag:
                status, answer = 304, None
        with self.lock:
            token = headers.get("authorization")
            self.requests.append(Exchange(method, parts.path, query, body, status, answer, token))
        return status, out, answer

    def route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, base: str
    ) -> Answer | None:
        with self.lock:
            fault = next(
                (f for f in self._faults if f.method == method and re.fullmatch(f.path, path)),
                None,
            )
            if fault is not None:
                self._faults.remove(fault)
                if fault.applied:
                    self._route(method, path, query, body, base)
                return fault.status, {}, {"message": "Server Error"}
            return self._route(method, path, query, body, base)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, base: str
    ) -> Answer | None:
        repo = f"/repos/{self.slug}"
        if path == "/graphql" and method == "POST":
            return self._graphql(body["query"], body.get("variables") or {})
        if path.startswith("/_downloads/jobs/"):
            check = self._check(int(path.rsplit("/", 1)[1]))
            if check is None or check.log is None:
                return 404, {}, {"message": "Not Found"}
            return 200, {"Content-Type": "text/plain"}, check.log.encode()
        if not path.startswith(repo):
            return None
        rest = path[len(repo) :]
        if (method, rest) == ("GET", ""):
            return 200, {}, {"full_name": self.slug, "default_branch": self.default_branch}
        if rest == "/pulls":
            return self._pulls(method, query, body)
        found = re.fullmatch(r"/pulls/(\d+)/(reviews/(\d+)/comments|comments/(\d+)/replies)", rest)
        if found is not None and found[3] is not None and method == "GET":
            threads = [t for t in self.threads if t.review == int(found[3])]
            firsts = [(t, *t.comments[0]) for t in threads]
            return 200, {}, [_review_comment(*f, self.association(f[2])) for f in firsts]
        if found is not None and found[4] is not None and method == "POST":
            return self._reply(int(found[1]), int(found[4]), body)
        found = re.fullmatch(r"/pulls/(\d+)/reviews", rest)
        if found is not None and method == "POST":
            return self._post_review(int(found[1]), body)
        found = re.fullmatch(r"/(pulls|issues)/(\d+)(/\w+)?", rest)
        if found is not None:
            return self._pull_route(method, found.group(1), int(found.group(2)), found[3], body)
        found = re.fullmatch(r"/commits/([^/]+)/(check-runs|status)", rest)
        if found is not None and method == "GET":
            sha = found.group(1)
            if found.group(2) == "check-runs":
                runs = [self._run(c) for c in self.checks if c.sha == sha]
                return 200, {}, {"total_count": len(runs), "check_runs": runs}
            return 200, {}, self._combined(sha)
        found = re.fullmatch(r"/check-runs/(\d+)/annotations", rest)
        if found is not None and method == "GET":
            check = self._check(int(found.group(1)))
            notes = [_annotation(*note) for note in check.annotations] if check else []
            return 200, {}, notes
        found = re.fullmatch(r"/actions/jobs/(\d+)/logs", rest)
        if found is not None and method == "GET":
            where = self.downloads or base
            return 302, {"Location": f"{where}/_downloads/jobs/{found.group(1)}"}, None
        found = re.fullmatch(r"/branches/(.+)/protection", rest)
        if found is not None and method == "GET":
            approvals = self.protection.get(unquote(found.group(1)))
            if approvals is None:
                return 404, {}, {"message": "Branch not protected"}
            rule = {"required_approving_review_count": approvals}
            return 200, {}, {"required_pull_request_reviews": rule}
        return None

    # REST

    def _pulls(self, method: str, query: dict[str, list[str]], body: Any) -> Answer:
        if method == "GET":
            owner, _, branch = query["head"][0].partition(":")
            found = [
                p
                for p in self.pulls
                if p["head"]["ref"] == branch and owner == self.slug.split("/")[0]
            ]
            # A list holds `pull-request-simple` records, which leave `mergeable` out.
            simple = [{k: v for k, v in p.items() if k != "mergeable"} for p in found]
            return 200, {}, sorted(simple, key=lambda p: -p["number"])
        if body["base"] not in self.branches:
            return 422, {}, {"message": "Validation Failed", "errors": [{"field": "base"}]}
        number = self._open(body, None)
        return 201, {}, self.record(number)

    def _open(self, body: dict[str, Any], sha: str | None) -> int:
        number = 100 + len(self.pulls) + 1
        self.pulls.append(
            {
                "number": number,
                "html_url": f"{WEB}/{self.slug}/pull/{number}",
                "state": "open",
                "title": body["title"],
                "body": body["body"],
                "draft": body.get("draft", False),
                "merged_at": None,
                "merge_commit_sha": None,
                "mergeable": True,
                "labels": [],
                "head": {"ref": body["head"], "sha": sha or f"sha-{number}"},
                "base": {"ref": body["base"]},
            }
        )
        return number

    def _pull_route(
        self, method: str, kind: str, number: int, tail: str | None, body: Any
    ) -> Answer | None:
        if number not in {p["number"] for p in self.pulls}:
            return None if kind == "issues" else (404, {}, {"message": "Not Found"})
        pull = self.record(number)
        if (method, kind, tail) == ("GET", "pulls", None):
            return 200, {}, {**pull, "mergeable_state": self.mergeable_state(pull)}
        if (method, kind, tail) == ("PATCH", "pulls", None):
            pull.update(title=body["title"], body=body["body"])
            pull["base"]["ref"] = body["base"]
            return 200, {}, pull
        if (method, kind, tail) == ("PUT", "pulls", "/merge"):
            return self._merge(pull, body)
        if (method, kind, tail) == ("GET", "pulls", "/reviews"):
            mine = [r for r in self.reviews if r.number == number]
            return 200, {}, [_review(r, self.association(r.author)) for r in mine]
        if (method, kind, tail) == ("GET", "pulls", "/comments"):
            threads = [t for t in self.threads if t.number == number]
            return (
                200,
                {},
                [
                    _review_comment(t, *c, self.association(c[1]))
                    for t in threads
                    for c in t.comments
                ],
            )
        if (method, kind, tail) == ("POST", "issues", "/labels"):
            names = [label["name"] for label in pull["labels"]]
            pull["labels"] += [{"name": n} for n in body["labels"] if n not in names]
            return 200, {}, pull["labels"]
        return 404, {}, {"message": "Not Found"}

    def _post_review(self, number: int, body: dict[str, Any]) -> Answer:
        """A review with its line comments, as the token's user (`symphony`): one thread per
        comment. A line outside the diff is not checked; a verdict on one's own pull request
        is GitHub's 422 only when `own_pulls` says so."""
        if number not in {p["number"] for p in self.pulls}:
            return 404, {}, {"message": "Not Found"}
        if self.own_pulls and body.get("event") in ("APPROVE", "REQUEST_CHANGES"):
            message = "Can not request changes on your own pull request"
            return 422, {}, {"message": "Unprocessable Entity", "errors": [message]}
        state = {"REQUEST_CHANGES": "CHANGES_REQUESTED", "APPROVE": "APPROVED"}.get(
            body.get("event", ""), "COMMENTED"
        )
        review = FakeReview(next(self._ids), number, "symphony", state, body.get("body", ""))
        self.reviews.append(review)
        for comment in body.get("comments", []):
            line = comment["line"]
            hunk = f"@@ -{line},2 +{line},3 @@ {comment['path']}"
            said = [(next(self._ids), "symphony", comment["body"])]
            thread = FakeThread(
                f"PRRT_{next(self._ids)}", number, comment["path"], line, hunk, said,
                side=comment.get("side", "RIGHT"), start_line=comment.get("start_line"),
                review=review.id,
            )  # fmt: skip
            self.threads.append(thread)
        return 200, {}, _review(review, self.association(review.author))

    def _reply(self, number: int, comment_id: int, body: dict[str, Any]) -> Answer:
        thread = next(
            (t for t in self.threads if t.number == number and t.comments[0][0] == comment_id),
            None,
        )
        if thread is None:
            return 404, {}, {"message": "Not Found"}
        reply = (next(self._ids), "symphony", body["body"])
        thread.comments.append(reply)
        return 201, {}, _review_comment(thread, *reply, self.association(reply[1]))

    def mergeable_state(self, pull: dict[str, Any]) -> str:
        """GitHub's `mergeable_state`, small: `draft`, `unknown` while computing, `dirty` on a
        conflict, `blocked` while a required check has not passed on the head or the base's
        rule lacks approvals, `unstable` when another check failed, else `clean`."""
        if pull["draft"]:
            return "draft"
        if pull["mergeable"] is None:
            return "unknown"
        if pull["mergeable"] is False:
            return "dirty"
        sha = pull["head"]["sha"]
        results = {c.name: c.conclusion for c in self.checks if c.sha == sha}
        results |= {
            s.context: ("success" if s.state == "success" else s.state)
            for s in self.statuses
            if s.sha == sha
        }
        if any(results.get(name) != "success" for name in self.required):
            return "blocked"
        if self.protection.get(pull["base"]["ref"]) and self._decision(pull) != "APPROVED":
            return "blocked"
        if any(result not in ("success", "neutral", "skipped") for result in results.values()):
            return "unstable"
        return "clean"

    def _merge(self, pull: dict[str, Any], body: Any) -> Answer:
        if pull["state"] != "open" or pull["mergeable"] is False:
            return 405, {}, {"message": "Pull Request is not mergeable"}
        if self.mergeable_state(pull) == "blocked":
            return 405, {}, {"message": "Required status check has not passed"}
        if body.get("sha") not in (None, pull["head"]["sha"]):
            return 409, {}, {"message": "Head branch was modified. Review and try the merge again."}
        self.merge(pull["number"])
        result = {"sha": pull["merge_commit_sha"], "merged": True, "message": "Merged"}
        return 200, {}, result

    def _check(self, check_id: int) -> FakeCheck | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def _run(self, check: FakeCheck) -> dict[str, Any]:
        actions = check.log is not None
        details = (
            f"{WEB}/{self.slug}/actions/runs/{check.id + 1000}/job/{check.id}"
            if actions
            else f"https://ci.example.test/builds/{check.id}"
        )
        return {
            "id": check.id,
            "name": check.name,
            "head_sha": check.sha,
            "status": check.status,
            "conclusion": check.conclusion if check.status == "completed" else None,
            "html_url": f"{WEB}/{self.slug}/runs/{check.id}",
            "details_url": details,
            "output": {
                "title": check.conclusion,
                "summary": check.summary,
                "text": None,
                "annotations_count": len(check.annotations),
            },
            "app": {"slug": "github-actions" if actions else "ci"},
        }

    def _combined(self, sha: str) -> dict[str, Any]:
        mine = [s for s in self.statuses if s.sha == sha]
        states = {s.state for s in mine}
        worst = next((s for s in ("failure", "error", "pending") if s in states), "success")
        statuses = [
            {
                "context": s.context,
                "state": s.state,
                "description": s.description,
                "target_url": s.target_url,
            }
            for s in mine
        ]
        return {"state": worst, "sha": sha, "total_count": len(mine), "statuses": statuses}

    # GraphQL

    def _graphql(self, document: str, variables: dict[str, Any]) -> Answer | None:
        name = _operation(document)
        if name == "PullRequestFollow":
            number = variables["number"]
            if number not in {p["number"] for p in self.pulls}:
                return 200, {}, {"data": {"repository": {"pullRequest": None}}}
            pull = self._follow(self.record(number))
            return 200, {}, {"data": {"repository": {"pullRequest": pull}}}
        if name == "ReplyToThread":
            thread = next((t for t in self.threads if t.id == variables["threadId"]), None)
            if thread is None:
                error = {"type": "NOT_FOUND", "message": "Could not resolve to a node"}
                return (
                    200,
                    {},
                    {"data": {"addPullRequestReviewThreadReply": None}, "errors": [error]},
                )
            comment_id = next(self._ids)
            thread.comments.append((comment_id, "symphony", variables["body"]))
            reply = {"comment": {"id": f"PRRC_{comment_id}"}}
            return 200, {}, {"data": {"addPullRequestReviewThreadReply": reply}}
        return None

    def _follow(self, pull: dict[str, Any]) -> dict[str, Any]:
        number, sha = pull["number"], pull["head"]["sha"]
        threads = [
            {
                "id": t.id,
                "isResolved": t.resolved,
                "path": t.path,
                "line": t.line,
                "comments": {
                    "nodes": [
                        {
                            "fullDatabaseId": str(i),
                            "body": b,
                            "authorAssociation": self.association(a),
                            "author": {"__typename": "User", "login": a},
                        }
                        for i, a, b in t.comments
                    ]
                },
            }
            for t in self.threads
            if t.number == number
        ]
        contexts: list[dict[str, Any]] = [
            {"__typename": "CheckRun", "name": c.name, "isRequired": c.name in self.required}
            for c in self.checks
            if c.sha == sha
        ]
        contexts += [
            {
                "__typename": "StatusContext",
                "context": s.context,
                "isRequired": s.context in self.required,
            }
            for s in self.statuses
            if s.sha == sha
        ]
        rollup = {"contexts": {"nodes": contexts}} if contexts else None
        mergeable = {True: "MERGEABLE", False: "CONFLICTING", None: "UNKNOWN"}[pull["mergeable"]]
        return {
            "reviewDecision": self._decision(pull),
            "mergeable": mergeable,
            "reviewThreads": {"nodes": threads},
            "commits": {"nodes": [{"commit": {"oid": sha, "statusCheckRollup": rollup}}]},
        }

    def _decision(self, pull: dict[str, Any]) -> str | None:
        """GitHub's rule, small: any standing change request wins; then enough approvals for
        the base's protection (any one when unprotected)."""
        verdicts: dict[str, str] = {}
        for review in self.reviews:
            if review.number == pull["number"] and review.state in (
                "APPROVED",
                "CHANGES_REQUESTED",
            ):
                verdicts[review.author] = review.state
        if "CHANGES_REQUESTED" in verdicts.values():
            return "CHANGES_REQUESTED"
        approvals = sum(1 for v in verdicts.values() if v == "APPROVED")
        needed = self.protection.get(pull["base"]["ref"])
        if needed:
            return "APPROVED" if approvals >= needed else "REVIEW_REQUIRED"
        return "APPROVED" if approvals else None


def _operation(document: str) -> str:
    found = re.search(r"\b(?:query|mutation)\s+(\w+)", document)
    return found.group(1) if found else ""


def _review(review: FakeReview, association: str) -> dict[str, Any]:
    return {
        "id": review.id,
        "user": {"login": review.author},
        "author_association": association,
        "state": review.state,
        "body": review.body,
    }


def _review_comment(
    thread: FakeThread, comment_id: int, author: str, body: str, association: str
) -> dict[str, Any]:
    comment = {
        "id": comment_id,
        "path": thread.path,
        "diff_hunk": thread.diff_hunk,
        "body": body,
        "user": {"login": author},
        "author_association": association,
    }
    # The description has no null `line`: a comment on the whole file leaves it out.
    return comment if thread.line is None else {**comment, "line": thread.line}


def _annotation(path: str, line: int, message: str) -> dict[str, Any]:
    return {
        "path": path,
        "start_line": line,
        "end_line": line,
        "annotation_level": "failure",
        "message": message,
    }

"""A small GitLab merge request API in memory: one project's merge requests, their head
pipelines and jobs (with logs), approvals and discussions, and its members
(`fake_members.FakeMembers`), as the code host adapter reads and writes them.

One router, served two ways: `transport()` as an httpx mock transport, or mounted in
`FakeGitLab(merge_requests=...)` behind real HTTP for end-to-end tests. It answers GETs with an
`ETag` and a 304 to a matching `If-None-Match`, and counts in `quota` every answer that is not
a 304. A test changes the project as people and CI would: pushes (`push`), jobs (`add_job`,
`set_job`), approvals, discussions, conflicts, and merges or closes from outside.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from tests.adapters.gitlab import payloads
from tests.adapters.gitlab.fake_members import FakeMembers

PENDING = frozenset({"created", "pending", "running", "preparing", "waiting_for_resource"})


@dataclass
class FakeJob:
    id: int
    name: str
    status: str
    allow_failure: bool = False
    trace: str | None = ""
    """None: GitLab will not show the log (403, as to a token that may not read it)."""


@dataclass
class FakePipeline:
    id: int
    sha: str
    jobs: list[FakeJob] = field(default_factory=list)

    def status(self) -> str:
        """Running while a job runs; failed when a job that may not fail failed."""
        if any(j.status in PENDING for j in self.jobs):
            return "running"
        if any(j.status in ("failed", "canceled") and not j.allow_failure for j in self.jobs):
            return "failed"
        return "success" if self.jobs else "created"


@dataclass
class FakeDiscussion:
    id: str
    notes: list[dict[str, Any]]


@dataclass
class FakeMergeRequest:
    iid: int
    title: str
    description: str
    source_branch: str
    target_branch: str
    sha: str
    labels: list[str] = field(default_factory=list)
    state: str = "opened"
    has_conflicts: bool = False
    detailed_merge_status: str | None = None
    """None: what the other fields make it (`mergeable`, `conflict`, `draft_status`)."""
    approvals_required: int | None = 0
    """None: an instance without approval rules, whose answer names no counts."""
    approved_by: list[str] = field(default_factory=list)
    pipelines: list[FakePipeline] = field(default_factory=list)
    discussions: list[FakeDiscussion] = field(default_factory=list)
    merge_commit_sha: str | None = None
    squash_commit_sha: str | None = None
    squash: bool = False
    source_project_id: int | None = None
    version: int = 0

    @property
    def draft(self) -> bool:
        return self.title.lower().startswith(("draft:", "[draft]", "(draft)"))

    def head_pipeline(self) -> FakePipeline | None:
        """The newest pipeline of the head commit (GitLab shows none until one is created)."""
        return next((p for p in reversed(self.pipelines) if p.sha == self.sha), None)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    body: Any = None
    answer: Any = None


class FakeMergeRequests:
    def __init__(
        self,
        project: str = payloads.PROJECT,
        token: str = "glpat-fake_token_value",
        project_id: int = payloads.PROJECT_ID,
        default_branch: str = "main",
    ) -> None:
        self.project = project
        self.project_id = project_id
        self.token = token
        self.default_branch = default_branch
        self.branches = {default_branch}
        self.base = payloads.BASE
        self.merge_requests: dict[int, FakeMergeRequest] = {}
        self.requests: list[Request] = []
        self.quota = 0
        """Answers that were not 304: what GitLab would count."""
        self.fail_next_merge: int | None = None
        """Answer the next merge call with this status, after merging when `fail_applies` (the
        answer was lost on the way back) or before (GitLab failed)."""
        self.fail_applies = True
        self.lock = threading.RLock()
        self.notes: list[tuple[int, str]] = []
        """Notes posted on a merge request outside any diff discussion: (iid, body)."""
        self.members = FakeMembers()
        """The project's members (`/members/all`), shared with a `FakeGitLab` it is mounted in."""
        self._ids = 0

    # What people, CI and GitLab do

    def record(self, iid: int) -> FakeMergeRequest:
        return self.merge_requests[iid]

    def push(self, iid: int, sha: str) -> None:
        """A new head commit, as after the daemon's push."""
        self.change(iid, sha=sha)

    def add_job(
        self,
        iid: int,
        name: str,
        status: str,
        *,
        trace: str | None = "",
        allow_failure: bool = False,
    ) -> FakeJob:
        """A job in the head commit's pipeline (created with the first job)."""
        with self.lock:
            item = self.merge_requests[iid]
            pipeline = item.head_pipeline()
            if pipeline is None:
                pipeline = FakePipeline(self._next_id(9000), item.sha)
                item.pipelines.append(pipeline)
            added = FakeJob(self._next_id(5000), name, status, allow_failure, trace)
            pipeline.jobs.append(added)
            item.version += 1
            return added

    def set_job(self, job: FakeJob, status: str, trace: str | None = None) -> None:
        with self.lock:
            job.status = status
            job.trace = job.trace if trace is None else trace
            for item in self.merge_requests.values():
                if any(job in pipeline.jobs for pipeline in item.pipelines):
                    item.version += 1  # its merge status follows the pipeline, as GitLab's

    def approve(self, iid: int, *users: str) -> None:
        with self.lock:
            self.merge_requests[iid].approved_by.extend(users)

    def add_discussion(
        self,
        iid: int,
        body: str,
        author: str = "amy",
        *,
        path: str | None = None,
        line: int | None = None,
        resolvable: bool = True,
    ) -> str:
        """A thread (on a line of the diff when `path` is given); returns its id."""
        with self.lock:
            position = payloads.position(path, line) if path is not None else None
            note = payloads.mr_note(
                self._next_id(),
                body,
                iid=iid,
                author=author,
                resolvable=resolvable,
                position=position,
                project_id=self.project_id,
            )
            discussion_id = hashlib.sha1(f"{iid}:{note['id']}".encode()).hexdigest()
            self.merge_requests[iid].discussions.append(FakeDiscussion(discussion_id, [note]))
            return discussion_id

    def resolve(self, iid: int, discussion_id: str) -> None:
        with self.lock:
            for note in self._discussion(iid, discussion_id).notes:
                if note["resolvable"]:
                    note.update(resolved=True, resolved_by=payloads.user("amy"))
                    note.update(resolved_at=payloads.STAMP)

    def merge_from_outside(self, iid: int) -> None:
        with self.lock:
            self._merge(self.merge_requests[iid], squash=False)

    def change(self, iid: int, **fields: Any) -> None:
        """Set fields as GitLab would show them (`state`, `has_conflicts`, ...)."""
        with self.lock:
            item = self.merge_requests[iid]
            for key, value in fields.items():
                setattr(item, key, value)
            item.version += 1

    # Rendering

    def body_of(self, item: FakeMergeRequest, *, full: bool = True) -> dict[str, Any]:
        pipeline = item.pipelines[-1].status() if item.pipelines else None
        required = item.approvals_required or 0
        detailed = item.detailed_merge_status or (
            "not_open"
            if item.state != "opened"
            else "conflict"
            if item.has_conflicts
            else "draft_status"
            if item.draft
            else "ci_still_running"
            if pipeline == "running"
            else "not_approved"
            if len(item.approved_by) < required
            else "mergeable"
        )
        basic = payloads.merge_request(
            item.iid,
            title=item.title,
            description=item.description,
            source_branch=item.source_branch,
            target_branch=item.target_branch,
            sha=item.sha,
            state=item.state,
            labels=item.labels,
            draft=item.draft,
            has_conflicts=item.has_conflicts,
            detailed_merge_status=detailed,
            merge_commit_sha=item.merge_commit_sha,
            squash_commit_sha=item.squash_commit_sha,
            squash=item.squash,
            project=self.project,
            project_id=self.project_id,
            source_project_id=item.source_project_id,
            base=self.base,
            updated_at=f"2026-01-02T03:{item.version // 60 % 60:02d}:{item.version % 60:02d}Z",
        )
        if not full:
            return basic
        head = item.head_pipeline()
        pipeline = self._pipeline(item, head) if head is not None else None
        return payloads.merge_request_full(basic, pipeline)

    def _pipeline(
        self, item: FakeMergeRequest, pipeline: FakePipeline, full: bool = True
    ) -> dict[str, Any]:
        return payloads.pipeline(
            pipeline.id,
            pipeline.sha,
            pipeline.status(),
            ref=item.source_branch,
            project=self.project,
            project_id=self.project_id,
            base=self.base,
            full=full,
        )

    # Serving

    def transport(self) -> httpx.MockTransport:
        def answer(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content) if request.content else None
            headers = {k.lower(): v for k, v in request.headers.items()}
            target = request.url.raw_path.decode()
            status, out, answer = self.handle(request.method, target, headers, body)
            if isinstance(answer, bytes):
                return httpx.Response(status, headers=out, content=answer)
            if answer is None:
                return httpx.Response(status, headers=out)
            return httpx.Response(status, headers=out, json=answer)

        return httpx.MockTransport(answer)

    def serves(self, path: str) -> bool:
        """Whether `path` is the project itself or one of the resources this fake holds."""
        found = re.fullmatch(r"/api/v4/projects/([^/]+)(/.*)?", path)
        if found is None or unquote(found.group(1)) not in (self.project, str(self.project_id)):
            return False
        rest = found.group(2) or ""
        return rest == "" or rest.startswith(
            ("/merge_requests", "/pipelines/", "/jobs/", "/members/all")
        )

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        """One request: `(status, headers, answer)`; the answer is JSON, or bytes (a log)."""
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        with self.lock:
            if headers.get("private-token") != self.token:
                status, out, answer = 401, {}, payloads.error("401 Unauthorized")
            elif not self.serves(parts.path):
                status, out, answer = 404, {}, payloads.error("404 Project Not Found")
            else:
                status, out, answer = self._route(method, parts.path, query, body or {})
            if method == "GET" and status == 200:
                data = answer if isinstance(answer, bytes) else json.dumps(answer, sort_keys=True)
                etag = 'W/"' + hashlib.sha1(str(data).encode()).hexdigest() + '"'
                out = {**out, "ETag": etag}
                if headers.get("if-none-match") == etag:
                    status, answer = 304, None
            if status != 304:
                self.quota += 1
            self.requests.append(Request(method, parts.path, query, status, body, answer))
            return status, out, answer

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        rest = re.sub(r"^/api/v4/projects/[^/]+", "", path)
        members = self.members.handle(method, rest, query)
        if members is not None:
            return members
        if rest == "" and method == "GET":
            return (
                200,
                {},
                payloads.project(
                    self.project,
                    self.project_id,
                    default_branch=self.default_branch,
                    base=self.base,
                ),
            )
        if rest == "/merge_requests" and method == "GET":
            return 200, {}, self._listed(query)
        if rest == "/merge_requests" and method == "POST":
            return self._open(body)
        found = re.fullmatch(r"/pipelines/(\d+)/jobs", rest)
        if found is not None and method == "GET":
            return self._jobs(int(found.group(1)), query)
        found = re.fullmatch(r"/jobs/(\d+)/trace", rest)
        if found is not None and method == "GET":
            job = self._job(int(found.group(1)))
            if job is None:
                return 404, {}, payloads.error("404 Not found")
            if job[1].trace is None:
                return 403, {}, payloads.error("403 Forbidden")
            return 200, {"Content-Type": "text/plain"}, job[1].trace.encode()
        found = re.fullmatch(r"/merge_requests/(\d+)(/.*)?", rest)
        if found is None or int(found.group(1)) not in self.merge_requests:
            return 404, {}, payloads.error("404 Not found")
        item = self.merge_requests[int(found.group(1))]
        tail = found.group(2) or ""
        if tail == "" and method == "GET":
            return 200, {}, self.body_of(item)
        if tail == "" and method == "PUT":
            return self._update(item, body)
        if tail == "/merge" and method == "PUT":
            return self._merge_call(item, body)
        if tail == "/approvals" and method == "GET":
            given = list(dict.fromkeys(item.approved_by))
            required = item.approvals_required
            left = None if required is None else max(required - len(given), 0)
            return 200, {}, payloads.approvals(given, required, left)
        if tail == "/discussions" and method == "GET":
            everything = [payloads.discussion(d.id, d.notes) for d in item.discussions]
            return self._page(everything, query)
        if tail == "/discussions" and method == "POST":
            return self._new_discussion(item, body)
        if tail == "/notes" and method == "POST":
            note = payloads.mr_note(
                self._next_id(), body["body"], iid=item.iid, author="symphony-bot",
                project_id=self.project_id, resolvable=False,
            )  # fmt: skip
            self.notes.append((item.iid, body["body"]))
            return 201, {}, note
        reply = re.fullmatch(r"/discussions/([0-9a-f]+)/notes", tail)
        if reply is not None and method == "POST":
            return self._reply(item, reply.group(1), body)
        return 404, {}, payloads.error("404 Not found")

    def _listed(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        branch = query.get("source_branch", [None])[0]
        state = query.get("state", ["all"])[0]
        found = [
            item
            for item in self.merge_requests.values()
            if (branch is None or item.source_branch == branch)
            and (state == "all" or item.state == state)
        ]
        newest_first = query.get("sort", ["desc"])[0] == "desc"
        found.sort(key=lambda item: item.iid, reverse=newest_first)
        return [self.body_of(item, full=False) for item in found]

    def _open(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        missing = [k for k in ("source_branch", "target_branch", "title") if not body.get(k)]
        if missing:
            return 400, {}, {"error": f"{missing[0]} is missing"}
        if body["target_branch"] not in self.branches:
            return (
                400,
                {},
                payloads.error([f"Target branch {body['target_branch']} does not exist"]),
            )
        for item in self.merge_requests.values():
            if item.source_branch == body["source_branch"] and item.state == "opened":
                why = (
                    f"Another open merge request already exists for this source branch: !{item.iid}"
                )
                return 409, {}, payloads.error([why])
        iid = max(self.merge_requests, default=0) + 1
        labels = [x.strip() for x in str(body.get("labels") or "").split(",") if x.strip()]
        item = FakeMergeRequest(
            iid,
            body["title"],
            str(body.get("description") or ""),
            body["source_branch"],
            body["target_branch"],
            sha=f"{iid:02d}" + "a" * 38,
            labels=labels,
        )
        self.merge_requests[iid] = item
        return 201, {}, self.body_of(item)

    def _update(
        self, item: FakeMergeRequest, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        target = body.get("target_branch", item.target_branch)
        if target not in self.branches:
            return 400, {}, payloads.error([f"Target branch {target} does not exist"])
        item.title = str(body.get("title", item.title))
        item.description = str(body.get("description", item.description))
        item.target_branch = target
        item.version += 1
        return 200, {}, self.body_of(item)

    def _merge_call(
        self, item: FakeMergeRequest, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        if item.state != "opened" or item.draft:
            return 405, {}, payloads.error("405 Method Not Allowed")
        if item.has_conflicts:
            return 406, {}, payloads.error("Branch cannot be merged")
        if body.get("sha") is not None and body["sha"] != item.sha:
            return 409, {}, payloads.error("SHA does not match HEAD of source branch: " + item.sha)
        failure, self.fail_next_merge = self.fail_next_merge, None
        if failure is None or self.fail_applies:
            self._merge(item, squash=body.get("squash") is True)
        if failure is not None:
            return failure, {}, payloads.error(f"{failure} Bad Gateway")
        return 200, {}, self.body_of(item)

    def _merge(self, item: FakeMergeRequest, squash: bool) -> None:
        item.state = "merged"
        item.squash = squash
        item.squash_commit_sha = f"{item.iid:02d}" + "5" * 38 if squash else None
        item.merge_commit_sha = f"{item.iid:02d}" + "m" * 38 if not squash else None
        item.version += 1

    def _reply(
        self, item: FakeMergeRequest, discussion_id: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        if not str(body.get("body") or "").strip():
            return 400, {}, {"error": "body is missing"}
        try:
            discussion = self._discussion(item.iid, discussion_id)
        except KeyError:
            return 404, {}, payloads.error("404 Discussion Not Found")
        note = payloads.mr_note(
            self._next_id(),
            body["body"],
            iid=item.iid,
            author="symphony-bot",
            project_id=self.project_id,
        )
        discussion.notes.append(note)
        item.version += 1
        return 201, {}, note

    def _new_discussion(
        self, item: FakeMergeRequest, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        """A diff discussion: its position must name the merge request's diff_refs, one path
        and a line on one side, as GitLab requires of a text position."""
        position = body.get("position") or {}
        refs = payloads.merge_request_full(self.body_of(item, full=False), None)["diff_refs"]
        wrong = [k for k, v in refs.items() if position.get(k) != v]
        lines = [position.get("new_line"), position.get("old_line")]
        if (
            wrong or position.get("position_type") != "text" or not position.get("new_path")
            or sum(isinstance(n, int) for n in lines) != 1 or not str(body.get("body")).strip()
        ):  # fmt: skip
            return 400, {}, {"message": {"position": ["is invalid"]}}
        if "line_range" in position and not _valid_range(position):
            return 400, {}, {"message": {"position": ["line_range is invalid"]}}
        note = payloads.mr_note(
            self._next_id(), body["body"], iid=item.iid, author="symphony-bot",
            project_id=self.project_id, position={**position, "old_line": lines[1],
                                                  "new_line": lines[0]},
        )  # fmt: skip
        discussion_id = hashlib.sha1(f"{item.iid}:{note['id']}".encode()).hexdigest()
        item.discussions.append(FakeDiscussion(discussion_id, [note]))
        item.version += 1
        return 201, {}, payloads.discussion(discussion_id, [note])

    def _discussion(self, iid: int, discussion_id: str) -> FakeDiscussion:
        for discussion in self.merge_requests[iid].discussions:
            if discussion.id == discussion_id:
                return discussion
        raise KeyError(discussion_id)

    def _job(self, job_id: int) -> tuple[FakeMergeRequest, FakeJob, FakePipeline] | None:
        for item in self.merge_requests.values():
            for pipeline in item.pipelines:
                for job in pipeline.jobs:
                    if job.id == job_id:
                        return item, job, pipeline
        return None

    def _jobs(
        self, pipeline_id: int, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], Any]:
        for item in self.merge_requests.values():
            for pipeline in item.pipelines:
                if pipeline.id == pipeline_id:
                    basic = self._pipeline(item, pipeline, full=False)
                    everything = [
                        payloads.job(
                            j.id,
                            j.name,
                            j.status,
                            pipeline=basic,
                            allow_failure=j.allow_failure,
                            project=self.project,
                            base=self.base,
                        )
                        for j in pipeline.jobs
                    ]
                    return self._page(everything, query)
        return 404, {}, payloads.error("404 Not found")

    def _page(
        self, everything: list[Any], query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], Any]:
        per_page = min(int(query.get("per_page", ["20"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        more = page * per_page < len(everything)
        headers = {"x-page": str(page), "x-next-page": str(page + 1) if more else ""}
        return 200, headers, everything[(page - 1) * per_page : page * per_page]

    def _next_id(self, start: int = 1) -> int:
        self._ids += 1
        return start + self._ids


def _valid_range(position: dict[str, Any]) -> bool:
    """A `line_range` as GitLab documents it: `start` and `end`, each with a `line_code`
    (`<sha1 of the path>_<old line>_<new line>`) and a `type` (`new` or `old`) whose line is the
    one the code names on that side; the end is the position's own line, the start before it."""
    spans = position["line_range"]
    path = str(position.get("new_path"))
    numbers = []
    for end in ("start", "end"):
        item = spans.get(end) if isinstance(spans, dict) else None
        if not isinstance(item, dict) or item.get("type") not in ("new", "old"):
            return False
        side = item["type"]
        code = re.fullmatch(r"([0-9a-f]{40})_(\d+)_(\d+)", str(item.get("line_code")))
        if code is None or code.group(1) != hashlib.sha1(path.encode()).hexdigest():
            return False
        number = int(code.group(3 if side == "new" else 2))
        if item.get(f"{side}_line", number) != number:
            return False
        numbers.append((side, number))
    (start_side, start), (end_side, end_line) = numbers
    own = position.get(f"{end_side}_line")
    return start_side == end_side and own == end_line and start < end_line

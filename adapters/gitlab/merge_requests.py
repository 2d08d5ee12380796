"""`GitLabMergeRequests`: the code host of one GitLab project, for the daemon's merge requests.

REST v4 over the shared HTTP client (retries, rate limits, conditional GETs) with the daemon's
own token from `repository:`. Publishing finds the branch's newest merge request
(`GET .../merge_requests?source_branch=`), opens one (`POST`, "Draft: " before the title of a
draft, as GitLab marks drafts) or brings its title, description and target up to date (`PUT`).
Following reads the merge request, its approvals, its discussions and its head pipeline's jobs,
each a conditional GET: when all of them answer 304 the previous reading is returned as it was,
and a failed job's log is fetched once per job and commit. Merging is one `PUT .../merge` at the
head commit the policy judged, never sent twice; when its answer is lost, the merge request is
read back to learn whether it merged. GitLab's refusals (400, 405, 406, 409, 422) are
`code_host_rejected` in GitLab's words; every other failure keeps the category of the client's
error, renamed once here.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from symphony.codehost.contract import (
    CHECK_OUTPUT_CHARS,
    CODE_HOST_HEAD_MOVED,
    CODE_HOST_RATE_LIMITED,
    CODE_HOST_REJECTED,
    CODE_HOST_RESPONSE,
    Check,
    CheckState,
    CodeHostError,
    Merged,
    PostedReview,
    PullRequest,
    PullRequestDraft,
    PullState,
    PullStatus,
    Review,
    ReviewComment,
    ReviewDecision,
    ReviewDraft,
    ReviewThread,
)
from symphony.config.repository import MergeMethod, RepositorySettings
from symphony.tracker.contract import TRACKER_RATE_LIMITED, TrackerError

from .._support.http import Response
from .._support.normalize import as_int, text_or_none
from . import review_posting
from .members import ProjectMembers, author_id
from .reads import next_page
from .tracker import gitlab_client

DRAFT_PREFIX = "Draft: "
"""What GitLab reads as "this merge request is a draft" at the start of a title."""
MAX_TITLE_CHARS = 255  # GitLab's limit on a merge request title
MAX_DESCRIPTION_CHARS = 1_048_576  # GitLab's limit on a description
MAX_NOTE_CHARS = 1_000_000  # GitLab's limit on a note
PER_PAGE = 100  # GitLab's maximum
MAX_PAGES = 20
"""Guards against a listing of discussions or jobs that never ends (2,000 entries)."""
PIPELINE_CHECK = "pipeline"
"""The check that stands for the head pipeline while it has no job to show."""

_REFUSALS = (400, 405, 406, 409, 422)
"""GitLab's answers to a write it will not do as asked: invalid (400, 422), an open merge
request of the branch exists already (409), not mergeable now (405, 406), the head moved (409
to a merge)."""

_CHECK_STATES: Mapping[str, CheckState] = {
    **dict.fromkeys(
        (
            "created",
            "pending",
            "running",
            "waiting_for_resource",
            "preparing",
            "scheduled",
            "manual",
            "canceling",
        ),
        CheckState.PENDING,
    ),
    **dict.fromkeys(("success", "skipped"), CheckState.PASSED),
    **dict.fromkeys(("failed", "canceled"), CheckState.FAILED),
}
"""A job's (or a pipeline's) status as a check. A status GitLab adds later is pending: it
keeps following waiting (a pending check times out into a comment) rather than judging."""

_CONFLICTING = frozenset({"conflict", "need_rebase"})
_UNSETTLED = frozenset({"checking", "unchecked", "preparing"})
_UNSETTLED_LEGACY = frozenset({"unchecked", "checking", "cannot_be_merged_recheck"})
_WAITS_FOR_PIPELINE = frozenset({"ci_must_pass", "ci_still_running"})

# Escape sequences a job log carries for the terminal: CSI (colours, `ESC[0K`), OSC, and the
# two-byte ones; and GitLab's collapsible section markers (`section_start:<time>:<name>\r`).
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_SECTIONS = re.compile(r"section_(?:start|end):\d+:[^\r\n]*?\r")
_RAW_LOG_CHARS = 16 * CHECK_OUTPUT_CHARS
"""How much of a log's end is cleaned: enough for the kept end after escapes are dropped."""


@dataclass(slots=True)
class _Reading:
    """The last reading of one merge request, and the logs of its failed jobs."""

    status: PullStatus
    logs: dict[tuple[int, str], str | None]
    """(job id, commit) -> the end of the job's log; None when GitLab would not give it."""


class GitLabMergeRequests:
    def __init__(
        self,
        repository: RepositorySettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.repository = repository
        self.http = gitlab_client(
            repository.api_url, repository.token, transport=transport, sleep=sleep
        )
        # A path (`group/sub/project`) is one URL segment, its slashes encoded; an id is itself.
        self._project = f"/projects/{quote(repository.slug.strip('/'), safe='')}"
        self.members = ProjectMembers(self.http, self._project, clock=clock)
        self._readings: dict[int, _Reading] = {}

    def _merge_request(self, number: int) -> str:
        return f"{self._project}/merge_requests/{number}"

    # Publishing

    async def default_branch(self) -> str:
        with _as_code_host_error():
            answer = await self.http.request("GET", self._project, conditional=True)
        branch = answer.body.get("default_branch") if isinstance(answer.body, Mapping) else None
        if not isinstance(branch, str) or not branch:
            raise CodeHostError(
                CODE_HOST_RESPONSE,
                f"GitLab named no default branch of {self.repository.slug} (an empty project?)",
            )
        return branch

    async def find_pull_request(self, branch: str) -> PullRequest | None:
        params = {
            "source_branch": branch,
            "state": "all",
            "order_by": "created_at",
            "sort": "desc",
            "per_page": 20,
        }
        with _as_code_host_error():
            answer = await self.http.request(
                "GET", f"{self._project}/merge_requests", params=params, conditional=True
            )
        if not isinstance(answer.body, list):
            raise CodeHostError(CODE_HOST_RESPONSE, "GitLab's merge request list is not a list")
        found = [_pull(item) for item in answer.body if _from_this_project(item)]
        return max(found, key=lambda pull: pull.number) if found else None

    async def open_pull_request(self, draft: PullRequestDraft, base: str) -> PullRequest:
        body: dict[str, Any] = {
            "source_branch": draft.branch,
            "target_branch": base,
            "title": _title(draft),
            "description": draft.body[:MAX_DESCRIPTION_CHARS],
        }
        if draft.labels:
            body["labels"] = ",".join(draft.labels)
        with _as_code_host_error():
            answer = await self.http.request(
                "POST", f"{self._project}/merge_requests", json_body=body, ok=(201, *_REFUSALS)
            )
        _refused(answer, f"opening a merge request from {draft.branch}")
        return _pull(answer.body)

    async def update_pull_request(
        self, number: int, draft: PullRequestDraft, base: str
    ) -> PullRequest:
        body = {
            "title": _title(draft),
            "description": draft.body[:MAX_DESCRIPTION_CHARS],
            "target_branch": base,
        }
        with _as_code_host_error():
            answer = await self.http.request(
                "PUT", self._merge_request(number), json_body=body, ok=(200, *_REFUSALS)
            )
        _refused(answer, f"updating merge request !{number}")
        return _pull(answer.body)

    # Following

    async def read_status(self, number: int) -> PullStatus:
        """The merge request, its approvals, unresolved discussions and head pipeline's jobs.

        Each read is conditional; when every one answers 304 the previous reading stands, so
        an unchanged merge request costs GitLab's quota nothing and no log is fetched again."""
        path = self._merge_request(number)
        with _as_code_host_error():
            mr = await self.http.request("GET", path, conditional=True)
            record = _record(mr.body, "merge request")
            approvals = await self.http.request("GET", f"{path}/approvals", conditional=True)
            discussions, discussions_unchanged = await self._list(f"{path}/discussions")
            pipeline = _pipeline_of(record)
            jobs: list[Any] = []
            jobs_unchanged = True
            if pipeline is not None and pipeline.get("sha") == record.get("sha"):
                jobs, jobs_unchanged = await self._list(
                    f"{self._project}/pipelines/{pipeline['id']}/jobs"
                )
        previous = self._readings.get(number)
        unchanged = mr.from_cache and approvals.from_cache
        if previous is not None and unchanged and discussions_unchanged and jobs_unchanged:
            return previous.status
        known = previous.logs if previous is not None else {}
        logs: dict[tuple[int, str], str | None] = {}
        approved_by, required, left = _approvals(approvals.body)
        with _as_code_host_error():
            checks = await self._checks(record, pipeline, jobs, known, logs)
            member = await self.members.of([*_authors(discussions), *approved_by.values()])
        status = PullStatus(
            pull=_pull(record),
            mergeable=_mergeable(record),
            review_decision=_decision(record, tuple(approved_by), required, left),
            checks=checks,
            threads=_threads(discussions, member),
            reviews=tuple(
                Review(name, "approved", author_member=member.get(user) if user else None)
                for name, user in approved_by.items()
            ),
            labels=_labels(record),
            approvals_required=required,
            merge_allowed=_merge_allowed(record),
            merge_state=_merge_state(record),
        )
        self._readings[number] = _Reading(status, logs)
        return status

    async def _list(self, path: str) -> tuple[list[Any], bool]:
        """Every entry of a GitLab listing, and whether every page answered 304."""
        url: str = path
        params: dict[str, Any] = {"per_page": PER_PAGE}
        entries: list[Any] = []
        unchanged = True
        for _ in range(MAX_PAGES):
            answer = await self.http.request("GET", url, params=params, conditional=True)
            if not isinstance(answer.body, list):
                raise CodeHostError(CODE_HOST_RESPONSE, f"GitLab {path} did not answer a list")
            entries.extend(answer.body)
            unchanged = unchanged and answer.from_cache
            following = next_page(answer.headers, url, params)
            if following is None:
                return entries, unchanged
            url, params = following[0], dict(following[1] or {})
        raise CodeHostError(CODE_HOST_RESPONSE, f"GitLab {path} has more than {MAX_PAGES} pages")

    async def _checks(
        self,
        record: Mapping[str, Any],
        pipeline: Mapping[str, Any] | None,
        jobs: Sequence[Any],
        known: Mapping[tuple[int, str], str | None],
        logs: dict[tuple[int, str], str | None],
    ) -> tuple[Check, ...]:
        """The head pipeline's jobs as checks, each failed one with the end of its log.

        A head pipeline of another commit means the head's own has not been created yet (it is
        pending); one without jobs stands for itself; no pipeline at all is no check, unless
        the project requires a pipeline to pass (then GitLab says it waits for one)."""
        sha = text_or_none(record.get("sha")) or ""
        if pipeline is None:
            if record.get("detailed_merge_status") in _WAITS_FOR_PIPELINE:
                return (Check(PIPELINE_CHECK, CheckState.PENDING, required=True),)
            return ()
        url = text_or_none(pipeline.get("web_url"))
        if pipeline.get("sha") != sha:
            return (Check(PIPELINE_CHECK, CheckState.PENDING, required=True, url=url),)
        status = _CHECK_STATES.get(str(pipeline.get("status")), CheckState.PENDING)
        if not jobs:
            errors = text_or_none(pipeline.get("yaml_errors"))
            output = log_end(errors) if errors and status is CheckState.FAILED else None
            return (Check(PIPELINE_CHECK, status, required=True, url=url, output=output),)
        checks: list[Check] = []
        for job in jobs:
            if not isinstance(job, Mapping) or as_int(job.get("id")) is None:
                continue
            tolerated = job.get("allow_failure") is True
            state = _CHECK_STATES.get(str(job.get("status")), CheckState.PENDING)
            if state is CheckState.FAILED and tolerated:
                state = CheckState.PASSED  # GitLab lets the pipeline pass with it
            output = None
            if state is CheckState.FAILED:
                output = await self._log(int(job["id"]), sha, known, logs)
            checks.append(
                Check(
                    name=text_or_none(job.get("name")) or f"job {job['id']}",
                    state=state,
                    required=not tolerated,
                    url=text_or_none(job.get("web_url")),
                    output=output,
                )
            )
        return tuple(checks)

    async def _log(
        self,
        job_id: int,
        sha: str,
        known: Mapping[tuple[int, str], str | None],
        logs: dict[tuple[int, str], str | None],
    ) -> str | None:
        """The end of a failed job's log, fetched once per job and commit. A log GitLab will
        not give (403: hidden, 404: erased) is remembered as None; another failure is asked
        again at the next changed reading."""
        key = (job_id, sha)
        if key in known:
            logs[key] = known[key]
            return logs[key]
        try:
            answer = await self.http.request(
                "GET", f"{self._project}/jobs/{job_id}/trace", ok=(200, 403, 404), text=True
            )
        except TrackerError as exc:
            if exc.category == TRACKER_RATE_LIMITED:
                raise
            return None
        log = log_end(answer.body) if answer.status == 200 else None
        logs[key] = log
        return log

    # Merging and replying

    async def merge(self, number: int, head_sha: str, method: MergeMethod) -> Merged:
        """Merge `number` at `head_sha` (GitLab refuses with 409 when the head moved).

        `squash` asks GitLab to squash. How the rest lands on the target (a merge commit,
        fast-forward, a rebase first) is the project's merge method, a setting of the project
        rather than of the call: `merge` and `rebase` both ask for a plain merge, and the
        project's setting decides. The call is sent once: after a lost answer or a 5xx it may
        have merged, so the merge request is read back instead."""
        body = {
            "sha": head_sha,
            "squash": method is MergeMethod.SQUASH,
            "merge_when_pipeline_succeeds": False,  # now, as judged; not when GitLab decides
        }
        path = self._merge_request(number)
        try:
            with _as_code_host_error():
                answer = await self.http.request(
                    "PUT", f"{path}/merge", json_body=body, ok=(200, *_REFUSALS), idempotent=False
                )
        except CodeHostError as exc:
            if exc.category == CODE_HOST_RATE_LIMITED:
                raise
            merged = await self._read_back(number)
            if merged is None:
                raise
            return merged
        if answer.status == 409:
            said = _message(answer.body) or "the head moved"
            raise CodeHostError(CODE_HOST_HEAD_MOVED, f"GitLab did not merge !{number}: {said}")
        _refused(answer, f"merging merge request !{number}")
        record = _record(answer.body, "merge request")
        if record.get("state") == "merged":
            return _merged(record)
        merged = await self._read_back(number)
        if merged is not None:
            return merged
        why = text_or_none(record.get("merge_error")) or f"state {record.get('state')!r}"
        raise CodeHostError(
            CODE_HOST_RESPONSE, f"GitLab accepted the merge of !{number} but did not merge: {why}"
        )

    async def _read_back(self, number: int) -> Merged | None:
        """Merged when the merge request reads merged now; None when not, or unreadable."""
        try:
            with _as_code_host_error():
                answer = await self.http.request("GET", self._merge_request(number))
            record = _record(answer.body, "merge request")
        except CodeHostError:
            return None
        return _merged(record) if record.get("state") == "merged" else None

    async def reply_to_thread(self, number: int, thread_id: str, body: str) -> None:
        path = f"{self._merge_request(number)}/discussions/{quote(thread_id, safe='')}/notes"
        with _as_code_host_error():
            await self.http.request(
                "POST", path, json_body={"body": body[:MAX_NOTE_CHARS]}, ok=(201,)
            )

    async def submit_review(self, number: int, review: ReviewDraft) -> PostedReview:
        """The note, then a diff discussion per comment on the merge request's `diff_refs`
        (the verdict is the note's words: GitLab's approvals are a person's own)."""
        path = self._merge_request(number)
        with _as_code_host_error():
            refs = review_posting.diff_refs(_record((await self.http.request(
                "GET", path)).body, "merge request"), number)  # fmt: skip
            if review.body.strip():
                await self.http.request(
                    "POST", f"{path}/notes",
                    json_body={"body": review.body[:MAX_NOTE_CHARS]}, ok=(201,),
                )  # fmt: skip
            threads = []
            for comment in review.comments:
                answer = await self.http.request(
                    "POST", f"{path}/discussions",
                    json_body=review_posting.discussion_request(comment, refs), ok=(201,),
                )  # fmt: skip
                threads.append(review_posting.discussion_id(answer.body))
        return PostedReview(tuple(threads))

    async def approvals_required(self, base: str) -> int | None:
        return None  # GitLab's approval rules are read per merge request (its approvals)

    async def aclose(self) -> None:
        await self.http.aclose()


# GitLab's records in the daemon's words


def _record(body: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise CodeHostError(CODE_HOST_RESPONSE, f"GitLab's {what} record is not an object")
    return body


_PULL_STATES: Mapping[str, PullState] = {
    "opened": PullState.OPEN,
    # `locked` is GitLab's state while a merge is under way: not closed, about to be merged.
    "locked": PullState.OPEN,
    "merged": PullState.MERGED,
    "closed": PullState.CLOSED,
}


def _pull(item: Any) -> PullRequest:
    """A pull request from GitLab's `API_Entities_MergeRequest(Basic)` record."""
    record = _record(item, "merge request")
    number = as_int(record.get("iid"))
    state = _PULL_STATES.get(str(record.get("state")))
    if number is None or state is None:
        raise CodeHostError(CODE_HOST_RESPONSE, "GitLab's merge request has no iid or state")
    return PullRequest(
        number=number,
        url=text_or_none(record.get("web_url")) or "",
        branch=text_or_none(record.get("source_branch")) or "",
        base=text_or_none(record.get("target_branch")) or "",
        state=state,
        title=text_or_none(record.get("title")) or "",
        draft=record.get("draft") is True or record.get("work_in_progress") is True,
        head_sha=text_or_none(record.get("sha")),
    )


def _from_this_project(item: Any) -> bool:
    """A merge request from a fork may name a branch of the same name: it is not the daemon's."""
    if not isinstance(item, Mapping):
        return True  # `_pull` says what is wrong with it
    source, target = item.get("source_project_id"), item.get("target_project_id")
    return source is None or target is None or source == target


def _title(draft: PullRequestDraft) -> str:
    title = draft.title
    if draft.draft and not title.lower().startswith(("draft:", "[draft]", "(draft)")):
        title = DRAFT_PREFIX + title
    return title[:MAX_TITLE_CHARS]


def _labels(record: Mapping[str, Any]) -> tuple[str, ...]:
    labels = record.get("labels")
    if not isinstance(labels, list):
        return ()
    # Plain names, or label objects when asked `with_labels_details`.
    names = (x.get("name") if isinstance(x, Mapping) else x for x in labels)
    return tuple(name for name in names if isinstance(name, str) and name)


def _pipeline_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The head pipeline (`head_pipeline`; `pipeline` on older instances), when it has an id."""
    for key in ("head_pipeline", "pipeline"):
        pipeline = record.get(key)
        if isinstance(pipeline, Mapping) and as_int(pipeline.get("id")) is not None:
            return pipeline
    return None


def _merge_state(record: Mapping[str, Any]) -> str | None:
    detailed = record.get("detailed_merge_status") or record.get("merge_status")
    return detailed if isinstance(detailed, str) else None


def _merge_allowed(record: Mapping[str, Any]) -> bool | None:
    """Whether GitLab would merge now: `detailed_merge_status` `mergeable` (None where only
    the older `merge_status` is given, which says nothing of approvals or pipelines)."""
    detailed = record.get("detailed_merge_status")
    if isinstance(detailed, str):
        return detailed == "mergeable"
    return None


def _mergeable(record: Mapping[str, Any]) -> bool | None:
    """False when it conflicts with its target (or must be rebased onto it first); None while
    GitLab is still computing that. `detailed_merge_status` is newer; `merge_status` older."""
    if record.get("has_conflicts") is True:
        return False
    detailed = record.get("detailed_merge_status")
    if isinstance(detailed, str):
        if detailed in _CONFLICTING:
            return False
        return None if detailed in _UNSETTLED else True
    legacy = record.get("merge_status")
    if legacy == "cannot_be_merged":
        return False
    return None if legacy in _UNSETTLED_LEGACY else True


def _approvals(body: Any) -> tuple[dict[str, int | None], int | None, int | None]:
    """(who approved, with their user ids; approvals required; approvals still missing) from
    `.../approvals`.

    The two counts come with GitLab's approval rules (every gitlab.com project has them); an
    instance without them (the open source edition) names neither, and None says so."""
    record = _record(body, "approvals")
    entries = record.get("approved_by")
    names: dict[str, int | None] = {}
    for entry in entries if isinstance(entries, list) else []:
        user = entry.get("user") if isinstance(entry, Mapping) else None
        name = text_or_none(user.get("username")) if isinstance(user, Mapping) else None
        if name is not None and name not in names:
            names[name] = author_id(user)
    required = as_int(record.get("approvals_required"))
    left = as_int(record.get("approvals_left"))
    if left is None and required is not None:
        left = max(required - len(names), 0)
    return names, required, left


def _decision(
    record: Mapping[str, Any], approved_by: Sequence[str], required: int | None, left: int | None
) -> ReviewDecision:
    """GitLab's free tier has no "changes requested" verdict; newer instances say it in
    `detailed_merge_status` when a reviewer requested changes. Unresolved discussions are
    threads, not a decision."""
    detailed = record.get("detailed_merge_status")
    if detailed == "requested_changes":
        return ReviewDecision.CHANGES_REQUESTED
    if left is not None and left > 0:
        return ReviewDecision.REVIEW_REQUIRED
    if approved_by:
        return ReviewDecision.APPROVED
    if detailed == "not_approved" or (required is not None and required > 0):
        return ReviewDecision.REVIEW_REQUIRED
    return ReviewDecision.NONE


def _open_notes(discussion: Any) -> list[Mapping[str, Any]] | None:
    """The notes (system notes out) of a discussion a person can still resolve, else None."""
    if not isinstance(discussion, Mapping) or not text_or_none(discussion.get("id")):
        return None
    raw = discussion.get("notes")
    notes = [
        n
        for n in (raw if isinstance(raw, list) else [])
        if isinstance(n, Mapping) and n.get("system") is not True
    ]
    resolvable = [n for n in notes if n.get("resolvable") is True]
    if not resolvable or all(n.get("resolved") is True for n in resolvable):
        return None
    return notes


def _authors(discussions: Sequence[Any]) -> list[int | None]:
    """The user ids of the authors of the open discussions' notes."""
    return [author_id(n.get("author")) for d in discussions for n in _open_notes(d) or ()]


def _threads(
    discussions: Sequence[Any], member: Mapping[int, bool | None]
) -> tuple[ReviewThread, ...]:
    """The discussions a person can still resolve, each with its comments (system notes out)
    and whether their authors are members (`member`, by user id). The line is the first
    note's position: the new side, or the old one for a removed line."""
    threads: list[ReviewThread] = []
    for discussion in discussions:
        notes = _open_notes(discussion)
        if notes is None:
            continue
        position = notes[0].get("position")
        path = line = None
        if isinstance(position, Mapping):
            path = text_or_none(position.get("new_path")) or text_or_none(position.get("old_path"))
            line = as_int(position.get("new_line"))
            if line is None:
                line = as_int(position.get("old_line"))
        comments = tuple(
            ReviewComment(
                author=_username(n.get("author")),
                body=str(n.get("body") or ""),
                author_member=member.get(user) if (user := author_id(n.get("author"))) else None,
            )
            for n in notes
        )
        threads.append(ReviewThread(str(discussion["id"]), path, line, None, comments))
    return tuple(threads)


def _username(author: Any) -> str:
    name = author.get("username") if isinstance(author, Mapping) else None
    return name if isinstance(name, str) else ""


def _merged(record: Mapping[str, Any]) -> Merged:
    return Merged(
        sha=text_or_none(record.get("merge_commit_sha"))
        or text_or_none(record.get("squash_commit_sha"))
    )


def log_end(log: Any) -> str | None:
    """The end of a job's log as a person would read it on a terminal, at most
    `CHECK_OUTPUT_CHARS`: escape sequences and section markers dropped, and of a line
    rewritten in place (`\\r`, a progress bar) its last state."""
    if not isinstance(log, str):
        return None
    text = _SECTIONS.sub("", _ESCAPES.sub("", log[-_RAW_LOG_CHARS:]))
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        shown = [part for part in line.split("\r") if part]
        lines.append(shown[-1] if shown else "")
    end = "\n".join(lines).rstrip()[-CHECK_OUTPUT_CHARS:]
    return end or None


def _refused(answer: Response, doing: str) -> None:
    """A refusal the request let through (`ok`) as `code_host_rejected`, in GitLab's words."""
    if answer.status < 300:
        return
    raise CodeHostError(
        CODE_HOST_REJECTED,
        f"GitLab refused {doing} ({answer.status}): {_message(answer.body) or 'no reason given'}",
    )


def _message(body: Any) -> str:
    """GitLab's reason in one line: `message` or `error`, each a text, a list of texts, or
    field -> texts (`{"title": ["is too long"]}`)."""
    if isinstance(body, Mapping):
        for key in ("message", "error"):
            if key in body:
                return _message(body[key])
        parts = (f"{key} {_message(value)}".strip() for key, value in body.items())
        return "; ".join(parts)[:500]
    if isinstance(body, list):
        return "; ".join(filter(None, (_message(x) for x in body)))[:500]
    return str(body).strip()[:500] if body is not None else ""


@contextmanager
def _as_code_host_error() -> Iterator[None]:
    """The HTTP client's errors as the code host's: `tracker_status` -> `code_host_status`."""
    try:
        yield
    except TrackerError as exc:
        category = exc.category.replace("tracker_", "code_host_", 1)
        raise CodeHostError(category, exc.message) from None

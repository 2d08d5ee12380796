"""GitHub's records of a pull request's checks, reviews and threads, in the daemon's words.

Pure functions, no I/O: `pulls.GitHubPulls` reads the REST records (check runs, commit statuses,
reviews, review comments) and the one GraphQL answer (review decision, unresolved threads, which
checks the base branch requires), and these turn them into `Check`, `Review`, `ReviewThread`.
GitHub keeps two kinds of checks side by side: check runs (a status, then a conclusion) and
commit statuses (one state); both become a `Check` with the same three states, and a check is
`required` when GitHub says the base branch's rules name it for this pull request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from symphony.codehost.contract import (
    CHECK_OUTPUT_CHARS,
    Check,
    CheckState,
    Review,
    ReviewComment,
    ReviewDecision,
    ReviewThread,
)

from .._support.normalize import as_int, text_or_none
from .normalize import is_member

ACTIONS_APP = "github-actions"
"""The app slug of GitHub Actions' check runs, whose job log says why they failed."""

_RUN_PASSED = frozenset({"success", "neutral", "skipped"})
_RUN_FAILED = frozenset(
    {"failure", "timed_out", "cancelled", "action_required", "startup_failure", "stale"}
)
_STATUS_STATES = {
    "pending": CheckState.PENDING,
    "expected": CheckState.PENDING,
    "success": CheckState.PASSED,
    "failure": CheckState.FAILED,
    "error": CheckState.FAILED,
}
_REVIEW_STATES = {"APPROVED", "CHANGES_REQUESTED", "COMMENTED"}
_DECISIONS = {
    "APPROVED": ReviewDecision.APPROVED,
    "CHANGES_REQUESTED": ReviewDecision.CHANGES_REQUESTED,
    "REVIEW_REQUIRED": ReviewDecision.REVIEW_REQUIRED,
}
_MERGEABLE = {"MERGEABLE": True, "CONFLICTING": False}
_JOB_IN_URL = re.compile(r"/job/(\d+)(?:[/?#]|$)")
_CUT = "…"


def run_state(run: Mapping[str, Any]) -> CheckState:
    """A check run decides only once `completed`; a conclusion GitHub adds later, unknown here,
    is left undecided rather than guessed (it neither merges nor starts a fix)."""
    if run.get("status") != "completed":
        return CheckState.PENDING
    conclusion = run.get("conclusion")
    if conclusion in _RUN_PASSED:
        return CheckState.PASSED
    if conclusion in _RUN_FAILED:
        return CheckState.FAILED
    return CheckState.PENDING


def status_state(status: Mapping[str, Any]) -> CheckState:
    return _STATUS_STATES.get(str(status.get("state")), CheckState.PENDING)


def check_run(run: Mapping[str, Any], required: frozenset[str], output: str | None) -> Check:
    name = text_or_none(run.get("name")) or "check run"
    return Check(
        name=name,
        state=run_state(run),
        required=name in required,
        url=text_or_none(run.get("html_url")) or text_or_none(run.get("details_url")),
        output=output,
    )


def commit_status(status: Mapping[str, Any], required: frozenset[str]) -> Check:
    """A commit status says no more than its description and where to look."""
    name = text_or_none(status.get("context")) or "status"
    state = status_state(status)
    url = text_or_none(status.get("target_url"))
    said = [text_or_none(status.get("description")), url]
    output = (
        bounded("\n".join(part for part in said if part)) if state is CheckState.FAILED else None
    )
    return Check(name, state, name in required, url, output or None)


def run_description(run: Mapping[str, Any]) -> str:
    """What a check run reported of itself: its output's title, summary and text."""
    output = run.get("output")
    if not isinstance(output, Mapping):
        return ""
    parts = (text_or_none(output.get(key)) for key in ("title", "summary", "text"))
    return "\n\n".join(part.strip() for part in parts if part)


def annotations_of(run: Mapping[str, Any]) -> int:
    output = run.get("output")
    count = as_int(output.get("annotations_count")) if isinstance(output, Mapping) else None
    return count or 0


def annotation_lines(items: Iterable[Any]) -> str:
    """`path:line: message`, one an annotation: where a linter or a test runner pointed."""
    lines = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        where = text_or_none(item.get("path")) or "?"
        line = as_int(item.get("start_line"))
        message = (text_or_none(item.get("message")) or "").strip()
        lines.append(f"{where}:{line}: {message}" if line is not None else f"{where}: {message}")
    return "\n".join(lines)


def actions_job(run: Mapping[str, Any]) -> int | None:
    """The Actions job behind a check run, or None when another app ran it. Its details page
    names the job; failing that, an Actions check run's id is its job's id."""
    app = run.get("app")
    if not isinstance(app, Mapping) or app.get("slug") != ACTIONS_APP:
        return None
    found = _JOB_IN_URL.search(text_or_none(run.get("details_url")) or "")
    return int(found.group(1)) if found else as_int(run.get("id"))


def tail(text: str, limit: int) -> str:
    """The end of `text` in at most `limit` characters: a log says why it failed last."""
    if len(text) <= limit:
        return text
    if limit <= len(_CUT):
        return text[len(text) - max(limit, 0) :]
    return _CUT + text[len(text) - limit + len(_CUT) :]


def bounded(described: str, log: str = "") -> str:
    """A failed check's output within `CHECK_OUTPUT_CHARS`: what it said of itself (a quarter
    of the room at most when there is a log) followed by as much of the log's end as fits."""
    described, log = described.strip(), log.strip()
    if not log:
        return tail(described, CHECK_OUTPUT_CHARS)
    head = tail(described, CHECK_OUTPUT_CHARS // 4) + "\n\n" if described else ""
    return head + tail(log, CHECK_OUTPUT_CHARS - len(head))


def reviews(items: Iterable[Any]) -> tuple[Review, ...]:
    """Submitted reviews, oldest first; dismissed ones and a reviewer's pending draft say
    nothing yet."""
    found = []
    for item in items:
        if not isinstance(item, Mapping) or item.get("state") not in _REVIEW_STATES:
            continue
        user = item.get("user")
        author = text_or_none(user.get("login")) if isinstance(user, Mapping) else None
        body = item.get("body")
        found.append(
            Review(
                author=author or "ghost",
                state=str(item["state"]).lower(),
                body=body if isinstance(body, str) else "",
                author_member=is_member(item.get("author_association")),
            )
        )
    return tuple(found)


def labels(record: Mapping[str, Any]) -> tuple[str, ...]:
    items = record.get("labels")
    names = (
        text_or_none(label.get("name"))
        for label in (items if isinstance(items, list) else ())
        if isinstance(label, Mapping)
    )
    return tuple(name for name in names if name)


def follow_pull(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The `pullRequest` of a `PullRequestFollow` answer (empty when GitHub found none)."""
    repository = data.get("repository")
    pull = repository.get("pullRequest") if isinstance(repository, Mapping) else None
    return pull if isinstance(pull, Mapping) else {}


def _nodes(connection: Any) -> list[Mapping[str, Any]]:
    nodes = connection.get("nodes") if isinstance(connection, Mapping) else None
    return [node for node in nodes or () if isinstance(node, Mapping)]


def required_checks(pull: Mapping[str, Any]) -> frozenset[str]:
    """The names of the head commit's checks that the base branch requires (GitHub requires a
    check by its name: a check run's `name`, a commit status's `context`)."""
    names = set()
    for commit in _nodes(pull.get("commits")):
        head = commit.get("commit")
        rollup = head.get("statusCheckRollup") if isinstance(head, Mapping) else None
        contexts = rollup.get("contexts") if isinstance(rollup, Mapping) else None
        for context in _nodes(contexts):
            name = text_or_none(context.get("name")) or text_or_none(context.get("context"))
            if name and context.get("isRequired") is True:
                names.add(name)
    return frozenset(names)


def review_decision(pull: Mapping[str, Any]) -> ReviewDecision:
    return _DECISIONS.get(str(pull.get("reviewDecision")), ReviewDecision.NONE)


def mergeable(rest: Any, pull: Mapping[str, Any]) -> bool | None:
    """REST's answer when it has one; GraphQL's otherwise (either may still be computing)."""
    if isinstance(rest, bool):
        return rest
    return _MERGEABLE.get(str(pull.get("mergeable")))


MERGE_READY = frozenset({"clean", "unstable", "has_hooks"})
"""`mergeable_state` values with which GitHub merges now: `unstable` only has checks failing that
are not required (the daemon's own verdict weighs those)."""


def merge_allowed(state: Any) -> bool:
    """Whether GitHub would merge now by `mergeable_state`; `blocked` (rules unmet), `behind`,
    `dirty` (conflicts), `draft` and `unknown` (still computing, or missing) are no."""
    return isinstance(state, str) and state in MERGE_READY


def threads(pull: Mapping[str, Any], comments: Iterable[Any]) -> tuple[ReviewThread, ...]:
    """The unresolved review threads. GraphQL has no diff hunk, so a thread's is the REST review
    comment's with the same database id (every comment of a thread carries the thread's hunk)."""
    hunks: dict[int, str] = {}
    for item in comments:
        if isinstance(item, Mapping):
            comment_id, hunk = as_int(item.get("id")), text_or_none(item.get("diff_hunk"))
            if comment_id is not None and hunk:
                hunks[comment_id] = hunk
    found = []
    for node in _nodes(pull.get("reviewThreads")):
        thread_id = text_or_none(node.get("id"))
        if thread_id is None or node.get("isResolved") is not False:
            continue
        said = _nodes(node.get("comments"))
        ids = [_database_id(comment.get("fullDatabaseId")) for comment in said]
        found.append(
            ReviewThread(
                id=thread_id,
                path=text_or_none(node.get("path")),
                line=as_int(node.get("line")),
                diff_hunk=next((hunks[i] for i in ids if i in hunks), None),
                comments=tuple(_comment(comment) for comment in said),
                aliases=tuple(str(i) for i in ids if i is not None),
            )
        )
    return tuple(found)


def _comment(node: Mapping[str, Any]) -> ReviewComment:
    author = node.get("author")
    login = text_or_none(author.get("login")) if isinstance(author, Mapping) else None
    body = node.get("body")
    return ReviewComment(
        author=login or "ghost",
        body=body if isinstance(body, str) else "",
        author_member=is_member(node.get("authorAssociation")),
    )


def _database_id(value: Any) -> int | None:
    """A `BigInt`, which GitHub sends as a string of digits (or, small, as a number)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return as_int(value)

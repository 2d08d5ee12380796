"""Contract tests against GitLab's published REST description (tracker-schemas/gitlab).

The subset is reliable for names only (see tracker-schemas/README.md: list answers typed as one
issue, counters typed as strings, no `nullable`), so these tests check names:

- every request the adapter sends uses a path, method, query parameters and body fields that
  the subset defines;
- every body the fake answers with uses only field names of the subset's Issue schemas.

Notes (`POST /projects/{id}/issues/{issue_iid}/notes`) are absent from the subset; they are
checked against the shape GitLab's notes API documentation gives (`doc/api/notes.md`): body
field `body`, and the note fields in `payloads.NOTE_FIELDS`.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from symphony_adapters.gitlab.config import parse_config
from symphony_adapters.gitlab.tracker import GitLabTracker
from tests.adapters.gitlab import payloads
from tests.adapters.gitlab.fake_gitlab import FakeGitLab, serve
from tests.adapters.gitlab.helpers import session_issue

TOKEN = "glpat-contract_token_value"
NOTES = "/api/v4/projects/{id}/issues/{issue_iid}/notes"
NOTE_BODY_FIELDS = frozenset({"body", "internal", "created_at", "merge_request_diff_head_sha"})
"""The body of `POST …/notes` per GitLab's notes API documentation."""


@cache
def openapi(folder: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (folder / "gitlab" / "rest-issues-subset.openapi.json").read_text()
    )
    return spec


def operation(spec: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    for template, operations in spec["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            return template, operations[method.lower()]
    raise AssertionError(f"{method} {path} is not in the GitLab subset")


def query_parameters(op: dict[str, Any]) -> set[str]:
    return {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}


def properties(spec: dict[str, Any], name: str) -> set[str]:
    return set(spec["components"]["schemas"][name]["properties"])


def wire_name(name: str) -> str:
    # Arrays travel as `iids[]=1&iids[]=2`; the description names the parameter `iids`.
    return name[:-2] if name.endswith("[]") else name


def test_every_fake_issue_field_is_in_the_published_issue_schema(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    issue = payloads.issue(1, labels=["workflow::todo"], assignee="amy")
    assert set(issue) <= properties(spec, "API_Entities_Issue")
    assert set(issue["author"]) <= properties(spec, "API_Entities_UserBasic")
    assert set(issue["references"]) <= properties(spec, "API_Entities_IssuableReferences")
    assert set(payloads.link(issue)) <= properties(spec, "API_Entities_RelatedIssue")


def test_the_link_type_and_state_values_the_adapter_reads_exist(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    _, op = operation(spec, "GET", "/api/v4/projects/1/issues")
    state = next(p for p in op["parameters"] if p["name"] == "state")
    assert {"opened", "closed", "all"} <= set(state["schema"]["enum"])
    put = spec["components"]["schemas"]["putApiV4ProjectsIdIssuesIssueIid"]["properties"]
    assert {"close", "reopen"} <= set(put["state_event"]["enum"])


async def test_every_request_the_adapter_sends_is_in_the_subset_or_the_notes_docs(
    tracker_schemas: Path,
) -> None:
    spec = openapi(tracker_schemas)
    fake = FakeGitLab(token=TOKEN)
    fake.add(1, labels=["workflow::todo", "bug"], blocked_by=[2])
    fake.add(2, labels=["workflow::in progress"])
    fake.add(3, state="closed")
    with serve(fake):
        config = parse_config(
            {"project": payloads.PROJECT, "base_url": fake.base},
            {"GITLAB_TOKEN": TOKEN},
            ("Todo", "In Progress"),
            ("Done",),
        )
        tracker = GitLabTracker(config)
        try:
            assert len(await tracker.fetch_issues_by_states(["Todo", "In Progress"])) == 2
            assert len(await tracker.fetch_issues_by_states(["Done"])) == 1
            assert len(await tracker.fetch_issues_by_ids(["1", "2", "3", "77"])) == 3
            issue = session_issue(1)
            for name, arguments in [
                ("gitlab_move_issue", {"state": "Human Review"}),
                ("gitlab_add_comment", {"body": "done"}),
                (
                    "gitlab_link_merge_request",
                    {"url": f"{fake.base}/{payloads.PROJECT}/-/merge_requests/5"},
                ),
                ("gitlab_move_issue", {"state": "Done"}),
            ]:
                result = await tracker.execute_tool(name, arguments, issue)
                assert result.success, result.output
        finally:
            await tracker.aclose()

    issue_fields = properties(spec, "API_Entities_Issue")
    related_fields = properties(spec, "API_Entities_RelatedIssue")
    put_fields = properties(spec, "putApiV4ProjectsIdIssuesIssueIid")
    seen: set[tuple[str, str]] = set()
    for request in fake.requests:
        assert request.status in (200, 201), (request.method, request.path, request.answer)
        if request.method == "POST" and request.path.endswith("/notes"):
            seen.add(("POST", NOTES))
            assert set(request.body) <= NOTE_BODY_FIELDS
            assert set(request.answer) <= payloads.NOTE_FIELDS
            assert not request.query
            continue
        template, op = operation(spec, request.method, request.path)
        seen.add((request.method, template))
        unknown = {wire_name(k) for k in request.query} - query_parameters(op)
        assert not unknown, f"{request.method} {template} has no parameter(s) {unknown}"
        if request.method == "PUT":
            assert set(request.body) <= put_fields
        fields = related_fields if template.endswith("/links") else issue_fields
        for entry in request.answer if isinstance(request.answer, list) else [request.answer]:
            assert set(entry) <= fields
    assert seen == {
        ("GET", "/api/v4/projects/{id}/issues"),
        ("GET", "/api/v4/projects/{id}/issues/{issue_iid}/links"),
        ("PUT", "/api/v4/projects/{id}/issues/{issue_iid}"),
        ("POST", NOTES),
    }

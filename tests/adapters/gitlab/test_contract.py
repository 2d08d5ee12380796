"""Contract tests against GitLab's published REST description (tracker-schemas/gitlab).

The subset is reliable for names only (see tracker-schemas/README.md, "Known defects"), so these
tests check names:

- every request the adapter sends uses a path, method, query parameters (and their enum values)
  and body fields that the subset defines, with the fields it requires;
- every body the fake answers with uses only field names of the operation's response schema,
  nested entities included.

The defects are handled where they bite: list answers typed as one object (issues, notes,
labels; also `assignees`) are checked entry by entry against that object; the notes paths name
the issue iid `{noteable_id}`, so the tests check that segment carries the iid and report it as
`{issue_iid}`.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from symphony.tracker.contract import NewTicket
from symphony_adapters.gitlab.config import parse_config
from symphony_adapters.gitlab.tracker import GitLabTracker
from tests.adapters.gitlab import payloads
from tests.adapters.gitlab.fake_gitlab import FakeGitLab, serve
from tests.adapters.gitlab.fake_members import documented_members_request
from tests.adapters.gitlab.helpers import session_issue

TOKEN = "glpat-contract_token_value"
PROJECT = "/api/v4/projects/{id}"
ISSUE = PROJECT + "/issues/{issue_iid}"


@cache
def openapi(folder: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (folder / "gitlab" / "rest-issues-subset.openapi.json").read_text()
    )
    return spec


def operation(spec: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    for template, operations in spec["paths"].items():
        if template_match(template, path) is not None and method.lower() in operations:
            return template, operations[method.lower()]
    raise AssertionError(f"{method} {path} is not in the GitLab subset")


def template_match(template: str, path: str) -> dict[str, str] | None:
    """The path parameters of `path` when it fits `template`."""
    names = re.findall(r"\{([^}]+)\}", template)
    pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "([^/]+)", re.escape(template)) + "$"
    found = re.match(pattern, path)
    return dict(zip(names, found.groups(), strict=True)) if found else None


def reported(template: str) -> str:
    # The v3 notes paths call the issue iid `{noteable_id}` (a known defect).
    return template.replace("{noteable_id}", "{issue_iid}")


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def properties(spec: dict[str, Any], name: str) -> set[str]:
    return set(spec["components"]["schemas"][name]["properties"])


def check_names(spec: dict[str, Any], schema: dict[str, Any], value: Any, where: str) -> None:
    """Every key of `value` (recursively) is a property its schema names."""
    schema = resolve(spec, schema)
    if value is None:
        return
    if schema.get("type") == "array" and "items" in schema:
        for n, entry in enumerate(value):
            check_names(spec, schema["items"], entry, f"{where}[{n}]")
        return
    if "properties" not in schema:
        return  # a scalar, or an untyped object (`position`, `commands_changes`)
    if isinstance(value, list):
        # Lists typed as their item (list answers, `assignees`): check each entry.
        for n, entry in enumerate(value):
            check_names(spec, schema, entry, f"{where}[{n}]")
        return
    assert isinstance(value, dict), where
    unknown = set(value) - set(schema["properties"])
    assert not unknown, f"{where} has field(s) {sorted(unknown)} the schema does not name"
    for key, entry in value.items():
        check_names(spec, schema["properties"][key], entry, f"{where}.{key}")


def query_parameters(op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in op.get("parameters", []) if p.get("in") == "query"}


def wire_name(name: str) -> str:
    # Arrays travel as `iids[]=1&iids[]=2`; the description names the parameter `iids`.
    return name[:-2] if name.endswith("[]") else name


def request_schema(spec: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    return resolve(spec, op["requestBody"]["content"]["application/json"]["schema"])


def response_schema(spec: dict[str, Any], op: dict[str, Any], status: int) -> dict[str, Any]:
    return resolve(spec, op["responses"][str(status)]["content"]["application/json"]["schema"])


def test_every_fake_issue_field_is_in_the_published_issue_schema(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    issue = payloads.issue(1, labels=["workflow::todo"], assignee="amy")
    assert set(issue) <= properties(spec, "API_Entities_Issue")
    assert set(issue["author"]) <= properties(spec, "API_Entities_UserBasic")
    assert set(issue["references"]) <= properties(spec, "API_Entities_IssuableReferences")
    assert set(payloads.link(issue)) <= properties(spec, "API_Entities_RelatedIssue")


def test_every_fake_note_label_and_link_field_is_in_the_published_schemas(
    tracker_schemas: Path,
) -> None:
    spec = openapi(tracker_schemas)
    schemas = spec["components"]["schemas"]
    check_names(spec, schemas["APIEntitiesNote"], payloads.note(1, "hi", system=True), "note")
    check_names(spec, schemas["APIEntitiesProjectLabel"], payloads.label(1, "x"), "label")
    blocker, blocked = payloads.issue(2, assignee="amy"), payloads.issue(1)
    link = payloads.issue_link(9, blocker, blocked)
    check_names(spec, schemas["API_Entities_IssueLink"], link, "issue link")


def test_the_link_type_and_state_values_the_adapter_uses_exist(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    _, op = operation(spec, "GET", "/api/v4/projects/1/issues")
    state = query_parameters(op)["state"]
    assert {"opened", "closed", "all"} <= set(state["schema"]["enum"])
    put = spec["components"]["schemas"]["putApiV4ProjectsIdIssuesIssueIid"]["properties"]
    assert {"close", "reopen"} <= set(put["state_event"]["enum"])
    # `link_type` has no enum in the subset; its description lists the values.
    _, op = operation(spec, "POST", "/api/v4/projects/1/issues/2/links")
    link_type = request_schema(spec, op)["properties"]["link_type"]
    assert "is_blocked_by" in link_type["description"]
    # Notes are listed oldest first with these values.
    _, op = operation(spec, "GET", "/api/v4/projects/1/issues/2/notes")
    notes = query_parameters(op)
    assert "created_at" in notes["order_by"]["schema"]["enum"]
    assert "asc" in notes["sort"]["schema"]["enum"]


async def test_every_request_the_adapter_sends_is_in_the_subset(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    fake = FakeGitLab(token=TOKEN)
    fake.add(1, labels=["workflow::todo", "bug"], blocked_by=[2])
    fake.add(2, labels=["workflow::in progress"])
    fake.add(3, state="closed")
    fake.add_label("workflow::todo")
    for n in range(101):  # two pages of notes
        fake.add_note(2, f"note {n}")
    fake.add_note(2, "changed the label", system=True)
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
            # The daemon's writes.
            other = session_issue(2, state="In Progress")
            await tracker.move_issue(other, "Todo")
            posted = await tracker.add_comment(other, "Plan: do it")
            await tracker.edit_comment(other, posted.id, "Plan: do it well")
            assert len(await tracker.list_comments(other)) == 102
            mr = f"{fake.base}/acme/gadgets/-/merge_requests/6"  # another project's
            for _ in range(2):
                await tracker.link_pull_request(other, mr, "!6 Follow-up")
            follow_up = NewTicket("Next", "More.", "Todo", ("#2", f"{payloads.PROJECT}#3"), other)
            assert (await tracker.create_issue(follow_up)).state == "Todo"
            assert (await tracker.create_issue(NewTicket("Old", "", "Done"))).state == "Done"
            assert await tracker.ensure_states(["Todo", "Plan Review", "Done"]) == ["Plan Review"]
        finally:
            await tracker.aclose()

    seen: set[tuple[str, str]] = set()
    for request in fake.requests:
        assert request.status in (200, 201), (request.method, request.path, request.answer)
        members = documented_members_request(
            request.method, request.path, request.query, request.answer
        )
        if members is not None:
            seen.add((request.method, members))
            continue
        template, op = operation(spec, request.method, request.path)
        where = f"{request.method} {reported(template)}"
        seen.add((request.method, reported(template)))
        path_values = template_match(template, request.path) or {}
        if "noteable_id" in path_values:
            assert int(path_values["noteable_id"]) in fake.issues, "the iid, not a global id"
        parameters = query_parameters(op)
        unknown = {wire_name(k) for k in request.query} - set(parameters)
        assert not unknown, f"{where} has no parameter(s) {unknown}"
        for key, values in request.query.items():
            enum = parameters[wire_name(key)].get("schema", {}).get("enum")
            assert enum is None or set(values) <= set(enum), (where, key, values)
        if request.body is not None:
            body_schema = request_schema(spec, op)
            assert set(request.body) <= set(body_schema["properties"]), where
            assert set(body_schema.get("required", [])) <= set(request.body), where
            for key, value in request.body.items():
                enum = body_schema["properties"][key].get("enum")
                assert enum is None or value in enum, (where, key, value)
        check_names(spec, response_schema(spec, op, request.status), request.answer, where)
    assert seen == {
        ("GET", PROJECT + "/issues"),
        ("POST", PROJECT + "/issues"),
        ("GET", ISSUE),
        ("PUT", ISSUE),
        ("GET", ISSUE + "/links"),
        ("POST", ISSUE + "/links"),
        ("GET", ISSUE + "/notes"),
        ("POST", ISSUE + "/notes"),
        ("PUT", ISSUE + "/notes/{note_id}"),
        ("GET", PROJECT + "/labels"),
        ("POST", PROJECT + "/labels"),
        ("GET", PROJECT + "/members/all"),
    }

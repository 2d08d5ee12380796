"""Contract tests against GitHub's published descriptions (tracker-schemas/github):

- every GraphQL document the adapter sends validates against the GraphQL schema, and the fake's
  answers to them are answers the schema allows (executed against it, they come back unchanged);
- every REST body our fakes return validates against the response schema of its operation in
  the OpenAPI subset, every path, method and query parameter the adapter uses exists there, and
  every JSON body it sends validates against the operation's request schema.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    GraphQLAbstractType,
    GraphQLResolveInfo,
    GraphQLSchema,
    InlineFragmentNode,
    build_schema,
    graphql_sync,
    parse,
    validate,
)
from openapi_schema_validator import OAS30Validator

from symphony.base.issue import Issue
from symphony.tracker.contract import TRACKER_REJECTED, NewTicket, TrackerError
from symphony_adapters.github import queries
from symphony_adapters.github.config import parse_config
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.github import payloads
from tests.adapters.github.fake_github import FakeGitHub, FakeProject, serve

TOKEN = "ghp_contract_token_value"


@cache
def graphql_schema(folder: Path) -> GraphQLSchema:
    sdl = (folder / "github" / "graphql-schema.graphql").read_text()
    # The published SDL defines two fields twice (see tracker-schemas/README.md).
    return build_schema(sdl, assume_valid_sdl=True)


@cache
def openapi(folder: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (folder / "github" / "rest-issues-subset.openapi.json").read_text()
    )
    _allow_null_in_nullable_enums(spec)
    return spec


def _allow_null_in_nullable_enums(node: Any) -> None:
    # GitHub marks fields such as `state_reason` nullable but leaves null out of their enum.
    if isinstance(node, dict):
        if node.get("nullable") and isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"].append(None)
        for value in node.values():
            _allow_null_in_nullable_enums(value)
    elif isinstance(node, list):
        for value in node:
            _allow_null_in_nullable_enums(value)


def operation(spec: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    for template, operations in spec["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            return template, operations[method.lower()]
    raise AssertionError(f"{method} {path} is not in the OpenAPI subset")


def parameter_names(spec: dict[str, Any], op: dict[str, Any]) -> set[str]:
    names = set()
    for parameter in op.get("parameters", []):
        if "$ref" in parameter:
            parameter = spec["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        if parameter["in"] == "query":
            names.add(parameter["name"])
    return names


def check_body(spec: dict[str, Any], method: str, path: str, status: int, body: Any) -> None:
    _, op = operation(spec, method, path)
    response = op["responses"].get(str(status))
    assert response is not None, f"{method} {path} has no documented {status}"
    if "$ref" in response:
        response = spec["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    schema = response["content"]["application/json"]["schema"]
    OAS30Validator({**copy.deepcopy(schema), "components": spec["components"]}).validate(body)


def check_request_body(spec: dict[str, Any], method: str, path: str, body: Any) -> None:
    _, op = operation(spec, method, path)
    if body is None:
        return
    assert "requestBody" in op, f"{method} {path} takes no body"
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    OAS30Validator({**copy.deepcopy(schema), "components": spec["components"]}).validate(body)
    # The published request schemas allow any extra property; a misspelt field would pass.
    alternatives = [schema, *schema.get("oneOf", []), *schema.get("anyOf", [])]
    unknown = set(body) - {name for s in alternatives for name in s.get("properties", {})}
    assert not unknown, f"{method} {path} has no body field(s) {unknown}"


def check_rest_traffic(spec: dict[str, Any], fake: FakeGitHub) -> None:
    for request in fake.requests:
        if request.path == "/graphql":
            continue
        template, op = operation(spec, request.method, request.path)
        unknown = set(request.query) - parameter_names(spec, op)
        assert not unknown, f"{request.method} {template} has no parameter(s) {unknown}"
        check_request_body(spec, request.method, request.path, request.body)
        if request.status != 304:
            check_body(spec, request.method, request.path, request.status, request.answer)


def check_graphql_answer(
    schema: GraphQLSchema, document: str, variables: dict[str, Any], data: Any
) -> None:
    """Execute `document` against the schema with the fake's `data` as the root: an answer the
    schema allows (types, nullability, only selected fields, by alias) comes back unchanged."""

    def by_response_key(source: Any, info: GraphQLResolveInfo, **_: Any) -> Any:
        return source.get(info.path.key) if isinstance(source, Mapping) else None

    def by_typename(value: Any, info: GraphQLResolveInfo, abstract: GraphQLAbstractType) -> Any:
        if isinstance(value, Mapping) and "__typename" in value:
            return value["__typename"]
        # Without `__typename` the answer can only be the type the selection's fragment names.
        for node in info.field_nodes:
            for selection in node.selection_set.selections if node.selection_set else ():
                if isinstance(selection, InlineFragmentNode) and selection.type_condition:
                    return selection.type_condition.name.value
        return None

    result = graphql_sync(
        schema,
        document,
        root_value=data,
        variable_values=variables,
        field_resolver=by_response_key,
        type_resolver=by_typename,
    )
    assert result.errors is None, result.errors
    assert result.data == data


@pytest.mark.parametrize("name", sorted(queries.ALL))
def test_every_graphql_document_validates_against_the_schema(
    tracker_schemas: Path, name: str
) -> None:
    assert validate(graphql_schema(tracker_schemas), parse(queries.ALL[name])) == []


def test_the_graphql_tool_examples_validate_too(tracker_schemas: Path) -> None:
    document = parse("query { viewer { login } rateLimit { cost remaining resetAt } }")
    assert validate(graphql_schema(tracker_schemas), document) == []


REPO_ISSUE = "/repos/acme/widgets/issues/1"


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("GET", "/repos/acme/widgets/issues", 200, [payloads.issue(1, labels=["status:todo"])]),
        ("GET", "/repos/acme/widgets/issues", 200, [payloads.issue(2, pull_request=True)]),
        ("GET", REPO_ISSUE, 200, payloads.issue(1, state="closed", assignee="amy")),
        ("GET", REPO_ISSUE, 200, payloads.issue(1, blocked_by=2, open_blockers=1)),
        ("GET", REPO_ISSUE, 404, payloads.error("Not Found")),
        ("GET", REPO_ISSUE, 410, payloads.error("Gone")),
        ("GET", f"{REPO_ISSUE}/dependencies/blocked_by", 200, [payloads.issue(9)]),
        ("POST", f"{REPO_ISSUE}/labels", 200, [payloads.label("status:todo")]),
        ("DELETE", f"{REPO_ISSUE}/labels/status%3Atodo", 200, []),
        ("PATCH", REPO_ISSUE, 200, payloads.issue(1, state="closed")),
        ("POST", f"{REPO_ISSUE}/comments", 201, payloads.comment(1, "hello")),
        (
            "GET",
            f"{REPO_ISSUE}/comments",
            200,
            [payloads.comment(1, "hi"), payloads.comment(2, "")],
        ),
        (
            "GET",
            f"{REPO_ISSUE}/comments",
            200,
            [payloads.comment(3, "by a deleted user", author=None)],
        ),
        ("GET", "/repos/acme/widgets/issues/comments/1", 200, payloads.comment(1, "hi")),
        ("GET", "/repos/acme/widgets/issues/comments/9", 404, payloads.error("Not Found")),
        ("PATCH", "/repos/acme/widgets/issues/comments/1", 200, payloads.comment(1, "edited")),
        ("POST", "/repos/acme/widgets/issues", 201, payloads.issue(5, labels=["status:todo"])),
        ("POST", f"{REPO_ISSUE}/dependencies/blocked_by", 201, payloads.issue(1, blocked_by=1)),
        ("GET", "/repos/acme/widgets/labels", 200, [payloads.label("status:todo")]),
        ("POST", "/repos/acme/widgets/labels", 201, payloads.label("status:in-progress")),
        (
            "POST",
            "/repos/acme/widgets/labels",
            422,
            payloads.validation_failed("Validation Failed", "already_exists"),
        ),
    ],
)
def test_fake_rest_bodies_match_the_published_response_schemas(
    tracker_schemas: Path, method: str, path: str, status: int, body: Any
) -> None:
    check_body(openapi(tracker_schemas), method, path, status, body)


async def test_requests_the_adapter_sends_and_fake_answers_follow_the_openapi_subset(
    tracker_schemas: Path,
) -> None:
    spec = openapi(tracker_schemas)
    fake = FakeGitHub(token=TOKEN)
    fake.add(1, labels=["status:todo", "bug"], blocked_by=[2])
    fake.add(2, labels=["status:in-progress"])
    fake.add(3, labels=["status:todo"], pull_request=True)
    fake.add(4, state="closed")
    with serve(fake):
        config = parse_config(
            {"repository": "acme/widgets", "api_url": fake.base},
            {"GITHUB_TOKEN": TOKEN},
            ("Todo", "In Progress"),
            ("Done",),
        )
        tracker = GitHubTracker(config)
        try:
            await tracker.fetch_issues_by_states(["Todo", "In Progress"])
            await tracker.fetch_issues_by_states(["Todo", "In Progress"])
            await tracker.fetch_issues_by_states(["Done"])
            await tracker.fetch_issues_by_ids(["1", "2", "77"])
            issue = Issue(
                id="1",
                identifier="acme/widgets#1",
                title="t",
                state="Todo",
                dispatchable=True,
                native_ref={"repository": "acme/widgets", "number": 1},
            )
            for name, arguments in [
                ("github_move_issue", {"state": "Human Review"}),
                ("github_add_comment", {"body": "done"}),
                ("github_link_pull_request", {"url": "https://127.0.0.1/acme/widgets/pull/5"}),
                ("github_move_issue", {"state": "Done"}),
            ]:
                result = await tracker.execute_tool(name, arguments, issue)
                assert result.success, result.output
        finally:
            await tracker.aclose()
    assert {r.status for r in fake.requests} >= {200, 201, 304, 404}
    check_rest_traffic(spec, fake)


async def test_the_daemons_writes_follow_the_openapi_subset(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    fake = FakeGitHub(token=TOKEN)
    fake.add(1, labels=["status:todo"])
    fake.add(2, labels=["status:in-progress"])
    fake.add(3, labels=["status:todo"], pull_request=True)
    fake.repo_labels = ["status:todo", "bug"]
    other = fake.comment(2, "a person's comment")
    with serve(fake):
        config = parse_config(
            {"repository": "acme/widgets", "api_url": fake.base},
            {"GITHUB_TOKEN": TOKEN},
            ("Todo", "In Progress"),
            ("Done",),
        )
        tracker = GitHubTracker(config)
        try:
            assert await tracker.ensure_states(["Todo", "In Progress", "Human Review", "Done"])
            [issue] = await tracker.fetch_issues_by_ids(["1"])
            posted = await tracker.add_comment(issue, "Plan")
            await tracker.edit_comment(issue, posted.id, "Plan, revised")
            assert [c.body for c in await tracker.list_comments(issue)] == ["Plan, revised"]
            for _ in range(2):
                await tracker.link_pull_request(issue, f"{fake.base}/acme/widgets/pull/5", "#5")
            for bad in (
                tracker.edit_comment(issue, "9999", "x"),
                tracker.edit_comment(issue, str(other.id), "x"),
            ):
                with pytest.raises(TrackerError) as info:
                    await bad
                assert info.value.category == TRACKER_REJECTED
            created = await tracker.create_issue(
                NewTicket("Split", "The rest.", "Todo", ("#2", "acme/widgets#1"), issue)
            )
            await tracker.move_issue(created, "Done")
            await tracker.create_issue(NewTicket("Done already", "", "Done"))
            for blocker in ("#3", "#77"):
                with pytest.raises(TrackerError):
                    await tracker.create_issue(NewTicket("No", "", "Todo", (blocker,)))
        finally:
            await tracker.aclose()
    methods = {(r.method, r.status) for r in fake.requests}
    assert methods >= {("POST", 201), ("PATCH", 200), ("GET", 404), ("GET", 200)}
    check_rest_traffic(spec, fake)


async def test_project_writes_send_schema_documents_and_get_schema_answers(
    tracker_schemas: Path,
) -> None:
    schema = graphql_schema(tracker_schemas)
    spec = openapi(tracker_schemas)
    fake = FakeGitHub(token=TOKEN, project=FakeProject())
    fake.add(1, labels=["bug"])
    fake.add(2)
    fake.put_on_project(1, "Todo")
    fake.put_on_project(2, None)
    with serve(fake):
        config = parse_config(
            {"project": {"owner": "acme", "number": 3}, "api_url": fake.base},
            {"GITHUB_TOKEN": TOKEN},
            ("Todo", "In Progress"),
            ("Done",),
        )
        tracker = GitHubTracker(config)
        try:
            assert await tracker.tracker_states()
            [issue] = await tracker.fetch_issues_by_states(["Todo"])
            await tracker.move_issue(issue, "In Progress")
            await tracker.add_comment(issue, "Plan")
            created = await tracker.create_issue(
                NewTicket("Split", "The rest.", "Todo", ("#2",), issue)
            )
            await tracker.move_issue(created, "Done")
        finally:
            await tracker.aclose()
    documents = set(queries.ALL.values())
    operations = [r for r in fake.requests if r.path == "/graphql"]
    assert {"AddProjectItem", "SetItemStatus"} <= {
        re.search(r"mutation (\w+)", r.body["query"]).group(1)  # type: ignore[union-attr]
        for r in operations
        if r.body["query"].lstrip().startswith("mutation")
    }
    for request in operations:
        assert request.body["query"] in documents
        assert "errors" not in request.answer, request.answer
        check_graphql_answer(
            schema, request.body["query"], request.body["variables"], request.answer["data"]
        )
    check_rest_traffic(spec, fake)

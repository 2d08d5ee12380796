"""Contract tests against GitHub's published descriptions (tracker-schemas/github):

- every GraphQL document the adapter sends validates against the GraphQL schema;
- every REST body our fakes return validates against the response schema of its operation in
  the OpenAPI subset, and every path, method and query parameter the adapter uses exists there.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from graphql import GraphQLSchema, build_schema, parse, validate
from openapi_schema_validator import OAS30Validator

from symphony.issue import Issue
from symphony_adapters.github import queries
from symphony_adapters.github.config import parse_config
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.github import payloads
from tests.adapters.github.fake_github import FakeGitHub, serve

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
    for request in fake.requests:
        template, op = operation(spec, request.method, request.path)
        unknown = set(request.query) - parameter_names(spec, op)
        assert not unknown, f"{request.method} {template} has no parameter(s) {unknown}"
        if request.status != 304:
            check_body(spec, request.method, request.path, request.status, request.answer)

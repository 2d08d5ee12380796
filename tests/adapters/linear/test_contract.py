"""Contract tests against Linear's published schema (`tracker-schemas/linear/schema.graphql`).

- Every operation the adapter can send (`adapters.linear.queries.OPERATIONS`) must validate.
- Every answer the fake gives is *executed* against the schema: the operation runs with the
  answer as root value, so a null in a non-null field, a wrong scalar or an unknown enum value
  is an execution error, and an answer carrying fields the query did not ask for no longer
  round-trips. The `fake` fixture does this for every answer of every test and fails a test
  whose fake drifted; the tests here pin the check itself and cover each operation once.
"""

from __future__ import annotations

from typing import Any

import pytest
from graphql import GraphQLSchema, OperationDefinitionNode, parse, validate

from symphony_adapters.linear.queries import OPERATIONS
from tests.adapters.linear.fake_linear import FakeLinear


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_adapter_operation_validates_against_linears_schema(
    linear_schema: GraphQLSchema, name: str
) -> None:
    document = parse(OPERATIONS[name])
    assert validate(linear_schema, document) == []
    # Registered under the name it declares, so logs and the fake agree on what was sent.
    declared = [
        d.name.value
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode) and d.name is not None
    ]
    assert declared == [name]


def test_the_agent_query_used_in_the_tool_tests_is_valid(linear_schema: GraphQLSchema) -> None:
    assert validate(linear_schema, parse("query AgentViewer { viewer { id name } }")) == []


def _world(schema: GraphQLSchema) -> FakeLinear:
    fake = FakeLinear(schema)
    fake.add("ENG-1", state="Backlog")
    fake.add("ENG-2", priority=3, labels=["Bug"], description="text", assignee="user-me")
    fake.add("ENG-3", blocked_by=["ENG-1"])
    fake.comment("ENG-2", "A person's comment")
    fake.comment("ENG-2", "The daemon's comment", user="user-me")
    fake.comment("ENG-2", "An integration's comment", user=None)
    return fake


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("SymphonyTeamIssues", {"teamKey": "ENG", "states": ["Todo"], "first": 50, "after": None}),
    ("SymphonyProjectIssues", {"slug": "proj1slug", "states": ["Todo"], "first": 2, "after": "1"}),
    ("SymphonyIssuesById", {"ids": ["uuid-eng-1", "uuid-eng-3"], "first": 2}),
    ("SymphonyViewer", {}),
    ("SymphonyIssueTeamStates", {"id": "uuid-eng-2"}),
    ("SymphonyMoveIssue", {"id": "uuid-eng-2", "stateId": "state-eng-done"}),
    ("SymphonyAddComment", {"issueId": "uuid-eng-2", "body": "hello"}),
    ("SymphonyAttachUrl", {"issueId": "uuid-eng-2", "url": "https://x.test/1", "title": None}),
    ("SymphonyEditComment", {"id": "comment-2", "body": "edited"}),
    ("SymphonyCommentOwner", {"id": "comment-1"}),
    ("SymphonyIssueComments", {"id": "uuid-eng-2", "first": 100, "after": None}),
    ("SymphonyTeamByKey", {"key": "ENG"}),
    ("SymphonyProjectTeams", {"slug": "proj1slug"}),
    ("SymphonyIssueScope", {"id": "uuid-eng-2"}),
    ("SymphonyIssueRef", {"id": "ENG-1"}),
    (
        "SymphonyCreateIssue",
        {
            "teamId": "team-eng",
            "title": "Follow-up",
            "description": None,
            "stateId": "state-eng-todo",
            "projectId": "project-proj1slug",
        },
    ),
    ("SymphonyAddBlocker", {"blockerId": "uuid-eng-1", "issueId": "uuid-eng-2"}),
]


def test_calls_cover_every_operation() -> None:
    assert sorted(name for name, _ in CALLS) == sorted(OPERATIONS)


@pytest.mark.parametrize(("name", "variables"), CALLS, ids=[name for name, _ in CALLS])
def test_fake_answers_execute_against_the_schema(
    linear_schema: GraphQLSchema, name: str, variables: dict[str, Any]
) -> None:
    fake = _world(linear_schema)
    status, body, _ = fake.answer({"query": OPERATIONS[name], "variables": variables}, {})
    assert status == 200 and "errors" not in body and body["data"]
    assert fake.violations == []


def test_comment_answers_with_and_without_a_user_execute_against_the_schema(
    linear_schema: GraphQLSchema,
) -> None:
    fake = _world(linear_schema)
    fake.comment_page_cap = 1
    variables: dict[str, Any] = {"id": "uuid-eng-2", "first": 100, "after": None}
    for _ in range(3):
        status, body, _ = fake.answer(
            {"query": OPERATIONS["SymphonyIssueComments"], "variables": variables}, {}
        )
        assert status == 200 and body["data"]["issue"]["comments"]["nodes"]
        variables["after"] = body["data"]["issue"]["comments"]["pageInfo"]["endCursor"]
    assert fake.violations == []


def test_the_fakes_not_found_answer_has_linears_error_shape(linear_schema: GraphQLSchema) -> None:
    fake = _world(linear_schema)
    status, body, _ = fake.answer(
        {"query": OPERATIONS["SymphonyIssueRef"], "variables": {"id": "ENG-404"}}, {}
    )
    # Issue! is non-null, so the null bubbles up to `data`, beside the error.
    assert status == 200 and body["data"] is None
    [error] = body["errors"]
    assert error["message"].startswith("Entity not found")
    assert error["extensions"]["type"] == "invalid input"


def test_the_contract_check_catches_a_fake_that_drifted(linear_schema: GraphQLSchema) -> None:
    fake = _world(linear_schema)
    node = fake.node(fake.by_identifier("ENG-2"))
    query = OPERATIONS["SymphonyIssuesById"]
    variables = {"ids": ["uuid-eng-2"], "first": 1}
    for field, wrong in [("priority", "high"), ("branchName", None), ("title", {"x": 1})]:
        fake.violations.clear()
        fake.check_contract(query, variables, {"issues": {"nodes": [{**node, field: wrong}]}})
        assert fake.violations, f"{field}={wrong!r} was not caught"
    fake.violations.clear()
    fake.check_contract(query, variables, {"issues": {"nodes": [{**node, "extra": 1}]}})
    assert fake.violations

"""The Linear agent tools: state moves resolved within the issue's team, comments, links, raw
GraphQL, structured failures, and a key that never reaches a result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from symphony.base.issue import Issue
from symphony_adapters.linear import LinearTracker
from tests.adapters.linear.conftest import MakeTracker
from tests.adapters.linear.fake_linear import API_KEY, FakeLinear


async def read(tracker: LinearTracker, issue_id: str) -> Issue:
    [issue] = await tracker.fetch_issues_by_ids([issue_id])
    return issue


def test_tools_are_advertised_with_closed_json_schemas(make_tracker: MakeTracker) -> None:
    specs = {spec.name: spec for spec in make_tracker().agent_tools()}
    assert list(specs) == [
        "linear_move_issue",
        "linear_add_comment",
        "linear_attach_url",
        "linear_graphql",
    ]
    required = {name: spec.input_schema["required"] for name, spec in specs.items()}
    assert required == {
        "linear_move_issue": ["state"],
        "linear_add_comment": ["body"],
        "linear_attach_url": ["url"],
        "linear_graphql": ["query"],
    }
    for spec in specs.values():
        assert spec.input_schema["type"] == "object"
        assert spec.input_schema["additionalProperties"] is False
        assert spec.description


async def test_move_resolves_the_state_by_name_within_the_issues_team(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    result = await tracker.execute_tool("linear_move_issue", {"state": "human review"}, issue)
    assert result.success, result.output
    assert result.output == {
        "identifier": "ENG-1",
        "state": "Human Review",
        "previous_state": "Todo",
        "changed": True,
    }
    assert fake.by_identifier("ENG-1").state == "Human Review"
    assert fake.requests[-1] == (
        "SymphonyMoveIssue",
        {"id": issue.id, "stateId": "state-eng-human-review"},
    )


async def test_move_uses_the_states_of_the_team_the_issue_is_in(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker(team_key="OPS")
    issue = await read(tracker, fake.add("OPS-1").id)
    moved = await tracker.execute_tool("linear_move_issue", {"state": "Shipped"}, issue)
    assert moved.success and fake.by_identifier("OPS-1").state == "Shipped"
    assert fake.requests[-1][1]["stateId"] == "state-ops-shipped"
    # ENG has a "Human Review" state; OPS does not, so the move fails and names OPS's states.
    refused = await tracker.execute_tool("linear_move_issue", {"state": "Human Review"}, issue)
    assert not refused.success
    assert refused.output["error"] == "unknown_state"
    assert "team OPS" in refused.output["message"]
    assert "Todo, Doing, Shipped" in refused.output["message"]
    assert fake.by_identifier("OPS-1").state == "Shipped"


async def test_moving_to_the_current_state_changes_nothing(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    result = await tracker.execute_tool("linear_move_issue", {"state": "TODO"}, issue)
    assert result.success and result.output["changed"] is False
    assert "SymphonyMoveIssue" not in fake.operations()


async def test_tools_act_on_the_issue_they_are_given_by_its_id(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.add("ENG-2")
    comment = await tracker.execute_tool("linear_add_comment", {"body": "Done: see PR"}, issue)
    assert comment.success
    assert comment.output == {
        "identifier": "ENG-1",
        "comment_id": "comment-1",
        "url": "https://linear.app/acme/comment/1",
    }
    assert fake.comments == [(issue.id, "Done: see PR")]


async def test_attaching_the_same_url_twice_updates_one_attachment(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    url = "https://github.com/acme/widgets/pull/7"
    first = await tracker.execute_tool("linear_attach_url", {"url": url}, issue)
    second = await tracker.execute_tool(
        "linear_attach_url", json.dumps({"url": url, "title": "Pull request"}), issue
    )
    assert first.success and second.success
    assert second.output == {
        "identifier": "ENG-1",
        "attachment_id": first.output["attachment_id"],
        "url": url,
        "title": "Pull request",
    }
    assert fake.attachments == {(issue.id, url): "Pull request"}


async def test_graphql_tool_returns_data_or_the_errors_with_partial_data(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    ok = await tracker.execute_tool(
        "linear_graphql", {"query": "query AgentViewer { viewer { id name } }"}, issue
    )
    assert ok.success
    assert ok.output == {"data": {"viewer": {"id": "user-me", "name": "Symphony Bot"}}}
    bad = await tracker.execute_tool(
        "linear_graphql", {"query": "query Nope { nope }", "variables": {"a": 1}}, issue
    )
    assert not bad.success and bad.output["error"] == "graphql_error"
    assert "Unknown operation" in bad.output["message"]
    assert bad.output["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert fake.requests[-1] == ("Nope", {"a": 1})


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("linear_move_issue", {}, "missing required argument 'state'"),
        ("linear_move_issue", {"state": 3}, "must be a string"),
        ("linear_move_issue", {"state": "  "}, "must not be empty"),
        ("linear_move_issue", {"state": "x" * 101}, "longer than 100"),
        ("linear_move_issue", {"state": "Done", "id": "other"}, "unexpected argument(s) id"),
        ("linear_move_issue", ["Done"], "takes a JSON object"),
        ("linear_move_issue", "not json", "takes a JSON object"),
        ("linear_add_comment", {"body": ""}, "must not be empty"),
        ("linear_attach_url", {"url": "javascript:alert(1)"}, "http(s) URL"),
        ("linear_attach_url", {"title": "PR"}, "missing required argument 'url'"),
        ("linear_graphql", {"query": "{ viewer { id } }", "variables": [1]}, "must be an object"),
        ("linear_graphql", {"query": None}, "missing required argument 'query'"),
    ],
)
async def test_bad_arguments_are_structured_failures_without_a_request(
    fake: FakeLinear, make_tracker: MakeTracker, name: str, arguments: Any, fragment: str
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    sent = len(fake.requests)
    result = await tracker.execute_tool(name, arguments, issue)
    assert not result.success
    assert result.output["error"] == "invalid_arguments"
    assert fragment in result.output["message"]
    assert len(fake.requests) == sent


async def test_an_unknown_tool_is_a_structured_failure(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    result = await tracker.execute_tool("local_move_issue", {"state": "Done"}, issue)
    assert not result.success and result.output["error"] == "unknown_tool"


async def test_moving_an_issue_that_is_gone_fails_with_the_response_category(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    del fake.issues[issue.id]
    result = await tracker.execute_tool("linear_move_issue", {"state": "Done"}, issue)
    assert not result.success and result.output["error"] == "tracker_response"
    assert "Entity not found" in result.output["message"]


async def test_a_rate_limited_tool_call_reports_when_to_retry(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.fail_next(429, {}, {"retry-after": "12"})
    result = await tracker.execute_tool("linear_add_comment", {"body": "hi"}, issue)
    assert not result.success
    assert result.output["error"] == "tracker_rate_limited"
    assert result.output["retry_after_s"] == 12
    assert fake.comments == []


async def test_a_rejected_mutation_is_a_failure(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    payload = {"success": False, "comment": {"id": "c", "url": None}}
    fake.fail_next(200, {"data": {"commentCreate": payload}})
    result = await tracker.execute_tool("linear_add_comment", {"body": "hi"}, issue)
    assert not result.success and result.output["error"] == "mutation_failed"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, {"errors": [{"message": f"token {API_KEY} is odd"}], "data": {"x": API_KEY}}),
        (400, {"errors": [{"message": f"bad key {API_KEY}", "extensions": {"type": "forbidden"}}]}),
        (403, {"message": f"key {API_KEY} lacks access"}),
    ],
)
async def test_the_api_key_never_appears_in_a_tool_result(
    fake: FakeLinear, make_tracker: MakeTracker, status: int, body: Any
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.fail_next(status, body)
    result = await tracker.execute_tool("linear_graphql", {"query": "{ viewer { id } }"}, issue)
    assert not result.success
    assert API_KEY not in json.dumps(result.output)

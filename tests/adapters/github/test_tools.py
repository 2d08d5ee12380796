"""The GitHub agent tools: what they send, what they return, and what they refuse."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from symphony.base.issue import Issue
from symphony.base.tools import INVALID_ARGUMENTS
from symphony.tracker.tools import UNKNOWN_TOOL
from symphony_adapters._support.tool_calls import INTERNAL_ERROR
from symphony_adapters.github import tools
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.github.helpers import ISSUES, TOKEN, make_tracker
from tests.adapters.github.payloads import API, REPO, comment, error, issue, label


def session_issue(number: int = 1) -> Issue:
    return Issue(
        id=str(number),
        identifier=f"{REPO}#{number}",
        title="t",
        state="Todo",
        dispatchable=True,
        native_ref={"repository": REPO, "number": number, "node_id": f"I_node{number}"},
    )


def labels_reply(names: list[str]) -> httpx.Response:
    return httpx.Response(200, json=[label(n) for n in names])


def test_tools_are_advertised_with_closed_schemas() -> None:
    specs = make_tracker().agent_tools()
    assert [s.name for s in specs] == list(tools.NAMES)
    for spec in specs:
        assert spec.input_schema["additionalProperties"] is False


@respx.mock
async def test_move_swaps_the_state_label_and_leaves_other_labels() -> None:
    respx.get(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["status:todo", "bug"]))
    )
    add = respx.post(f"{ISSUES}/1/labels").mock(
        return_value=labels_reply(["status:todo", "bug", "status:human-review"])
    )
    remove = respx.delete(f"{ISSUES}/1/labels/status%3Atodo").mock(
        return_value=labels_reply(["bug", "status:human-review"])
    )
    result = await make_tracker().execute_tool(
        "github_move_issue", {"state": "Human Review"}, session_issue()
    )
    assert result.success, result.output
    assert json.loads(add.calls[0].request.content) == {"labels": ["status:human-review"]}
    assert remove.call_count == 1
    assert result.output == {
        "identifier": f"{REPO}#1",
        "state": "Human Review",
        "previous_state": "Todo",
        "changed": True,
        "labels": ["bug", "status:human-review"],
        "issue_state": "open",
    }


@respx.mock
async def test_move_to_the_closed_state_closes_the_issue_and_drops_state_labels() -> None:
    respx.get(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["status:in-progress"]))
    )
    respx.delete(f"{ISSUES}/1/labels/status%3Ain-progress").mock(return_value=labels_reply([]))
    patch = respx.patch(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, state="closed"))
    )
    result = await make_tracker().execute_tool(
        "github_move_issue", {"state": "done"}, session_issue()
    )
    assert result.success
    assert json.loads(patch.calls[0].request.content) == {
        "state": "closed",
        "state_reason": "completed",
    }
    assert result.output["issue_state"] == "closed"


@respx.mock
async def test_move_to_the_current_state_changes_nothing() -> None:
    respx.get(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["status:todo"]))
    )
    result = await make_tracker().execute_tool(
        "github_move_issue", {"state": "Todo"}, session_issue()
    )
    assert result.success
    assert result.output["changed"] is False
    assert respx.calls.call_count == 1


@respx.mock
async def test_comment_posts_the_body_to_the_session_issue() -> None:
    route = respx.post(f"{ISSUES}/4/comments").mock(
        return_value=httpx.Response(201, json=comment(99, "hello", number=4))
    )
    result = await make_tracker().execute_tool(
        "github_add_comment", '{"body": "hello"}', session_issue(4)
    )
    assert result.success
    assert json.loads(route.calls[0].request.content) == {"body": "hello"}
    assert result.output["comment_id"] == 99


@respx.mock
async def test_link_pull_request_validates_the_url_and_comments_it() -> None:
    respx.get(f"{ISSUES}/1/comments").mock(return_value=httpx.Response(200, json=[]))
    route = respx.post(f"{ISSUES}/1/comments").mock(
        return_value=httpx.Response(201, json=comment(5, "x"))
    )
    tracker = make_tracker()
    url = "https://github.com/acme/widgets/pull/12"
    result = await tracker.execute_tool("github_link_pull_request", {"url": url}, session_issue())
    assert result.success
    assert result.output["pull_request"] == url
    assert url in json.loads(route.calls[0].request.content)["body"]
    for bad in (
        "https://github.com/acme/widgets/issues/12",
        "http://github.com/a/b/pull/1",
        "https://evil.example/a/b/pull/1",
    ):
        refused = await tracker.execute_tool(
            "github_link_pull_request", {"url": bad}, session_issue()
        )
        assert not refused.success
        assert refused.output["error"] == INVALID_ARGUMENTS
    assert route.call_count == 1


@respx.mock
async def test_graphql_tool_runs_queries() -> None:
    route = respx.post(f"{API}/graphql").mock(
        return_value=httpx.Response(200, json={"data": {"viewer": {"login": "octocat"}}})
    )
    result = await make_tracker().execute_tool(
        "github_graphql", {"query": "query { viewer { login } }"}, session_issue()
    )
    assert result.success
    assert result.output == {"data": {"viewer": {"login": "octocat"}}}
    assert json.loads(route.calls[0].request.content)["variables"] == {}


@pytest.mark.parametrize(
    "query",
    [
        'mutation { addStar(input: {starrableId: "x"}) { clientMutationId } }',
        "query A { viewer { login } } mutation B { x }",
        "subscription { s }",
        "# comment\n  mutation\n{ y }",
    ],
)
async def test_graphql_tool_refuses_writes_before_sending(query: str) -> None:
    with respx.mock(assert_all_called=False) as mock:
        result = await make_tracker().execute_tool(
            "github_graphql", {"query": query}, session_issue()
        )
        assert not mock.calls
    assert not result.success
    assert result.output["error"] == "read_only"


@respx.mock
async def test_graphql_errors_come_back_as_a_failure() -> None:
    respx.post(f"{API}/graphql").mock(
        return_value=httpx.Response(200, json={"errors": [{"message": "Field 'x' doesn't exist"}]})
    )
    result = await make_tracker().execute_tool(
        "github_graphql", {"query": "{ x }"}, session_issue()
    )
    assert not result.success
    assert result.output["error"] == tools.GRAPHQL_ERROR


@pytest.mark.parametrize(
    ("name", "arguments", "error_code"),
    [
        ("github_delete_repo", {}, UNKNOWN_TOOL),
        ("github_move_issue", {}, INVALID_ARGUMENTS),
        ("github_move_issue", {"state": "x", "issue": 2}, INVALID_ARGUMENTS),
        ("github_move_issue", {"state": "a\nb"}, INVALID_ARGUMENTS),
        ("github_move_issue", {"state": "x" * 60}, INVALID_ARGUMENTS),
        ("github_add_comment", {"body": "  "}, INVALID_ARGUMENTS),
        ("github_add_comment", "not json", INVALID_ARGUMENTS),
        ("github_graphql", {"query": "{ unclosed"}, INVALID_ARGUMENTS),
        ("github_graphql", {"query": "{ a }", "variables": [1]}, INVALID_ARGUMENTS),
    ],
)
async def test_bad_calls_fail_without_a_request(name: str, arguments: Any, error_code: str) -> None:
    with respx.mock(assert_all_called=False) as mock:
        result = await make_tracker().execute_tool(name, arguments, session_issue())
        assert not mock.calls
    assert not result.success
    assert result.output["error"] == error_code


async def test_tools_act_only_on_an_issue_of_the_configured_repository() -> None:
    foreign = Issue(
        id="1",
        identifier="other/repo#1",
        title="t",
        state="Todo",
        dispatchable=True,
        native_ref={"repository": "other/repo", "number": 1},
    )
    with respx.mock(assert_all_called=False) as mock:
        result = await make_tracker().execute_tool("github_add_comment", {"body": "x"}, foreign)
        assert not mock.calls
    assert result.output["error"] == tools.NOT_IN_SCOPE


@respx.mock
async def test_tool_failures_carry_categories_and_never_the_token() -> None:
    respx.post(f"{ISSUES}/1/comments").mock(
        return_value=httpx.Response(403, json=error(f"Resource not accessible {TOKEN[:3]}"))
    )
    tracker: GitHubTracker = make_tracker()
    result = await tracker.execute_tool("github_add_comment", {"body": "x"}, session_issue())
    assert not result.success
    assert result.output["error"] == "tracker_status"
    assert TOKEN not in json.dumps(result.output)


@respx.mock
async def test_an_unexpected_bug_is_a_failure_result_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracker = make_tracker()

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(tracker.http, "request", broken)
    result = await tracker.execute_tool("github_add_comment", {"body": "x"}, session_issue())
    assert result.output == {
        "error": INTERNAL_ERROR,
        "message": "github_add_comment failed: KeyError",
    }

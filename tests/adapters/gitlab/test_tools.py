"""The GitLab agent tools: what they send, what they return, and what they refuse."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest
import respx

from symphony.base.tools import INVALID_ARGUMENTS
from symphony.tracker.contract import TRACKER_RATE_LIMITED
from symphony.tracker.tools import UNKNOWN_TOOL
from symphony_adapters._support.tool_calls import INTERNAL_ERROR
from symphony_adapters.gitlab import tools
from tests.adapters.gitlab.helpers import TOKEN, FakeClock, make_tracker, session_issue
from tests.adapters.gitlab.payloads import BASE, ISSUES, PROJECT, error, issue, note


def sent(route: respx.Route) -> dict[str, str]:
    body: dict[str, str] = json.loads(route.calls[0].request.content)
    return body


def test_tools_are_advertised_with_closed_schemas() -> None:
    specs = make_tracker().agent_tools()
    assert [s.name for s in specs] == list(tools.NAMES)
    for spec in specs:
        assert spec.input_schema["additionalProperties"] is False
    assert "workflow::human review" in specs[0].description


@respx.mock
async def test_move_is_one_put_adding_the_new_label_and_removing_every_other() -> None:
    put = respx.put(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["bug", "workflow::human review"]))
    )
    tracker = make_tracker({"state_labels": {"Human Review": "workflow::human review"}})
    result = await tracker.execute_tool(
        "gitlab_move_issue",
        {"state": "Human Review"},
        session_issue(labels=("workflow::todo", "workflow::blocked", "bug")),
    )
    assert result.success, result.output
    assert len(respx.calls) == 1
    body = sent(put)
    assert body["add_labels"] == "workflow::human review"
    assert set(body["remove_labels"].split(",")) == {
        "workflow::todo",
        "workflow::in progress",
        "workflow::blocked",
    }
    assert body["state_event"] == "reopen"
    assert result.output == {
        "identifier": f"{PROJECT}#1",
        "state": "Human Review",
        "previous_state": "Todo",
        "changed": True,
        "labels": ["bug", "workflow::human review"],
        "issue_state": "opened",
    }


@respx.mock
async def test_an_unconfigured_state_becomes_a_prefixed_label() -> None:
    put = respx.put(f"{ISSUES}/1").mock(return_value=httpx.Response(200, json=issue(1)))
    result = await make_tracker().execute_tool(
        "gitlab_move_issue", {"state": "Needs  Info"}, session_issue()
    )
    assert result.success
    assert sent(put)["add_labels"] == "workflow::needs info"


@respx.mock
async def test_move_to_the_closed_state_closes_and_removes_all_state_labels() -> None:
    put = respx.put(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, state="closed"))
    )
    result = await make_tracker().execute_tool(
        "gitlab_move_issue", {"state": "done"}, session_issue(state="In Progress")
    )
    assert result.success and result.output["issue_state"] == "closed"
    body = sent(put)
    assert body["state_event"] == "close"
    assert "add_labels" not in body
    assert set(body["remove_labels"].split(",")) == {"workflow::todo", "workflow::in progress"}


@respx.mock
async def test_leaving_the_closed_state_reopens() -> None:
    put = respx.put(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["workflow::todo"]))
    )
    result = await make_tracker().execute_tool(
        "gitlab_move_issue", {"state": "Todo"}, session_issue(state="Done")
    )
    assert result.success
    assert sent(put)["state_event"] == "reopen"
    assert sent(put)["add_labels"] == "workflow::todo"
    assert "workflow::todo" not in sent(put)["remove_labels"].split(",")


@respx.mock
async def test_comment_posts_a_note() -> None:
    post = respx.post(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(201, json=note(77, "done"))
    )
    result = await make_tracker().execute_tool(
        "gitlab_add_comment", {"body": "done"}, session_issue()
    )
    assert result.success
    assert sent(post) == {"body": "done"}
    assert result.output == {
        "identifier": f"{PROJECT}#1",
        "commented": True,
        "note_id": 77,
        "note_url": f"{BASE}/{PROJECT}/-/issues/1#note_77",
    }


@respx.mock
async def test_link_merge_request_posts_a_note_naming_it() -> None:
    url = f"{BASE}/acme/platform/widgets/-/merge_requests/12"
    respx.get(f"{ISSUES}/1/notes").mock(return_value=httpx.Response(200, json=[]))
    post = respx.post(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(201, json=note(78, "x"))
    )
    result = await make_tracker().execute_tool(
        "gitlab_link_merge_request", json.dumps({"url": url}), session_issue()
    )
    assert result.success, result.output
    assert sent(post) == {"body": f"Linked merge request: {url}"}
    assert result.output["merge_request"] == url


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.com/acme/widgets/-/merge_requests/12",  # another instance
        f"{BASE}/acme/widgets/-/issues/12",
        f"{BASE}/acme/widgets/merge_requests/12",
        f"{BASE}/-/merge_requests/12",
        f"{BASE}/acme/widgets/-/merge_requests/0",
        "javascript:alert(1)",
    ],
)
async def test_link_merge_request_refuses_other_urls(url: str) -> None:
    result = await make_tracker().execute_tool(
        "gitlab_link_merge_request", {"url": url}, session_issue()
    )
    assert not result.success and result.output["error"] == INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("gitlab_delete_issue", {}, UNKNOWN_TOOL),
        ("gitlab_move_issue", {}, INVALID_ARGUMENTS),
        ("gitlab_move_issue", {"state": "Todo", "iid": 9}, INVALID_ARGUMENTS),
        ("gitlab_move_issue", {"state": "a,b"}, INVALID_ARGUMENTS),
        ("gitlab_move_issue", {"state": "two\nlines"}, INVALID_ARGUMENTS),
        ("gitlab_move_issue", "not json", INVALID_ARGUMENTS),
        ("gitlab_add_comment", {"body": "  "}, INVALID_ARGUMENTS),
        ("gitlab_add_comment", {"body": "x" * 1_000_001}, INVALID_ARGUMENTS),
    ],
)
@respx.mock
async def test_bad_calls_fail_before_any_request(name: str, arguments: object, error: str) -> None:
    result = await make_tracker().execute_tool(name, arguments, session_issue())
    assert not result.success and result.output["error"] == error
    assert len(respx.calls) == 0


@respx.mock
async def test_tools_act_only_on_the_sessions_issue_of_this_project() -> None:
    tracker = make_tracker()
    other = replace(session_issue(), native_ref={"project": "acme/other", "iid": 1, "id": 1})
    mismatched = replace(session_issue(), id="2")
    for target in (other, mismatched, replace(session_issue(), native_ref=None)):
        result = await tracker.execute_tool("gitlab_add_comment", {"body": "x"}, target)
        assert result.output["error"] == tools.NOT_IN_SCOPE
    assert len(respx.calls) == 0


@respx.mock
async def test_failures_are_structured_and_never_leak_the_token() -> None:
    respx.put(f"{ISSUES}/1").mock(return_value=httpx.Response(403, json=error("403 Forbidden")))
    result = await make_tracker().execute_tool(
        "gitlab_move_issue", {"state": "Todo"}, session_issue()
    )
    assert not result.success and result.output["error"] == "tracker_status"
    assert TOKEN not in json.dumps(result.output)


@respx.mock
async def test_a_rate_limited_tool_call_blocks_later_calls_too() -> None:
    clock = FakeClock()
    post = respx.post(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(429, headers={"Retry-After": "20"})
    )
    tracker = make_tracker(clock=clock)
    for _ in range(2):
        result = await tracker.execute_tool("gitlab_add_comment", {"body": "x"}, session_issue())
        assert result.output["error"] == TRACKER_RATE_LIMITED
    assert post.call_count == 1


@respx.mock
async def test_an_unexpected_fault_costs_one_call_not_the_session() -> None:
    respx.put(f"{ISSUES}/1").mock(side_effect=RuntimeError("boom"))
    result = await make_tracker().execute_tool(
        "gitlab_move_issue", {"state": "Todo"}, session_issue()
    )
    assert not result.success and result.output["error"] == INTERNAL_ERROR

"""Projects v2 scope against respx: Status filtering, paging, refresh, moves, rate limits.

Every GraphQL request the tests see is recorded in `SENT` so the contract test can check it
against GitHub's schema as well as the documents in `adapters.github.queries`.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from symphony.base.issue import Issue
from symphony.tracker.contract import TRACKER_RATE_LIMITED, TRACKER_RESPONSE, TrackerError
from symphony_adapters.github import queries, tools
from tests.adapters.github.helpers import FakeClock, make_tracker
from tests.adapters.github.payloads import API

GRAPHQL = f"{API}/graphql"
PROJECT = {"project": {"owner": "acme", "number": 3}, "repository": None}
OPTIONS = [
    {"id": "opt-todo", "name": "Todo"},
    {"id": "opt-prog", "name": "In Progress"},
    {"id": "opt-review", "name": "Human Review"},
    {"id": "opt-done", "name": "Done"},
]


def item(
    item_id: str,
    status: str | None,
    *,
    number: int = 1,
    kind: str = "Issue",
    state: str = "OPEN",
    archived: bool = False,
    project: str = "PVT_1",
) -> dict[str, Any]:
    content: dict[str, Any] = {"__typename": kind}
    if kind == "Issue":
        content.update(
            id=f"I_{number}",
            number=number,
            title=f"Item {number}",
            body=None,
            url=f"https://github.com/acme/widgets/issues/{number}",
            createdAt="2026-01-01T00:00:00Z",
            updatedAt="2026-01-02T00:00:00Z",
            issueState=state,
            repository={"nameWithOwner": "acme/widgets"},
            labels={"nodes": [{"name": "P1"}]},
            assignees={"nodes": [{"login": "amy"}]},
        )
    return {
        "__typename": "ProjectV2Item",
        "id": item_id,
        "isArchived": archived,
        "project": {"id": project},
        "status": {"name": status, "optionId": "x"} if status else None,
        "content": content,
    }


class GraphQLFake:
    """Answers each operation by its name; records what was sent."""

    def __init__(self, pages: list[list[dict[str, Any]]], by_id: dict[str, Any] | None = None):
        self.pages = pages
        self.by_id = by_id or {}
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        payload = json.loads(request.content)
        self.sent.append(payload)
        query, variables = payload["query"], payload["variables"]
        if "ProjectOfOrganization" in query:
            field = {"id": "PVTSSF_1", "options": OPTIONS}
            data: Any = {"owner": {"projectV2": {"id": "PVT_1", "field": field}}}
        elif "ProjectItemsById" in query:
            data = {"nodes": [self.by_id.get(i) for i in variables["ids"]]}
        elif "ProjectItems" in query:
            index = int(variables["after"] or 0)
            more = index + 1 < len(self.pages)
            info = {"hasNextPage": more, "endCursor": str(index + 1) if more else None}
            data = {"node": {"items": {"pageInfo": info, "nodes": self.pages[index]}}}
        elif "SetItemStatus" in query:
            data = {"updateProjectV2ItemFieldValue": {"projectV2Item": {"id": variables["itemId"]}}}
        else:
            raise AssertionError(query)
        return httpx.Response(200, json={"data": data})


@respx.mock
async def test_state_read_pages_items_and_filters_by_status_client_side() -> None:
    fake = GraphQLFake(
        [
            [item("A", "Todo", number=1), item("B", "Done", number=2), item("C", None, number=3)],
            [
                item("D", "in progress", number=4),
                item("E", "Todo", kind="PullRequest"),
                item("F", "Todo", kind="DraftIssue"),
                item("G", "Todo", number=7, archived=True),
                item("H", "Todo", number=8, state="CLOSED"),
            ],
        ]
    )
    respx.post(GRAPHQL).mock(side_effect=fake)
    tracker = make_tracker({**PROJECT, "priority_labels": {"p1": 1}})
    issues = await tracker.fetch_issues_by_states(["Todo", "In Progress"])
    assert [(i.id, i.identifier, i.state, i.dispatchable) for i in issues] == [
        ("A", "acme/widgets#1", "Todo", True),
        ("D", "acme/widgets#4", "in progress", True),
        ("H", "acme/widgets#8", "Todo", False),
    ]
    first = issues[0]
    assert (first.priority, first.assignee_id, first.labels) == (1, "amy", ("p1",))
    assert first.native_ref == {
        "repository": "acme/widgets",
        "number": 1,
        "node_id": "I_1",
        "project_item_id": "A",
    }
    assert len(fake.sent) == 3  # project lookup once, then two pages
    assert fake.sent[2]["variables"]["after"] == "1"


@respx.mock
async def test_refresh_by_item_ids_omits_items_outside_the_project() -> None:
    fake = GraphQLFake(
        [],
        {
            "A": item("A", "In Progress", number=1),
            "B": item("B", "Todo", project="PVT_other"),
            "C": {"__typename": "Issue"},
        },
    )
    respx.post(GRAPHQL).mock(side_effect=fake)
    found = await make_tracker(PROJECT).fetch_issues_by_ids(["A", "B", "C", "gone", "A"])
    assert [(i.id, i.state) for i in found] == [("A", "In Progress")]
    assert fake.sent[-1]["variables"]["ids"] == ["A", "B", "C", "gone"]


@respx.mock
async def test_refresh_of_a_malformed_item_fails() -> None:
    broken = item("A", "Todo")
    broken["content"]["title"] = None
    respx.post(GRAPHQL).mock(side_effect=GraphQLFake([], {"A": broken}))
    with pytest.raises(TrackerError) as info:
        await make_tracker(PROJECT).fetch_issues_by_ids(["A"])
    assert info.value.category == TRACKER_RESPONSE


@respx.mock
async def test_graphql_rate_limited_error_blocks_the_client() -> None:
    clock = FakeClock()
    route = respx.post(GRAPHQL).mock(
        return_value=httpx.Response(
            200,
            json={"errors": [{"type": "RATE_LIMITED", "message": "API rate limit exceeded"}]},
            headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(clock.now) + 120)},
        )
    )
    tracker = make_tracker(PROJECT, clock=clock)
    for _ in range(2):
        with pytest.raises(TrackerError) as info:
            await tracker.fetch_issues_by_states(["Todo"])
        assert info.value.category == TRACKER_RATE_LIMITED
    assert route.call_count == 1


def project_issue() -> Issue:
    return Issue(
        id="A",
        identifier="acme/widgets#1",
        title="t",
        state="Todo",
        dispatchable=True,
        native_ref={"repository": "acme/widgets", "number": 1, "project_item_id": "A"},
    )


@respx.mock
async def test_move_sets_the_status_option_by_name() -> None:
    fake = GraphQLFake([], {"A": item("A", "Todo")})
    respx.post(GRAPHQL).mock(side_effect=fake)
    result = await make_tracker(PROJECT).execute_tool(
        "github_move_issue", {"state": "human review"}, project_issue()
    )
    assert result.success, result.output
    assert result.output == {
        "identifier": "acme/widgets#1",
        "state": "Human Review",
        "previous_state": "Todo",
        "changed": True,
    }
    mutation = fake.sent[-1]
    assert mutation["query"] == queries.SET_STATUS
    assert mutation["variables"] == {
        "projectId": "PVT_1",
        "itemId": "A",
        "fieldId": "PVTSSF_1",
        "optionId": "opt-review",
    }


@respx.mock
async def test_move_to_an_unknown_status_lists_the_options() -> None:
    respx.post(GRAPHQL).mock(side_effect=GraphQLFake([]))
    result = await make_tracker(PROJECT).execute_tool(
        "github_move_issue", {"state": "Shipped"}, project_issue()
    )
    assert not result.success
    assert result.output["error"] == tools.UNKNOWN_STATE
    assert "Todo, In Progress, Human Review, Done" in result.output["message"]


@respx.mock
async def test_project_comment_goes_to_the_underlying_issue() -> None:
    route = respx.post(f"{API}/repos/acme/widgets/issues/1/comments").mock(
        return_value=httpx.Response(201, json={"id": 3, "html_url": "https://x"})
    )
    result = await make_tracker(PROJECT).execute_tool(
        "github_add_comment", {"body": "hi"}, project_issue()
    )
    assert result.success
    assert route.call_count == 1


@respx.mock
async def test_a_missing_project_is_a_response_error() -> None:
    respx.post(GRAPHQL).mock(
        return_value=httpx.Response(200, json={"data": {"owner": {"projectV2": None}}})
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker(PROJECT).fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_RESPONSE
    assert "organization acme project 3" in info.value.message

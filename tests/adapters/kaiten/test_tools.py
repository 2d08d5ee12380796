"""The kaiten agent tools: specs, argument checks, the requests they send, and failures that
are structured, confined to the session's own card, and free of the token."""

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
from symphony_adapters.kaiten import tools
from tests.adapters.kaiten import payloads
from tests.adapters.kaiten.helpers import TOKEN, make_tracker
from tests.adapters.kaiten.payloads import API, BOARD, DOING, DONE, IN_PROGRESS, REVIEW

CARD = f"{API}/cards/42"


def issue(card_id: int = 42, board_id: int = BOARD, **ref: Any) -> Issue:
    return Issue(
        id=str(card_id),
        identifier=f"KT-{card_id}",
        title="t",
        state="In Progress",
        dispatchable=True,
        native_ref={"card_id": card_id, "board_id": board_id, "column_id": DOING, **ref},
    )


def mock_board() -> respx.Route:
    return respx.get(f"{API}/boards/{BOARD}/columns").mock(
        return_value=httpx.Response(200, json=payloads.columns())
    )


def test_three_tools_are_advertised_with_strict_schemas() -> None:
    specs = make_tracker().agent_tools()
    assert [s.name for s in specs] == list(tools.NAMES)
    for spec in specs:
        assert spec.input_schema["additionalProperties"] is False
    link = specs[2].input_schema
    assert link["required"] == ["url"] and "description" in link["properties"]


@respx.mock
async def test_move_card_patches_the_column_of_the_named_state() -> None:
    mock_board()
    patch = respx.patch(CARD).mock(
        return_value=httpx.Response(200, json=payloads.card(42, payloads.DONE, state=3))
    )
    result = await make_tracker().execute_tool(tools.MOVE_CARD, {"state": "done"}, issue())
    assert result.success, result.output
    assert json.loads(patch.calls[0].request.content) == {"column_id": DONE}
    assert result.output == {"identifier": "KT-42", "state": "Done", "column_id": DONE}


@respx.mock
async def test_move_to_a_column_with_sub_columns_lands_in_its_first_sub_column() -> None:
    mock_board()
    patch = respx.patch(CARD).mock(
        return_value=httpx.Response(200, json=payloads.card(42, DOING, state=2))
    )
    result = await make_tracker().execute_tool(tools.MOVE_CARD, {"state": "In Progress"}, issue())
    assert result.success and result.output["state"] == "In Progress"
    assert json.loads(patch.calls[0].request.content) == {"column_id": DOING}
    assert IN_PROGRESS != DOING


@respx.mock
async def test_move_to_a_sub_column_by_its_own_title() -> None:
    mock_board()
    patch = respx.patch(CARD).mock(
        return_value=httpx.Response(200, json=payloads.card(42, REVIEW, state=2))
    )
    result = await make_tracker(extra_states=("Review",)).execute_tool(
        tools.MOVE_CARD, '{"state": "Review"}', issue()
    )
    assert result.success and result.output["state"] == "Review"
    assert json.loads(patch.calls[0].request.content) == {"column_id": REVIEW}


@respx.mock
async def test_an_unknown_column_fails_listing_the_boards_columns() -> None:
    mock_board()
    patch = respx.patch(CARD)
    result = await make_tracker().execute_tool(tools.MOVE_CARD, {"state": "Shipped"}, issue())
    assert not result.success
    assert result.output["error"] == tools.UNKNOWN_STATE
    assert (
        "Backlog, In Progress, In Progress / Doing, In Progress / Review, Done"
        in (result.output["message"])
    )
    assert patch.call_count == 0


@respx.mock
async def test_add_comment_posts_the_text() -> None:
    post = respx.post(f"{CARD}/comments").mock(
        return_value=httpx.Response(200, json=payloads.comment(5, 42, "hi"))
    )
    result = await make_tracker().execute_tool(tools.ADD_COMMENT, {"body": "**hi**"}, issue())
    assert result.success
    assert result.output == {"identifier": "KT-42", "commented": True, "comment_id": 5}
    assert json.loads(post.calls[0].request.content) == {"text": "**hi**"}


@respx.mock
async def test_add_link_posts_url_and_optional_description_unless_the_card_has_it() -> None:
    url, other = "https://git.example/pr/1", "https://git.example/pr/2"
    linked = payloads.external_link(9, 42, url, "PR")
    respx.get(f"{CARD}/external-links").mock(
        side_effect=[httpx.Response(200, json=[]), httpx.Response(200, json=[linked])] * 2
    )
    post = respx.post(f"{CARD}/external-links").mock(return_value=httpx.Response(200, json=linked))
    tracker = make_tracker()
    result = await tracker.execute_tool(tools.ADD_LINK, {"url": url, "description": "PR"}, issue())
    assert result.success and result.output == {
        "identifier": "KT-42",
        "url": url,
        "link_id": 9,
        "already_linked": False,
    }
    assert json.loads(post.calls[0].request.content) == {"url": url, "description": "PR"}
    again = await tracker.execute_tool(tools.ADD_LINK, {"url": url}, issue())
    assert again.success and again.output["already_linked"] is True and post.call_count == 1
    await tracker.execute_tool(tools.ADD_LINK, {"url": other}, issue())
    assert json.loads(post.calls[1].request.content) == {"url": other}


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("kaiten_delete_card", {}, UNKNOWN_TOOL),
        (tools.MOVE_CARD, {}, INVALID_ARGUMENTS),
        (tools.MOVE_CARD, {"state": "  "}, INVALID_ARGUMENTS),
        (tools.MOVE_CARD, {"state": "a\nb"}, INVALID_ARGUMENTS),
        (tools.MOVE_CARD, {"state": "Done", "card_id": 7}, INVALID_ARGUMENTS),
        (tools.ADD_COMMENT, ["body"], INVALID_ARGUMENTS),
        (tools.ADD_COMMENT, {"body": "x" * 70_000}, INVALID_ARGUMENTS),
        (tools.ADD_LINK, {"url": "javascript:alert(1)"}, INVALID_ARGUMENTS),
        (tools.ADD_LINK, {"url": "https://x.example", "description": 3}, INVALID_ARGUMENTS),
    ],
)
@respx.mock
async def test_bad_calls_fail_without_a_request(name: str, arguments: Any, error: str) -> None:
    result = await make_tracker().execute_tool(name, arguments, issue())
    assert not result.success and result.output["error"] == error
    assert respx.calls.call_count == 0


@pytest.mark.parametrize(
    "target",
    [
        issue(board_id=99),
        Issue(id="42", identifier="KT-42", title="t", state="s", dispatchable=True),
        Issue(
            id="43",
            identifier="KT-43",
            title="t",
            state="s",
            dispatchable=True,
            native_ref={"card_id": 42, "board_id": BOARD},
        ),
    ],
)
@respx.mock
async def test_tools_act_only_on_a_card_of_the_configured_board(target: Issue) -> None:
    result = await make_tracker().execute_tool(tools.ADD_COMMENT, {"body": "x"}, target)
    assert not result.success and result.output["error"] == tools.NOT_IN_SCOPE
    assert respx.calls.call_count == 0


@respx.mock
async def test_provider_failures_become_structured_results_without_the_token() -> None:
    respx.post(f"{CARD}/comments").mock(
        return_value=httpx.Response(403, json={"message": f"no access for Bearer {TOKEN[:4]}"})
    )
    result = await make_tracker().execute_tool(tools.ADD_COMMENT, {"body": "x"}, issue())
    assert not result.success
    assert result.output["error"] == "tracker_status"
    assert TOKEN not in json.dumps(result.output)


@respx.mock
async def test_a_rate_limited_tool_call_says_when_to_retry() -> None:
    respx.post(f"{CARD}/comments").mock(
        return_value=httpx.Response(429, headers={"Retry-After": "12"})
    )
    result = await make_tracker().execute_tool(tools.ADD_COMMENT, {"body": "x"}, issue())
    assert not result.success
    assert result.output["error"] == "tracker_rate_limited"
    assert result.output["retry_after_s"] == 12


@respx.mock
async def test_an_unexpected_exception_costs_one_call_not_the_session() -> None:
    respx.post(f"{CARD}/comments").mock(side_effect=RuntimeError("boom"))
    result = await make_tracker().execute_tool(tools.ADD_COMMENT, {"body": "x"}, issue())
    assert not result.success and result.output["error"] == INTERNAL_ERROR

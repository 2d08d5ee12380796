"""GitLab reads: state lists, pagination, refresh by iids, normalization, blockers, malformed
records and rate limits, against respx mocks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx
from structlog.testing import capture_logs

from symphony.base.issue import BlockerRef
from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_RATE_LIMITED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    TrackerError,
)
from tests.adapters.gitlab.helpers import TOKEN, FakeClock, make_tracker
from tests.adapters.gitlab.payloads import BASE, ISSUES, PROJECT, error, issue, link


def page(items: list[Any], **headers: str) -> httpx.Response:
    return httpx.Response(200, json=items, headers=headers)


def no_links() -> None:
    respx.get(url__regex=rf"{ISSUES}/\d+/links").mock(return_value=httpx.Response(200, json=[]))


def params_of(route: respx.Route, index: int = 0) -> httpx.QueryParams:
    request: httpx.Request = route.calls[index].request
    return request.url.params


@respx.mock
async def test_active_states_are_read_per_label_and_always_opened_only() -> None:
    no_links()
    route = respx.get(ISSUES).mock(
        side_effect=lambda request: page(
            [issue(1, labels=["workflow::todo"])]
            if request.url.params["labels"] == "workflow::todo"
            else [issue(2, labels=["workflow::in progress", "Bug"])]
        )
    )
    found = await make_tracker().fetch_issues_by_states(["Todo", "In Progress"])
    assert [(i.id, i.state) for i in found] == [("1", "Todo"), ("2", "In Progress")]
    assert [i.author for i in found] == ["bob", "bob"]  # who opened each
    assert [params_of(route, n)["labels"] for n in range(2)] == [
        "workflow::todo",
        "workflow::in progress",
    ]
    for call in route.calls:
        assert call.request.url.params["state"] == "opened"
        assert call.request.url.params["per_page"] == "100"
        assert call.request.headers["PRIVATE-TOKEN"] == TOKEN
    # The project path travels as one encoded segment.
    assert "/projects/acme%2Fplatform%2Fwidgets/issues" in str(route.calls[0].request.url)


@respx.mock
async def test_an_issue_whose_labels_give_another_state_is_not_returned_twice_or_wrongly() -> None:
    no_links()
    both = issue(1, labels=["workflow::todo", "workflow::done"])
    respx.get(ISSUES).mock(return_value=page([both, issue(2, labels=["workflow::todo"])]))
    found = await make_tracker({"state_labels": {"Done": "workflow::done"}}).fetch_issues_by_states(
        ["Todo"]
    )
    assert [i.id for i in found] == ["2"]  # the terminal label wins over the active one


@respx.mock
async def test_the_closed_state_reads_closed_issues_newest_first() -> None:
    route = respx.get(ISSUES).mock(return_value=page([issue(5, state="closed")]))
    found = await make_tracker().fetch_issues_by_states(["done"])
    assert [(i.id, i.state) for i in found] == [("5", "Done")]
    params = params_of(route)
    assert (params["state"], params["order_by"], params["sort"]) == ("closed", "updated_at", "desc")
    assert "labels" not in params


@respx.mock
async def test_pagination_follows_x_next_page_until_it_is_empty() -> None:
    no_links()

    def answer(request: httpx.Request) -> httpx.Response:
        number = int(request.url.params.get("page", "1"))
        items = [issue(number, labels=["workflow::todo"])]
        # The last page still carries the header, empty; totals are absent (> 10,000 results).
        return page(items, **{"x-next-page": str(number + 1) if number < 3 else ""})

    route = respx.get(ISSUES).mock(side_effect=answer)
    found = await make_tracker().fetch_issues_by_states(["Todo"])
    assert [i.id for i in found] == ["1", "2", "3"]
    assert route.call_count == 3
    assert params_of(route, 2)["page"] == "3" and params_of(route, 2)["labels"] == "workflow::todo"


@respx.mock
async def test_pagination_follows_the_link_header_when_there_is_no_x_next_page() -> None:
    no_links()
    following = f"{ISSUES}?labels=workflow%3A%3Atodo&state=opened&per_page=100&page=2"
    route = respx.get(ISSUES).mock(
        side_effect=[
            page([issue(1, labels=["workflow::todo"])], link=f'<{following}>; rel="next"'),
            page([issue(2, labels=["workflow::todo"])], link=f'<{ISSUES}?page=1>; rel="first"'),
        ]
    )
    found = await make_tracker().fetch_issues_by_states(["Todo"])
    assert [i.id for i in found] == ["1", "2"]
    assert str(route.calls[1].request.url) == following


@respx.mock
async def test_a_pagination_loop_fails_with_tracker_pagination() -> None:
    no_links()
    respx.get(ISSUES).mock(
        return_value=page([issue(1, labels=["workflow::todo"])], **{"x-next-page": "2"})
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_PAGINATION


@respx.mock
async def test_refresh_asks_for_all_ids_in_one_request_with_iids() -> None:
    no_links()
    route = respx.get(ISSUES).mock(
        return_value=page(
            [
                issue(3, labels=["workflow::todo"]),
                issue(4, state="closed"),
                issue(6, labels=["bug"]),  # opened without a state label: outside the scope
            ]
        )
    )
    found = await make_tracker().fetch_issues_by_ids(["3", "4", "3", "6", "x-7", "9"])
    assert [(i.id, i.state) for i in found] == [("3", "Todo"), ("4", "Done")]
    assert route.call_count == 1
    params = params_of(route)
    assert params.get_list("iids[]") == ["3", "4", "6", "9"]
    assert params["state"] == "all"


@respx.mock
async def test_refresh_chunks_at_one_hundred_ids_and_empty_makes_no_request() -> None:
    route = respx.get(ISSUES).mock(return_value=page([]))
    tracker = make_tracker()
    assert await tracker.fetch_issues_by_ids([]) == []
    assert await tracker.fetch_issues_by_states([]) == []
    assert route.call_count == 0
    await tracker.fetch_issues_by_ids([str(n) for n in range(1, 151)])
    assert [len(params_of(route, n).get_list("iids[]")) for n in range(2)] == [100, 50]


@respx.mock
async def test_an_issue_is_normalized_from_the_rest_payload() -> None:
    no_links()
    item = issue(7, "  Fix it  ", labels=["workflow::todo", "Bug", "priority::2"], assignee="amy")
    respx.get(ISSUES).mock(return_value=page([item]))
    tracker = make_tracker({"priority_labels": {"Priority::2": 2, "priority::1": 1}})
    [found] = await tracker.fetch_issues_by_states(["Todo"])
    assert found.id == "7"
    assert found.identifier == f"{PROJECT}#7"
    assert found.title == "Fix it"
    assert found.state == "Todo"
    assert found.description == "Please do the thing."
    assert found.priority == 2
    assert found.labels == ("workflow::todo", "bug", "priority::2")
    assert found.url == f"{BASE}/{PROJECT}/-/issues/7"
    assert found.assignee_id == "amy"
    assert found.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert found.updated_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert found.native_ref == {"project": PROJECT, "iid": 7, "id": 42007}
    assert found.dispatchable and found.blocked_by == ()


@respx.mock
async def test_identifier_falls_back_to_the_web_url_path_then_the_configured_project() -> None:
    no_links()
    bare = issue(8, labels=["workflow::todo"])
    del bare["references"]
    nothing = {**bare, "iid": 9, "web_url": None}
    respx.get(ISSUES).mock(return_value=page([bare, nothing]))
    found = await make_tracker().fetch_issues_by_states(["Todo"])
    assert [i.identifier for i in found] == [f"{PROJECT}#8", f"{PROJECT}#9"]


@respx.mock
async def test_an_open_blocker_makes_the_issue_not_dispatchable() -> None:
    blocked = issue(1, labels=["workflow::todo"])
    free = issue(2, labels=["workflow::todo"])
    respx.get(ISSUES).mock(return_value=page([blocked, free]))
    respx.get(f"{ISSUES}/1/links").mock(
        return_value=page(
            [
                link(issue(5, labels=["workflow::in progress"])),
                link(issue(6, state="closed")),
                link(issue(7, project="acme/other", project_id=43), "is_blocked_by"),
                link(issue(8), "relates_to"),
                link(issue(9), "blocks"),
            ]
        )
    )
    respx.get(f"{ISSUES}/2/links").mock(
        return_value=page([link(issue(6, labels=["workflow::done"]))])
    )
    one, two = await make_tracker(
        {"state_labels": {"Done": "workflow::done"}}
    ).fetch_issues_by_states(["Todo"])
    assert one.blocked_by == (
        BlockerRef("5", f"{PROJECT}#5", "In Progress"),
        BlockerRef("6", f"{PROJECT}#6", "Done"),
        BlockerRef("43007", "acme/other#7", "opened"),
    )
    assert one.dispatchable is False
    assert two.blocked_by == (BlockerRef("6", f"{PROJECT}#6", "Done"),)
    assert two.dispatchable is True


@respx.mock
async def test_without_the_links_feature_there_are_no_blockers() -> None:
    respx.get(ISSUES).mock(return_value=page([issue(1, labels=["workflow::todo"])]))
    respx.get(f"{ISSUES}/1/links").mock(return_value=httpx.Response(403, json=error("403")))
    [found] = await make_tracker().fetch_issues_by_states(["Todo"])
    assert found.dispatchable and found.blocked_by == ()


@respx.mock
async def test_blockers_false_reads_no_links() -> None:
    respx.get(ISSUES).mock(return_value=page([issue(1, labels=["workflow::todo"])]))
    links = respx.get(f"{ISSUES}/1/links")
    [found] = await make_tracker({"blockers": False}).fetch_issues_by_states(["Todo"])
    assert found.dispatchable and links.call_count == 0


@respx.mock
async def test_malformed_records_are_skipped_and_logged_once_per_problem() -> None:
    no_links()
    bad = {**issue(2, labels=["workflow::todo"]), "title": "  "}
    respx.get(ISSUES).mock(return_value=page([issue(1, labels=["workflow::todo"]), bad, "junk"]))
    tracker = make_tracker()
    with capture_logs() as logs:
        for _ in range(3):
            found = await tracker.fetch_issues_by_states(["Todo"])
            assert [i.id for i in found] == ["1"]
    skipped = [entry for entry in logs if entry["event"] == "issue skipped"]
    assert len(skipped) == 2
    assert {entry["reason"] for entry in skipped} == {
        "issue #2 has no title",
        "issue record is not an object",
    }


@respx.mock
async def test_a_malformed_record_fails_the_refresh() -> None:
    respx.get(ISSUES).mock(return_value=page([{**issue(2), "state": "locked"}]))
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_ids(["2"])
    assert info.value.category == TRACKER_RESPONSE


@respx.mock
async def test_a_list_that_is_not_an_array_is_a_response_error() -> None:
    respx.get(ISSUES).mock(return_value=httpx.Response(200, json={"message": "odd"}))
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_RESPONSE


@respx.mock
async def test_a_429_with_retry_after_blocks_every_call_until_then() -> None:
    clock = FakeClock()
    route = respx.get(ISSUES).mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "30", "RateLimit-Remaining": "0"}),
            page([]),
        ]
    )
    tracker = make_tracker(clock=clock)
    with pytest.raises(TrackerError) as info:
        await tracker.fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_RATE_LIMITED and info.value.retry_after_s == 30
    clock.now += 29
    with pytest.raises(TrackerError) as again:
        await tracker.fetch_issues_by_ids(["1"])
    assert again.value.category == TRACKER_RATE_LIMITED
    assert route.call_count == 1  # nothing was sent while blocked
    clock.now += 1
    assert await tracker.fetch_issues_by_states(["Todo"]) == []
    assert route.call_count == 2


@respx.mock
async def test_a_429_with_only_ratelimit_reset_blocks_until_that_epoch() -> None:
    clock = FakeClock()
    reset = int(clock.now) + 45
    route = respx.get(ISSUES).mock(
        side_effect=[
            httpx.Response(
                429,
                headers={"RateLimit-Remaining": "0", "RateLimit-Reset": str(reset)},
                json={"message": {"error": "This endpoint has been requested too many times."}},
            ),
            page([]),
        ]
    )
    tracker = make_tracker(clock=clock)
    with pytest.raises(TrackerError) as info:
        await tracker.fetch_issues_by_states(["Todo"])
    assert info.value.retry_after_s == pytest.approx(45)
    clock.now = reset - 1
    with pytest.raises(TrackerError):
        await tracker.fetch_issues_by_states(["Todo"])
    assert route.call_count == 1
    clock.now = reset
    await tracker.fetch_issues_by_states(["Todo"])
    assert route.call_count == 2
    assert tracker.http.quota.remaining is None or tracker.http.quota.remaining >= 0


@respx.mock
async def test_status_errors_name_gitlab_and_never_the_token() -> None:
    respx.get(ISSUES).mock(
        return_value=httpx.Response(401, json=error(f"401 Unauthorized {TOKEN[:0]}"))
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_STATUS
    assert "GitLab" in info.value.message and "401" in info.value.message
    assert TOKEN not in info.value.message


@respx.mock
async def test_a_labelled_closed_state_also_reads_opened_issues_with_that_label() -> None:
    no_links()
    route = respx.get(ISSUES).mock(
        side_effect=[
            page([issue(5, state="closed")]),
            page([issue(6, labels=["workflow::done"])]),
        ]
    )
    tracker = make_tracker({"state_labels": {"Done": "workflow::done"}})
    found = await tracker.fetch_issues_by_states(["Done"])
    assert [(i.id, i.state) for i in found] == [("5", "Done"), ("6", "Done")]
    assert params_of(route, 0)["state"] == "closed"
    assert (params_of(route, 1)["state"], params_of(route, 1)["labels"]) == (
        "opened",
        "workflow::done",
    )

"""Label scope reads against respx: filtering, pagination, ETags, refresh, normalization,
blockers, malformed records and rate limits."""

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
from tests.adapters.github.helpers import ISSUES, TOKEN, FakeClock, make_tracker
from tests.adapters.github.payloads import REPO, error, issue


def by_label(pages: dict[str, list[Any]]) -> Any:
    """A respx side effect answering the list call by its `labels` (or `state`) filter."""

    def answer(request: httpx.Request) -> httpx.Response:
        key = request.url.params.get("labels") or request.url.params["state"]
        return httpx.Response(200, json=pages.get(key, []))

    return answer


@respx.mock
async def test_reads_one_label_per_active_state_and_keeps_provider_spelling() -> None:
    respx.get(ISSUES).mock(
        side_effect=by_label(
            {
                "status:todo": [issue(1, labels=["status:todo", "Bug "])],
                "status:in-progress": [issue(2, labels=["status:in-progress"])],
            }
        )
    )
    issues = await make_tracker().fetch_issues_by_states(["Todo", "In Progress"])
    assert [(i.identifier, i.state, i.labels) for i in issues] == [
        (f"{REPO}#1", "Todo", ("status:todo", "bug")),
        (f"{REPO}#2", "In Progress", ("status:in-progress",)),
    ]
    assert [i.author for i in issues] == ["octocat", "octocat"]  # who opened each
    calls = [dict(c.request.url.params) for c in respx.calls]
    assert calls == [
        {"state": "open", "labels": "status:todo", "per_page": "100"},
        {"state": "open", "labels": "status:in-progress", "per_page": "100"},
    ]
    assert all(c.request.headers["authorization"] == f"Bearer {TOKEN}" for c in respx.calls)


@respx.mock
async def test_pull_requests_are_skipped() -> None:
    respx.get(ISSUES).mock(
        side_effect=by_label(
            {
                "status:todo": [
                    issue(1, labels=["status:todo"]),
                    issue(2, labels=["status:todo"], pull_request=True),
                ]
            }
        )
    )
    issues = await make_tracker().fetch_issues_by_states(["Todo"])
    assert [i.id for i in issues] == ["1"]


async def test_empty_state_and_id_lists_make_no_request() -> None:
    with respx.mock(assert_all_called=False) as mock:
        tracker = make_tracker()
        assert await tracker.fetch_issues_by_states([]) == []
        assert await tracker.fetch_issues_by_ids([]) == []
        assert not mock.calls


@respx.mock
async def test_pagination_follows_the_link_header_verbatim() -> None:
    following = "https://api.github.com/repositories/42/issues?labels=status%3Atodo&page=2"
    first = respx.get(ISSUES).mock(
        return_value=httpx.Response(
            200,
            json=[issue(1, labels=["status:todo"])],
            headers={"Link": f'<{following}>; rel="next", <{following}>; rel="last"'},
        )
    )
    second = respx.get(following).mock(
        return_value=httpx.Response(200, json=[issue(2, labels=["status:todo"])])
    )
    issues = await make_tracker().fetch_issues_by_states(["Todo"])
    assert [i.id for i in issues] == ["1", "2"]
    assert first.call_count == second.call_count == 1


@respx.mock
async def test_a_next_link_that_loops_fails_with_tracker_pagination() -> None:
    following = f"{ISSUES}?labels=status%3Atodo&page=2"
    looping = httpx.Response(200, json=[], headers={"Link": f'<{following}>; rel="next"'})
    respx.get(ISSUES).mock(return_value=looping)
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_PAGINATION


@respx.mock
async def test_second_poll_is_conditional_and_a_304_reuses_the_data_without_quota() -> None:
    etag = 'W/"abc123"'
    route = respx.get(ISSUES).mock(
        side_effect=[
            httpx.Response(200, json=[issue(1, labels=["status:todo"])], headers={"ETag": etag}),
            httpx.Response(304, headers={"ETag": etag}),
        ]
    )
    tracker = make_tracker()
    first = await tracker.fetch_issues_by_states(["Todo"])
    second = await tracker.fetch_issues_by_states(["Todo"])
    assert [i.id for i in second] == [i.id for i in first] == ["1"]
    assert "if-none-match" not in route.calls[0].request.headers
    assert route.calls[1].request.headers["if-none-match"] == etag
    quota = tracker.http.quota
    assert (quota.requests, quota.not_modified) == (2, 1)  # quota points spent: 1


@respx.mock
async def test_closed_state_reads_closed_issues_newest_first_within_the_page_limit() -> None:
    following = f"{ISSUES}?state=closed&page=2"
    route = respx.get(ISSUES).mock(
        return_value=httpx.Response(
            200,
            json=[issue(5, state="closed", labels=["status:in-progress"])],
            headers={"Link": f'<{following}>; rel="next"'},
        )
    )
    tracker = make_tracker({"closed_page_limit": 1})
    issues = await tracker.fetch_issues_by_states(["done"])
    assert [(i.id, i.state) for i in issues] == [("5", "Done")]
    assert dict(route.calls[0].request.url.params) == {
        "state": "closed",
        "sort": "updated",
        "direction": "desc",
        "per_page": "100",
    }
    assert route.call_count == 1


@respx.mock
async def test_normalization_of_a_rest_issue() -> None:
    respx.get(ISSUES).mock(
        side_effect=by_label(
            {"status:todo": [issue(7, "  Fix it ", labels=["status:todo", "P2"], assignee="amy")]}
        )
    )
    tracker = make_tracker({"priority_labels": {"p1": 1, "P2": 2}})
    [found] = await tracker.fetch_issues_by_states(["Todo"])
    assert found.id == "7"
    assert found.identifier == "acme/widgets#7"
    assert found.title == "Fix it"
    assert found.description == "Please do the thing."
    assert found.priority == 2
    assert found.assignee_id == "amy"
    assert found.url == "https://github.com/acme/widgets/issues/7"
    assert found.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert found.updated_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert found.branch_name is None
    assert found.dispatchable is True
    assert found.native_ref == {"repository": REPO, "number": 7, "node_id": "I_node7"}


@respx.mock
async def test_open_blocker_makes_an_issue_not_dispatchable_and_closed_one_does_not() -> None:
    respx.get(ISSUES).mock(
        side_effect=by_label(
            {
                "status:todo": [
                    issue(1, labels=["status:todo"], blocked_by=1),
                    issue(2, labels=["status:todo"], blocked_by=1, open_blockers=0),
                    issue(3, labels=["status:todo"]),
                ]
            }
        )
    )
    one = respx.get(f"{ISSUES}/1/dependencies/blocked_by").mock(
        return_value=httpx.Response(200, json=[issue(9, labels=["status:in-progress"])])
    )
    respx.get(f"{ISSUES}/2/dependencies/blocked_by").mock(
        return_value=httpx.Response(200, json=[issue(8, state="closed", repo="acme/other")])
    )
    issues = {i.id: i for i in await make_tracker().fetch_issues_by_states(["Todo"])}
    assert issues["1"].blocked_by == (BlockerRef("9", "acme/widgets#9", "In Progress"),)
    assert issues["1"].dispatchable is False
    assert issues["2"].blocked_by == (BlockerRef("I_node8", "acme/other#8", "Done"),)
    assert issues["2"].dispatchable is True
    assert issues["3"].dispatchable is True
    assert one.call_count == 1  # issue 3 has no blockers: no dependency request


@respx.mock
async def test_malformed_items_are_skipped_and_logged_once() -> None:
    broken = issue(3, labels=["status:todo"])
    del broken["title"]
    respx.get(ISSUES).mock(
        side_effect=by_label({"status:todo": [issue(1, labels=["status:todo"]), broken, "junk"]})
    )
    tracker = make_tracker()
    with capture_logs() as logs:
        first = await tracker.fetch_issues_by_states(["Todo"])
        await tracker.fetch_issues_by_states(["Todo"])
    assert [i.id for i in first] == ["1"]
    skipped = [entry for entry in logs if entry["event"] == "issue skipped"]
    assert sorted(entry["reason"] for entry in skipped) == [
        "issue #3 has no title",
        "issue record is not an object",
    ]


@respx.mock
async def test_refresh_returns_current_snapshots_and_omits_what_left_the_scope() -> None:
    respx.get(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["status:in-progress"]))
    )
    respx.get(f"{ISSUES}/2").mock(return_value=httpx.Response(200, json=issue(2, state="closed")))
    respx.get(f"{ISSUES}/3").mock(return_value=httpx.Response(404, json=error("Not Found")))
    respx.get(f"{ISSUES}/4").mock(return_value=httpx.Response(200, json=issue(4, labels=["bug"])))
    respx.get(f"{ISSUES}/5").mock(
        return_value=httpx.Response(200, json=issue(5, repo="acme/elsewhere"))
    )
    respx.get(f"{ISSUES}/6").mock(return_value=httpx.Response(410, json=error("Gone")))
    found = await make_tracker().fetch_issues_by_ids(["1", "2", "1", "3", "4", "5", "6", "x"])
    assert [(i.id, i.state) for i in found] == [("1", "In Progress"), ("2", "Done")]
    assert respx.calls.call_count == 6  # de-duplicated, and "x" is no issue number


@respx.mock
async def test_refresh_is_conditional_per_issue() -> None:
    route = respx.get(f"{ISSUES}/1").mock(
        side_effect=[
            httpx.Response(200, json=issue(1, labels=["status:todo"]), headers={"ETag": '"e1"'}),
            httpx.Response(304),
        ]
    )
    tracker = make_tracker()
    await tracker.fetch_issues_by_ids(["1"])
    [again] = await tracker.fetch_issues_by_ids(["1"])
    assert again.state == "Todo"
    assert route.calls[1].request.headers["if-none-match"] == '"e1"'


@respx.mock
async def test_refresh_of_a_malformed_issue_fails_with_tracker_response() -> None:
    broken = issue(1, labels=["status:todo"])
    broken["state"] = "weird"
    respx.get(f"{ISSUES}/1").mock(return_value=httpx.Response(200, json=broken))
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_ids(["1"])
    assert info.value.category == TRACKER_RESPONSE


@respx.mock
async def test_primary_rate_limit_403_blocks_until_reset_without_spending_requests() -> None:
    clock = FakeClock()
    route = respx.get(ISSUES).mock(
        return_value=httpx.Response(
            403,
            json=error("API rate limit exceeded"),
            headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(clock.now) + 600)},
        )
    )
    tracker = make_tracker(clock=clock)
    with pytest.raises(TrackerError) as info:
        await tracker.fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_RATE_LIMITED
    assert info.value.retry_after_s == pytest.approx(600)
    clock.now += 300
    with pytest.raises(TrackerError) as again:
        await tracker.fetch_issues_by_states(["Todo"])
    assert again.value.category == TRACKER_RATE_LIMITED
    assert route.call_count == 1


@respx.mock
async def test_secondary_rate_limit_429_honours_retry_after() -> None:
    respx.get(f"{ISSUES}/1").mock(
        return_value=httpx.Response(
            429, json=error("secondary rate limit"), headers={"retry-after": "45"}
        )
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_ids(["1"])
    assert info.value.category == TRACKER_RATE_LIMITED
    assert info.value.retry_after_s == pytest.approx(45)


@respx.mock
async def test_bad_credentials_are_a_status_error_that_never_shows_the_token() -> None:
    respx.get(ISSUES).mock(return_value=httpx.Response(401, json=error("Bad credentials")))
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_STATUS
    assert "401" in info.value.message
    assert TOKEN not in info.value.message


@respx.mock
async def test_a_list_answer_that_is_not_a_list_is_a_response_error() -> None:
    respx.get(ISSUES).mock(return_value=httpx.Response(200, json={"message": "odd"}))
    with pytest.raises(TrackerError) as info:
        await make_tracker().fetch_issues_by_states(["Todo"])
    assert info.value.category == TRACKER_RESPONSE


@respx.mock
async def test_a_closed_state_with_a_configured_label_also_reads_open_issues_with_it() -> None:
    respx.get(ISSUES).mock(
        side_effect=by_label(
            {
                "closed": [issue(1, state="closed")],
                "status:done": [issue(2, labels=["status:done"])],
            }
        )
    )
    tracker = make_tracker({"state_labels": {"Done": "status:done"}})
    issues = await tracker.fetch_issues_by_states(["Done"])
    assert [(i.id, i.state) for i in issues] == [("1", "Done"), ("2", "Done")]

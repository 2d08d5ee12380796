"""Candidate and refresh reads: scope filters, paging, normalization, dispatchability, malformed
nodes, and how Linear's failures map to error categories."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from structlog.testing import capture_logs

from symphony.base.issue import BlockerRef
from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_RATE_LIMITED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    TrackerError,
)
from symphony_adapters.linear import queries
from symphony_adapters.linear import tracker as tracker_module
from tests.adapters.linear.conftest import MakeTracker
from tests.adapters.linear.fake_linear import API_KEY, FakeLinear

ACTIVE = ["Todo", "In Progress"]


async def test_team_scope_filters_by_team_key_and_state_names(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    fake.add("ENG-1")
    fake.add("ENG-2", state="In Progress", creator=None)  # opened by an integration
    fake.add("ENG-3", state="Backlog")
    fake.add("OPS-1")
    issues = await make_tracker().fetch_issues_by_states(ACTIVE)
    assert [i.identifier for i in issues] == ["ENG-1", "ENG-2"]
    assert [i.author for i in issues] == ["Ada Lovelace", None]
    name, variables = fake.requests[0]
    assert name == "SymphonyTeamIssues"
    assert variables == {"teamKey": "ENG", "states": ACTIVE, "first": 50, "after": None}
    # A personal API key is sent as it is: "Bearer" is for OAuth tokens only.
    assert fake.headers_seen[0]["authorization"] == API_KEY


async def test_project_scope_filters_by_project_slug(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    fake.add("ENG-1", project="roadmap42")
    fake.add("ENG-2", project="other")
    fake.add("OPS-1", project="roadmap42")
    tracker = make_tracker(team_key=None, project_slug="roadmap42")
    issues = await tracker.fetch_issues_by_states(["Todo"])
    assert [i.identifier for i in issues] == ["ENG-1", "OPS-1"]
    assert fake.requests[0] == (
        "SymphonyProjectIssues",
        {"slug": "roadmap42", "states": ["Todo"], "first": 50, "after": None},
    )


async def test_pagination_follows_cursors_and_preserves_order(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    for n in range(1, 6):
        fake.add(f"ENG-{n}", state="Todo" if n % 2 else "In Progress")
    fake.page_cap = 2  # Linear may return fewer than `first`
    issues = await make_tracker().fetch_issues_by_states(ACTIVE)
    assert [i.identifier for i in issues] == [f"ENG-{n}" for n in range(1, 6)]
    assert [v["after"] for _, v in fake.requests] == [None, "2", "4"]


async def test_an_issue_seen_on_two_pages_is_returned_once(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    one, two = fake.add("ENG-1"), fake.add("ENG-2")
    page = {"hasNextPage": True, "endCursor": "c1"}
    fake.fail_next(200, {"data": {"issues": {"nodes": [fake.node(one)], "pageInfo": page}}})
    last = {"hasNextPage": False, "endCursor": None}
    nodes = [fake.node(one), fake.node(two)]
    fake.fail_next(200, {"data": {"issues": {"nodes": nodes, "pageInfo": last}}})
    issues = await make_tracker().fetch_issues_by_states(ACTIVE)
    assert [i.identifier for i in issues] == ["ENG-1", "ENG-2"]


@pytest.mark.parametrize("cursor", [None, "", "same"])
async def test_more_pages_without_a_new_cursor_is_a_pagination_error(
    fake: FakeLinear, make_tracker: MakeTracker, cursor: str | None
) -> None:
    page = {"hasNextPage": True, "endCursor": "same"}
    fake.fail_next(200, {"data": {"issues": {"nodes": [], "pageInfo": page}}})
    bad = {"hasNextPage": True, "endCursor": cursor}
    fake.fail_next(200, {"data": {"issues": {"nodes": [], "pageInfo": bad}}})
    with pytest.raises(TrackerError) as err:
        await make_tracker().fetch_issues_by_states(ACTIVE)
    assert err.value.category == TRACKER_PAGINATION


async def test_a_listing_that_never_ends_is_cut_off(
    fake: FakeLinear, make_tracker: MakeTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracker_module, "MAX_PAGES", 3)
    for n in range(1, 10):
        fake.add(f"ENG-{n}")
    fake.page_cap = 1
    with pytest.raises(TrackerError) as err:
        await make_tracker().fetch_issues_by_states(ACTIVE)
    assert err.value.category == TRACKER_PAGINATION and len(fake.requests) == 3


async def test_empty_inputs_make_no_request(fake: FakeLinear, make_tracker: MakeTracker) -> None:
    fake.add("ENG-1")
    tracker = make_tracker(assignee="me")
    assert await tracker.fetch_issues_by_states([]) == []
    assert await tracker.fetch_issues_by_ids([]) == []
    assert fake.requests == []


async def test_refresh_asks_for_all_ids_in_one_request(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    a, b = fake.add("ENG-1"), fake.add("ENG-2", state="Done")
    issues = await make_tracker().fetch_issues_by_ids([a.id, b.id, a.id, "uuid-gone"])
    assert sorted(i.identifier for i in issues) == ["ENG-1", "ENG-2"]
    assert fake.requests == [("SymphonyIssuesById", {"ids": [a.id, b.id, "uuid-gone"], "first": 3})]


async def test_refresh_of_many_ids_is_chunked(fake: FakeLinear, make_tracker: MakeTracker) -> None:
    ids = [fake.add(f"ENG-{n}").id for n in range(1, 121)]
    issues = await make_tracker().fetch_issues_by_ids(ids)
    assert len(issues) == 120
    assert [v["first"] for _, v in fake.requests] == [50, 50, 20]


async def test_refresh_omits_issues_that_left_the_scope(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    stays, moved = fake.add("ENG-1"), fake.add("ENG-2", project="elsewhere")
    tracker = make_tracker(team_key=None, project_slug="proj1slug")
    issues = await tracker.fetch_issues_by_ids([stays.id, moved.id])
    assert [i.identifier for i in issues] == ["ENG-1"]


async def test_nodes_are_normalized(fake: FakeLinear, make_tracker: MakeTracker) -> None:
    issue = fake.add(
        "ENG-7",
        priority=2,
        labels=["Backend", " backend ", "UI"],
        description="Fix it",
        assignee="user-9",
    )
    [got] = await make_tracker().fetch_issues_by_ids([issue.id])
    assert got.id == "uuid-eng-7" and got.identifier == "ENG-7" and got.state == "Todo"
    assert got.title == "Ticket ENG-7" and got.description == "Fix it"
    assert got.priority == 2 and got.labels == ("backend", "ui")
    assert got.branch_name == "eng-7-work"
    assert got.url == "https://linear.app/acme/issue/ENG-7"
    assert got.assignee_id == "user-9"
    assert got.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert got.dispatchable is True and got.blocked_by == ()
    assert got.native_ref == {
        "team_id": "team-eng",
        "team_key": "ENG",
        "state_id": "state-eng-todo",
        "state_type": "unstarted",
        "project_id": "project-proj1slug",
        "project_slug_id": "proj1slug",
    }


@pytest.mark.parametrize(("value", "normalized"), [(0, None), (1, 1), (4, 4)])
async def test_priority_zero_means_no_priority(
    fake: FakeLinear, make_tracker: MakeTracker, value: int, normalized: int | None
) -> None:
    issue = fake.add("ENG-1", priority=value)
    [got] = await make_tracker().fetch_issues_by_ids([issue.id])
    assert got.priority == normalized


async def test_an_open_blocker_makes_an_issue_not_dispatchable(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    fake.add("ENG-1", state="Backlog")
    fake.add("ENG-2", state="Done")
    fake.add("OPS-1", state="Shipped")  # another team's finished state, named differently
    fake.add("ENG-3", blocked_by=["ENG-1"])
    fake.add("ENG-4", blocked_by=["ENG-2", "OPS-1"])
    issues = {i.identifier: i for i in await make_tracker().fetch_issues_by_states(["Todo"])}
    assert issues["ENG-3"].dispatchable is False
    assert issues["ENG-3"].blocked_by == (BlockerRef("uuid-eng-1", "ENG-1", "Backlog"),)
    assert issues["ENG-4"].dispatchable is True
    assert [b.identifier for b in issues["ENG-4"].blocked_by] == ["ENG-2", "OPS-1"]


async def test_assignee_me_is_resolved_once_and_others_issues_are_not_dispatchable(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    fake.add("ENG-1", assignee="user-me")
    fake.add("ENG-2", assignee="user-other")
    fake.add("ENG-3")
    tracker = make_tracker(assignee="me")
    for _ in range(2):
        issues = {i.identifier: i for i in await tracker.fetch_issues_by_states(ACTIVE)}
        # Candidates include every active issue; dispatchable says which are ours.
        assert {k: v.dispatchable for k, v in issues.items()} == {
            "ENG-1": True,
            "ENG-2": False,
            "ENG-3": False,
        }
    assert fake.operations().count("SymphonyViewer") == 1


async def test_assignee_given_as_user_id_needs_no_viewer_query(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    issue = fake.add("ENG-1", assignee="user-other")
    [got] = await make_tracker(assignee="user-other").fetch_issues_by_ids([issue.id])
    assert got.dispatchable is True
    assert "SymphonyViewer" not in fake.operations()


async def test_malformed_nodes_are_skipped_by_state_reads_and_logged_once(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    fake.add("ENG-1")
    fake.add("ENG-2")
    fake.patch_node("ENG-2", title=None)
    tracker = make_tracker()
    with capture_logs() as logs:
        for _ in range(2):
            issues = await tracker.fetch_issues_by_states(ACTIVE)
            assert [i.identifier for i in issues] == ["ENG-1"]
        fake.patches.clear()
        assert len(await tracker.fetch_issues_by_states(ACTIVE)) == 2
    skipped = [e for e in logs if e["event"] == "linear issue skipped"]
    assert len(skipped) == 1 and skipped[0]["log_level"] == "warning"
    assert skipped[0]["issue_id"] == "uuid-eng-2" and "title" in skipped[0]["reason"]
    assert any(e["event"] == "linear issue readable again" for e in logs)


@pytest.mark.parametrize("patch", [{"id": None}, {"identifier": ""}, {"state": None}])
async def test_a_malformed_requested_node_fails_the_refresh(
    fake: FakeLinear, make_tracker: MakeTracker, patch: dict[str, object]
) -> None:
    issue = fake.add("ENG-1")
    fake.patch_node("ENG-1", **patch)
    with pytest.raises(TrackerError) as err:
        await make_tracker().fetch_issues_by_ids([issue.id])
    assert err.value.category == TRACKER_RESPONSE


async def test_http_429_blocks_the_client_until_the_reset(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    fake.fail_next(429, {"errors": [{"message": "slow down"}]}, {"retry-after": "30"})
    tracker = make_tracker()
    with pytest.raises(TrackerError) as err:
        await tracker.fetch_issues_by_states(ACTIVE)
    assert err.value.category == TRACKER_RATE_LIMITED and err.value.retry_after_s == 30
    with pytest.raises(TrackerError) as again:
        await tracker.fetch_issues_by_ids(["uuid-eng-1"])
    assert again.value.category == TRACKER_RATE_LIMITED
    assert len(fake.requests) == 1  # the blocked call spent nothing


@pytest.mark.parametrize(
    "extensions", [{"type": "ratelimited"}, {"code": "RATELIMITED"}, {"type": "Ratelimited"}]
)
async def test_a_ratelimited_graphql_error_blocks_until_the_millisecond_reset(
    fake: FakeLinear, make_tracker: MakeTracker, extensions: dict[str, str]
) -> None:
    import time

    reset_ms = int((time.time() + 120) * 1000)
    error = {"message": "Rate limit exceeded", "extensions": extensions}
    headers = {"x-ratelimit-requests-remaining": "0", "x-ratelimit-requests-reset": str(reset_ms)}
    fake.fail_next(400, {"errors": [error]}, headers)
    tracker = make_tracker()
    with pytest.raises(TrackerError) as err:
        await tracker.fetch_issues_by_states(ACTIVE)
    assert err.value.category == TRACKER_RATE_LIMITED
    assert err.value.retry_after_s == pytest.approx(120, abs=5)
    with pytest.raises(TrackerError):
        await tracker.fetch_issues_by_states(ACTIVE)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            {
                "errors": [
                    {
                        "message": f"Authentication required: bad key {API_KEY}",
                        "extensions": {"type": "authentication error"},
                    }
                ]
            },
        ),
        (401, {"message": "unauthorized"}),
        (200, {"errors": [{"message": "no", "extensions": {"code": "FORBIDDEN"}}]}),
    ],
)
async def test_authentication_failures_are_status_errors_that_never_show_the_key(
    fake: FakeLinear, make_tracker: MakeTracker, status: int, body: object
) -> None:
    fake.fail_next(status, body)
    with pytest.raises(TrackerError) as err:
        await make_tracker().fetch_issues_by_states(ACTIVE)
    assert err.value.category == TRACKER_STATUS
    assert API_KEY not in err.value.message and API_KEY not in str(err.value)


@pytest.mark.parametrize(
    "body",
    [
        {"errors": [{"message": "Field 'nope' does not exist"}]},
        {"data": None},
        {"data": {"issues": None}},
        {"data": {"issues": {"nodes": "many"}}},
        ["not", "an", "object"],
    ],
)
async def test_unusable_answers_are_response_errors(
    fake: FakeLinear, make_tracker: MakeTracker, body: object
) -> None:
    fake.fail_next(200, body)
    with pytest.raises(TrackerError) as err:
        await make_tracker().fetch_issues_by_states(ACTIVE)
    assert err.value.category == TRACKER_RESPONSE


def test_page_sizes_stay_within_linears_limits() -> None:
    assert queries.PAGE_SIZE <= 100 and queries.STATES_PER_TEAM <= 100

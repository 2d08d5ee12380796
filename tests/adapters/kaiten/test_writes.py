"""The daemon's writes on a Kaiten board: moves (the move tool's own code), comments, new cards
with their blockers, the board's states, and how refusals and failures are categorised. Most
tests use respx mocks and a fake clock; the last ones run against the fake Kaiten over HTTP,
which counts arrivals as Kaiten does."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
import respx

from symphony.base.issue import Issue
from symphony.tracker.contract import (
    TRACKER_RATE_LIMITED,
    TRACKER_REJECTED,
    TRACKER_REQUEST,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    Comment,
    NewTicket,
    Tracker,
    TrackerError,
)
from symphony_adapters._support.ratelimit import SlidingWindowLimiter
from symphony_adapters.kaiten import tools
from symphony_adapters.kaiten.config import parse_config
from symphony_adapters.kaiten.tracker import KaitenTracker
from tests.adapters.clock import FakeClock
from tests.adapters.kaiten import payloads
from tests.adapters.kaiten.fake_kaiten import FakeKaiten, serve
from tests.adapters.kaiten.helpers import TOKEN, make_tracker
from tests.adapters.kaiten.payloads import (
    API,
    BACKLOG,
    BOARD,
    DOING,
    DONE,
    REVIEW,
    card,
    column,
)

COLUMNS = f"{API}/boards/{BOARD}/columns"
CARD = f"{API}/cards/42"
COMMENTS = f"{CARD}/comments"
LINKS = f"{CARD}/external-links"


def issue(card_id: int = 42, column_id: int = DOING, **ref: Any) -> Issue:
    return Issue(
        id=str(card_id),
        identifier=f"KT-{card_id}",
        title="t",
        state="In Progress",
        dispatchable=True,
        native_ref={
            "card_id": card_id,
            "board_id": BOARD,
            "column_id": column_id,
            "lane_id": 7,
            **ref,
        },
    )


def mock_board(columns: list[dict[str, Any]] | None = None) -> respx.Route:
    return respx.get(COLUMNS).mock(
        return_value=httpx.Response(200, json=payloads.columns() if columns is None else columns)
    )


def sent(route: respx.Route, call: int = 0) -> Any:
    return json.loads(route.calls[call].request.content)


async def rejected(call: Any) -> TrackerError:
    with pytest.raises(TrackerError) as caught:
        await call
    assert caught.value.category == TRACKER_REJECTED, caught.value.message
    return caught.value


def test_the_tracker_offers_the_whole_write_contract() -> None:
    assert isinstance(make_tracker(), Tracker)


def test_only_the_move_tool_is_marked_as_moving_the_ticket() -> None:
    marked = {spec.name: spec.moves_ticket for spec in make_tracker().agent_tools()}
    assert marked == {tools.MOVE_CARD: True, tools.ADD_COMMENT: False, tools.ADD_LINK: False}


# Moves


@respx.mock
async def test_move_issue_patches_the_column_of_the_state_in_the_workflows_spelling() -> None:
    mock_board()
    patch = respx.patch(CARD).mock(return_value=httpx.Response(200, json=card(42, DONE, state=3)))
    assert await make_tracker().move_issue(issue(), "done") is None
    assert sent(patch) == {"column_id": DONE}


@respx.mock
async def test_move_issue_sends_exactly_what_the_move_tool_sends() -> None:
    mock_board()
    patch = respx.patch(CARD).mock(return_value=httpx.Response(200, json=card(42, DOING, state=2)))
    tracker = make_tracker()
    await tracker.move_issue(issue(column_id=BACKLOG), "In Progress")
    result = await tracker.execute_tool(
        tools.MOVE_CARD, {"state": "In Progress"}, issue(column_id=BACKLOG)
    )
    assert result.success
    assert [c.request.method for c in respx.calls] == ["GET", "PATCH", "PATCH"]
    assert sent(patch, 0) == sent(patch, 1) == {"column_id": DOING}  # the first sub-column


@respx.mock
async def test_moving_a_card_to_the_state_it_is_in_keeps_it_in_its_sub_column() -> None:
    # Review inherits In Progress here: the card is there already, so it stays in Review
    # rather than jumping to the first sub-column. Re-sending its column changes nothing.
    mock_board()
    patch = respx.patch(CARD).mock(return_value=httpx.Response(200, json=card(42, REVIEW, state=2)))
    tracker = make_tracker()
    await tracker.move_issue(issue(column_id=REVIEW), "In Progress")
    result = await tracker.execute_tool(
        tools.MOVE_CARD, {"state": "In Progress"}, issue(column_id=REVIEW)
    )
    assert sent(patch, 0) == sent(patch, 1) == {"column_id": REVIEW}
    assert result.output == {"identifier": "KT-42", "state": "In Progress", "column_id": REVIEW}


@respx.mock
async def test_a_sub_column_named_in_the_workflow_is_left_for_its_parent_state() -> None:
    mock_board()
    patch = respx.patch(CARD).mock(return_value=httpx.Response(200, json=card(42, DOING, state=2)))
    await make_tracker(extra_states=("Review",)).move_issue(issue(column_id=REVIEW), "In Progress")
    assert sent(patch) == {"column_id": DOING}


@respx.mock
async def test_moving_to_a_state_no_column_carries_is_rejected_without_a_write() -> None:
    board = mock_board()
    patch = respx.patch(CARD)
    error = await rejected(make_tracker().move_issue(issue(), "Shipped"))
    assert "Backlog, In Progress, In Progress / Doing" in error.message
    assert patch.call_count == 0
    assert board.call_count == 1  # just read: not read again


@respx.mock
async def test_a_cached_layout_is_read_again_once_before_a_state_is_refused() -> None:
    clock = FakeClock()
    added = [*payloads.columns(), column(104, "Shipped", 3, order=4)]
    board = respx.get(COLUMNS).mock(
        side_effect=[
            httpx.Response(200, json=payloads.columns()),
            httpx.Response(200, json=added),
            httpx.Response(200, json=added),
        ]
    )
    patch = respx.patch(CARD).mock(return_value=httpx.Response(200, json=card(42, 104)))
    tracker = make_tracker(clock=clock)
    await tracker.tracker_states()
    await tracker.move_issue(issue(), "Shipped")  # a column added since the layout was read
    assert board.call_count == 2
    assert sent(patch) == {"column_id": 104}
    await rejected(tracker.move_issue(issue(), "Nowhere"))
    assert board.call_count == 3 and patch.call_count == 1


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
async def test_every_write_refuses_a_card_outside_the_configured_board(target: Issue) -> None:
    tracker = make_tracker()
    await rejected(tracker.move_issue(target, "Done"))
    await rejected(tracker.add_comment(target, "x"))
    await rejected(tracker.edit_comment(target, "5", "x"))
    await rejected(tracker.list_comments(target))
    await rejected(tracker.link_pull_request(target, "https://git.example/pr/1", "PR"))
    assert respx.calls.call_count == 0


@respx.mock
async def test_a_deleted_card_is_rejected_for_the_daemon_and_a_status_for_tools() -> None:
    mock_board()
    respx.patch(CARD).mock(return_value=httpx.Response(404, json={"message": "Card not found"}))
    respx.post(COMMENTS).mock(return_value=httpx.Response(404, json={"message": "nope"}))
    respx.get(COMMENTS).mock(return_value=httpx.Response(404, json={"message": "nope"}))
    respx.get(LINKS).mock(return_value=httpx.Response(404, json={"message": "nope"}))
    tracker = make_tracker()
    error = await rejected(tracker.move_issue(issue(), "Done"))
    assert "card 42 not found" in error.message
    await rejected(tracker.add_comment(issue(), "x"))
    await rejected(tracker.list_comments(issue()))
    await rejected(tracker.link_pull_request(issue(), "https://git.example/pr/1", "PR"))
    for name, arguments in [
        (tools.MOVE_CARD, {"state": "Done"}),
        (tools.ADD_COMMENT, {"body": "x"}),
        (tools.ADD_LINK, {"url": "https://git.example/pr/1"}),
    ]:
        result = await tracker.execute_tool(name, arguments, issue())
        assert result.output["error"] == TRACKER_STATUS


@respx.mock
async def test_write_failures_keep_their_categories_and_never_carry_the_token() -> None:
    mock_board()
    respx.patch(CARD).mock(return_value=httpx.Response(403, json={"message": "Forbidden"}))
    respx.post(COMMENTS).mock(side_effect=httpx.ConnectError("down"))
    tracker = make_tracker()
    with pytest.raises(TrackerError) as status:
        await tracker.move_issue(issue(), "Done")
    assert status.value.category == TRACKER_STATUS and TOKEN not in status.value.message
    with pytest.raises(TrackerError) as unreachable:
        await tracker.add_comment(issue(), "x")
    assert unreachable.value.category == TRACKER_REQUEST


@respx.mock
async def test_a_rate_limited_write_says_when_and_the_next_one_sends_nothing() -> None:
    clock = FakeClock()
    post = respx.post(COMMENTS).mock(
        return_value=httpx.Response(
            429,
            headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(clock.now) + 20)},
        )
    )
    tracker = make_tracker(clock=clock)
    with pytest.raises(TrackerError) as first:
        await tracker.add_comment(issue(), "x")
    assert first.value.category == TRACKER_RATE_LIMITED
    assert first.value.retry_after_s == pytest.approx(20, abs=1)
    with pytest.raises(TrackerError) as second:
        await tracker.move_issue(issue(), "Done")
    assert second.value.category == TRACKER_RATE_LIMITED
    assert respx.calls.call_count == post.call_count == 1


# Comments


@respx.mock
async def test_add_comment_posts_the_text_and_returns_the_comment_kaiten_answered() -> None:
    post = respx.post(COMMENTS).mock(
        return_value=httpx.Response(
            200,
            json=payloads.comment(
                5, 42, "**plan**", created="2026-01-02T06:04:05.000+03:00", author=payloads.user()
            ),
        )
    )
    comment = await make_tracker().add_comment(issue(), "**plan**")
    assert sent(post) == {"text": "**plan**"}
    assert comment == Comment(
        id="5",
        body="**plan**",
        author="Symphony Bot",
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        author_member=True,
    )
    assert comment.created_at is not None and comment.created_at.utcoffset() == timedelta(0)


@respx.mock
async def test_the_comment_tool_still_answers_with_the_comment_id() -> None:
    respx.post(COMMENTS).mock(return_value=httpx.Response(200, json=payloads.comment(5, 42, "hi")))
    result = await make_tracker().execute_tool(tools.ADD_COMMENT, {"body": "hi"}, issue())
    assert result.output == {"identifier": "KT-42", "commented": True, "comment_id": 5}


@pytest.mark.parametrize("body", ["", "   \n", "x" * (tools.MAX_COMMENT_CHARS + 1)])
@respx.mock
async def test_an_empty_or_oversized_comment_is_rejected_without_a_request(body: str) -> None:
    tracker = make_tracker()
    await rejected(tracker.add_comment(issue(), body))
    await rejected(tracker.edit_comment(issue(), "5", body))
    assert respx.calls.call_count == 0


@respx.mock
async def test_an_answer_without_a_comment_id_is_a_response_error() -> None:
    respx.post(COMMENTS).mock(return_value=httpx.Response(200, json={"text": "x"}))
    with pytest.raises(TrackerError) as caught:
        await make_tracker().add_comment(issue(), "x")
    assert caught.value.category == TRACKER_RESPONSE


@respx.mock
async def test_edit_comment_patches_the_text_and_returns_kaitens_answer() -> None:
    answer = {**payloads.comment(5, 42, "v2", author=payloads.user()), "edited": True}
    patch = respx.patch(f"{COMMENTS}/5").mock(return_value=httpx.Response(200, json=answer))
    comment = await make_tracker().edit_comment(issue(), "5", "v2")
    assert sent(patch) == {"text": "v2"}
    assert (comment.id, comment.body, comment.author) == ("5", "v2", "Symphony Bot")


@pytest.mark.parametrize("comment_id", ["", "abc", "5/../6", "-1", "٣"])
@respx.mock
async def test_an_id_that_is_no_kaiten_comment_id_is_rejected_without_a_request(
    comment_id: str,
) -> None:
    await rejected(make_tracker().edit_comment(issue(), comment_id, "x"))
    assert respx.calls.call_count == 0


@respx.mock
async def test_editing_a_comment_kaiten_does_not_have_is_rejected() -> None:
    respx.patch(f"{COMMENTS}/77").mock(
        return_value=httpx.Response(404, json={"message": "Comment not found"})
    )
    error = await rejected(make_tracker().edit_comment(issue(), "77", "x"))
    assert "comment 77" in error.message


@respx.mock
async def test_list_comments_returns_every_comment_oldest_first_from_one_request() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    many = [
        payloads.comment(
            100 + n,
            42,
            f"note {n}",
            created=(start + timedelta(minutes=n)).isoformat().replace("+00:00", "Z"),
            author=payloads.user(n % 3 + 1, f"User {n % 3}", f"user{n % 3}"),
        )
        for n in range(250)
    ]
    listed = respx.get(COMMENTS).mock(
        return_value=httpx.Response(200, json=list(reversed(many)))  # newest first
    )
    comments = await make_tracker().list_comments(issue())
    assert listed.call_count == 1
    assert dict(listed.calls[0].request.url.params) == {}  # Kaiten's listing takes no paging
    assert [c.body for c in comments] == [f"note {n}" for n in range(250)]
    assert comments[0].author == "User 0" and comments[0].created_at == start


@respx.mock
async def test_listed_comments_map_authors_and_times_and_skip_deleted_ones() -> None:
    plus3 = timezone(timedelta(hours=3))
    respx.get(COMMENTS).mock(
        return_value=httpx.Response(
            200,
            json=[
                payloads.comment(3, 42, "c", created="2026-01-01T12:00:00+03:00"),
                payloads.comment(
                    2, 42, "b", author={**payloads.user(2), "full_name": " ", "username": "bob"}
                ),
                payloads.comment(4, 42, "gone", deleted=True),
                payloads.comment(1, 42, "a", created="not a time", author=payloads.user(1)),
                {"text": "no id"},
            ],
        )
    )
    comments = await make_tracker().list_comments(issue())
    assert [(c.id, c.author) for c in comments] == [
        ("1", "Symphony Bot"),  # without a usable time: first
        ("3", None),  # the published shape names only author_id
        ("2", "bob"),
    ]
    assert comments[0].created_at is None
    assert comments[1].created_at == datetime(2026, 1, 1, 12, tzinfo=plus3)
    assert comments[1].created_at is not None and comments[1].created_at.tzinfo == UTC


@respx.mock
async def test_a_comment_listing_that_is_not_a_list_is_a_response_error() -> None:
    respx.get(COMMENTS).mock(return_value=httpx.Response(200, json={"comments": []}))
    with pytest.raises(TrackerError) as caught:
        await make_tracker().list_comments(issue())
    assert caught.value.category == TRACKER_RESPONSE


# Pull request links

PR = "https://git.example/acme/widgets/pull/12"


@respx.mock
async def test_link_pull_request_adds_the_external_link_the_link_tool_adds() -> None:
    respx.get(LINKS).mock(return_value=httpx.Response(200, json=[]))
    post = respx.post(LINKS).mock(
        return_value=httpx.Response(200, json=payloads.external_link(9, 42, PR, "#12 Fix"))
    )
    tracker = make_tracker()
    await tracker.link_pull_request(issue(), PR, "#12 Fix")
    await tracker.execute_tool(tools.ADD_LINK, {"url": PR, "description": "#12 Fix"}, issue())
    assert sent(post, 0) == sent(post, 1) == {"url": PR, "description": "#12 Fix"}


@respx.mock
async def test_a_url_the_card_already_has_is_not_linked_again() -> None:
    others = [payloads.external_link(3, 42, "https://docs.example/spec", "Spec")]
    respx.get(LINKS).mock(
        side_effect=[
            httpx.Response(200, json=others),
            httpx.Response(200, json=[*others, payloads.external_link(9, 42, PR, "#12 Fix")]),
        ]
    )
    post = respx.post(LINKS).mock(
        return_value=httpx.Response(200, json=payloads.external_link(9, 42, PR, "#12 Fix"))
    )
    tracker = make_tracker()
    await tracker.link_pull_request(issue(), PR, "#12 Fix")
    await tracker.link_pull_request(issue(), PR, "#12 Fix, renamed")
    assert post.call_count == 1


@respx.mock
async def test_the_link_text_is_the_title_on_one_line_cut_to_the_tools_limit() -> None:
    respx.get(LINKS).mock(return_value=httpx.Response(200, json=[]))
    post = respx.post(LINKS).mock(
        return_value=httpx.Response(200, json=payloads.external_link(9, 42, PR, None))
    )
    tracker = make_tracker()
    await tracker.link_pull_request(issue(), PR, "#12  Fix\nthe " + "x" * 400)
    text = sent(post)["description"]
    assert text.startswith("#12 Fix the x") and len(text) == tools.MAX_DESCRIPTION_CHARS
    await tracker.link_pull_request(issue(), PR, "  ")
    assert sent(post, 1) == {"url": PR}


@respx.mock
async def test_a_link_that_is_not_an_http_url_is_rejected_without_a_request() -> None:
    tracker = make_tracker()
    await rejected(tracker.link_pull_request(issue(), "file:///etc/passwd", "PR"))
    assert respx.calls.call_count == 0


# New cards


def mock_create(new_id: int = 500, status: int = 200) -> respx.Route:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        return httpx.Response(
            status,
            json=card(
                new_id,
                body["column_id"],
                title=body["title"],
                lane_id=body.get("lane_id", 7),
                description=body.get("description"),
            ),
        )

    return respx.post(f"{API}/cards").mock(side_effect=answer)


def mock_read_back(new_id: int = 500, column_id: int = BACKLOG, **fields: Any) -> respx.Route:
    return respx.get(f"{API}/cards/{new_id}").mock(
        return_value=httpx.Response(200, json=card(new_id, column_id, **fields))
    )


@pytest.mark.parametrize("status", [200, 201])  # the description has 200 for a create
@respx.mock
async def test_create_issue_posts_the_card_in_the_states_column_and_the_parents_lane(
    status: int,
) -> None:
    mock_board()
    create = mock_create(status=status)
    blockers = respx.get(url__regex=rf"{API}/cards/(7|8)$").mock(
        side_effect=lambda r: httpx.Response(
            200, json=card(int(r.url.path.rsplit("/", 1)[1]), DOING, state=2)
        )
    )
    recorded = respx.post(f"{API}/cards/500/blockers").mock(
        side_effect=lambda r: httpx.Response(
            200, json=payloads.blocker(1, 500, json.loads(r.content)["blocker_card_id"])
        )
    )
    read_back = mock_read_back(title="Split off", blocked_by=[7, 8], blocked=True, lane_id=3)
    created = await make_tracker().create_issue(
        NewTicket(
            title=" Split off ",
            description="Details.\n",
            state="backlog",
            blocked_by=("KT-7", "8", "kt-7"),
            parent=issue(lane_id=3),
        )
    )
    assert sent(create) == {
        "title": "Split off",
        "board_id": BOARD,
        "column_id": BACKLOG,
        "lane_id": 3,
        "description": "Details.",
    }
    assert [sent(recorded, n) for n in range(recorded.call_count)] == [
        {"blocker_card_id": 7},
        {"blocker_card_id": 8},
    ]
    assert (created.id, created.identifier, created.state) == ("500", "KT-500", "Backlog")
    assert [(b.identifier, b.state) for b in created.blocked_by] == [
        ("KT-7", "In Progress"),
        ("KT-8", "In Progress"),
    ]
    assert not created.dispatchable
    # Cheap: the columns, one check per blocker, the card, one write per blocker, one read-back
    # (the blockers read for the check are not read again).
    assert blockers.call_count == 2 and read_back.call_count == 1
    assert respx.calls.call_count == 1 + 2 + 1 + 2 + 1


@respx.mock
async def test_a_new_card_goes_to_the_configured_lane_whatever_its_parents() -> None:
    mock_board()
    create = mock_create()
    mock_read_back(lane_id=7)
    await make_tracker({"lane_id": 7}).create_issue(
        NewTicket("t", "", "Done", parent=issue(lane_id=3))
    )
    assert sent(create) == {"title": "t", "board_id": BOARD, "column_id": DONE, "lane_id": 7}


@respx.mock
async def test_without_a_parent_or_a_lane_kaiten_chooses_the_lane() -> None:
    mock_board()
    create = mock_create()
    mock_read_back(column_id=DOING, state=2)
    created = await make_tracker().create_issue(NewTicket("t", "d", "In Progress"))
    assert sent(create) == {
        "title": "t",
        "board_id": BOARD,
        "column_id": DOING,
        "description": "d",
    }
    assert created.state == "In Progress" and created.blocked_by == ()


@pytest.mark.parametrize("blocker", ["ABC-7", "KT-", "KT-0", "7a", "", "KT-x"])
@respx.mock
async def test_a_blocker_that_is_no_kaiten_identifier_is_rejected_without_a_request(
    blocker: str,
) -> None:
    error = await rejected(
        make_tracker().create_issue(NewTicket("t", "", "Backlog", blocked_by=(blocker,)))
    )
    assert repr(blocker) in error.message
    assert respx.calls.call_count == 0


@respx.mock
async def test_a_blocker_kaiten_does_not_have_is_rejected_before_anything_is_created() -> None:
    mock_board()
    respx.get(f"{API}/cards/7").mock(return_value=httpx.Response(200, json=card(7)))
    respx.get(f"{API}/cards/9").mock(return_value=httpx.Response(404, json={"message": "no"}))
    create = mock_create()
    error = await rejected(
        make_tracker().create_issue(NewTicket("t", "", "Backlog", blocked_by=("KT-7", "KT-9")))
    )
    assert "'KT-9'" in error.message
    assert create.call_count == 0


@respx.mock
async def test_a_state_no_column_carries_is_rejected_before_anything_is_created() -> None:
    mock_board()
    create = mock_create()
    error = await rejected(make_tracker().create_issue(NewTicket("t", "", "Shipped")))
    assert "no column 'Shipped'" in error.message
    assert create.call_count == 0


@pytest.mark.parametrize(
    "ticket",
    [
        NewTicket("  ", "", "Backlog"),
        NewTicket("x" * 1025, "", "Backlog"),
        NewTicket("t", "x" * 32_769, "Backlog"),
        NewTicket("t", "", "Backlog", parent=issue(board_id=99)),
    ],
)
@respx.mock
async def test_a_card_kaiten_would_refuse_or_outside_the_board_is_rejected_without_a_request(
    ticket: NewTicket,
) -> None:
    await rejected(make_tracker().create_issue(ticket))
    assert respx.calls.call_count == 0


@respx.mock
async def test_a_blocker_refused_after_creation_names_the_card_that_was_created() -> None:
    mock_board()
    respx.get(f"{API}/cards/7").mock(return_value=httpx.Response(200, json=card(7)))
    mock_create()
    respx.post(f"{API}/cards/500/blockers").mock(
        return_value=httpx.Response(403, json={"message": "Forbidden"})
    )
    with pytest.raises(TrackerError) as caught:
        await make_tracker().create_issue(NewTicket("t", "", "Backlog", blocked_by=("KT-7",)))
    assert caught.value.category == TRACKER_STATUS
    assert "KT-500 was created" in caught.value.message and "KT-7" in caught.value.message


@respx.mock
async def test_a_create_answer_without_a_card_id_is_a_response_error() -> None:
    mock_board()
    respx.post(f"{API}/cards").mock(return_value=httpx.Response(200, json={"title": "t"}))
    with pytest.raises(TrackerError) as caught:
        await make_tracker().create_issue(NewTicket("t", "", "Backlog"))
    assert caught.value.category == TRACKER_RESPONSE


# States


@respx.mock
async def test_tracker_states_are_the_top_level_columns_and_sub_columns_named_as_states() -> None:
    mock_board(
        [
            *payloads.columns(),
            column(123, "Review", 2, parent=BACKLOG),  # a second "Review", counted once
            column(124, "Orphan", 1, parent=999),
        ]
    )
    assert await make_tracker().tracker_states() == ["Backlog", "In Progress", "Done", "Orphan"]
    named = make_tracker(extra_states=("review",))
    assert await named.tracker_states() == ["Backlog", "Review", "In Progress", "Done", "Orphan"]


@respx.mock
async def test_tracker_states_use_the_cached_layout_and_ensure_states_sends_nothing() -> None:
    board = mock_board()
    tracker = make_tracker()
    await tracker.tracker_states()
    assert await tracker.ensure_states(["Backlog", "Human Review"]) == []
    assert await tracker.tracker_states() == ["Backlog", "In Progress", "Done"]
    assert board.call_count == 1 and respx.calls.call_count == 1


# Over HTTP, against the fake Kaiten

FAKE_TOKEN = "kaiten_writes_token_value_42"


def over_http(fake: FakeKaiten, limiter: SlidingWindowLimiter | None = None) -> KaitenTracker:
    config = parse_config({"base_url": fake.base, "board_id": BOARD}, {"KAITEN_TOKEN": FAKE_TOKEN})
    return KaitenTracker(
        config,
        workflow_states=("Backlog", "In Progress", "Done"),
        terminal_states=("Done",),
        limiter=limiter,
    )


async def test_a_ticket_created_commented_edited_and_moved_reads_back_as_written() -> None:
    fake = FakeKaiten(FAKE_TOKEN)
    fake.add(7, DOING)
    fake.add(8, DONE)
    fake.add(42, BACKLOG, lane_id=3)
    fake.window_limit = 1_000  # what is written is tested here, not the pace
    with serve(fake):
        tracker = over_http(fake, SlidingWindowLimiter(1_000, 1.0))
        try:
            [parent] = await tracker.fetch_issues_by_ids(["42"])
            created = await tracker.create_issue(
                NewTicket("Follow-up", "Why.", "Backlog", blocked_by=("KT-7", "8"), parent=parent)
            )
            first = await tracker.add_comment(created, "plan v1")
            second = await tracker.add_comment(created, "notes")
            edited = await tracker.edit_comment(created, first.id, "plan v2")
            await tracker.move_issue(created, "In Progress")
            comments = await tracker.list_comments(created)
            for _ in range(2):
                await tracker.link_pull_request(created, PR, "#12 Follow-up")
            [again] = await tracker.fetch_issues_by_ids([created.id])
        finally:
            await tracker.aclose()
    new = fake.cards[int(created.id)]
    assert (new.title, new.description, new.lane_id, new.blocked_by) == (
        "Follow-up",
        "Why.",
        3,
        [7, 8],
    )
    assert created.state == "Backlog" and not created.dispatchable  # KT-7 is not done
    assert [(b.identifier, b.state) for b in created.blocked_by] == [
        ("KT-7", "In Progress"),
        ("KT-8", "Done"),
    ]
    assert edited.id == first.id and edited.body == "plan v2"
    assert [(c.id, c.body, c.author) for c in comments] == [
        (first.id, "plan v2", "Symphony Bot"),
        (second.id, "notes", "Symphony Bot"),
    ]
    assert all(c.created_at is not None and c.created_at.tzinfo == UTC for c in comments)
    assert again.state == "In Progress" and new.column_id == DOING
    assert [(link["url"], link["description"]) for link in new.links] == [(PR, "#12 Follow-up")]


async def test_writes_share_the_limiter_and_stay_within_5_requests_per_second() -> None:
    fake = FakeKaiten(FAKE_TOKEN)
    for n in range(1, 5):
        fake.add(n, DONE)
    fake.add(42, BACKLOG)
    with serve(fake):
        tracker = over_http(fake)
        try:
            [target] = await tracker.fetch_issues_by_ids(["42"])
            await tracker.create_issue(
                NewTicket("t", "", "Backlog", blocked_by=("1", "2", "3", "4"), parent=target)
            )
            for n in range(3):
                await tracker.add_comment(target, f"note {n}")
            await tracker.move_issue(target, "Done")
        finally:
            await tracker.aclose()
    times = sorted(r.at for r in fake.requests)
    assert len(times) >= 15
    assert not fake.over_limit
    assert all(times[i + 5] - times[i] >= 1.0 for i in range(len(times) - 5))

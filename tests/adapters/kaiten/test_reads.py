"""Reading cards: the listing's filters and paging, column states, discovered states, refresh
under the 5 rps throttle, blockers, malformed cards, rate limits and normalization."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from structlog.testing import capture_logs

import symphony_adapters.kaiten as kaiten
from symphony.config.load import load_settings
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    TRACKER_RATE_LIMITED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    TrackerContext,
    TrackerError,
    resolve_states,
)
from symphony_adapters.kaiten.reads import LAYOUT_MAX_AGE_S
from tests.adapters.kaiten import payloads
from tests.adapters.kaiten.helpers import ENV, TOKEN, FakeClock, make_tracker
from tests.adapters.kaiten.payloads import (
    API,
    BACKLOG,
    BOARD,
    DOING,
    DONE,
    IN_PROGRESS,
    REVIEW,
    card,
    column,
    user,
)

COLUMNS = f"{API}/boards/{BOARD}/columns"
CARDS = f"{API}/cards"


def mock_board(columns: list[dict[str, Any]] | None = None) -> respx.Route:
    return respx.get(COLUMNS).mock(
        return_value=httpx.Response(200, json=payloads.columns() if columns is None else columns)
    )


def mock_cards(*pages: list[dict[str, Any]]) -> respx.Route:
    return respx.get(CARDS).mock(side_effect=[httpx.Response(200, json=p) for p in pages])


def query(route: respx.Route, call: int = 0) -> dict[str, str]:
    return dict(route.calls[call].request.url.params)


# The listing


@respx.mock
async def test_candidates_are_cards_on_the_board_in_the_states_columns() -> None:
    mock_board()
    cards = mock_cards([{**card(1, BACKLOG), "owner": user(7, "Ada Lovelace")}, card(2, DOING)])
    issues = await make_tracker().fetch_issues_by_states(["Backlog", "In Progress"])
    assert [(i.id, i.state) for i in issues] == [("1", "Backlog"), ("2", "In Progress")]
    assert [i.author for i in issues] == ["Ada Lovelace", None]
    params = query(cards)
    assert params["board_id"] == str(BOARD)
    assert params["condition"] == "1"
    # In Progress includes its sub-columns, which inherit its state.
    assert set(params["column_ids"].split(",")) == {
        str(c) for c in (BACKLOG, IN_PROGRESS, DOING, REVIEW)
    }
    assert params["offset"] == "0" and params["limit"] == "100"
    assert "lane_id" not in params and "space_id" not in params


@respx.mock
async def test_condition_1_is_sent_even_for_terminal_states_and_lane_space_filters_apply() -> None:
    mock_board()
    cards = mock_cards([card(3, DONE, state=3)])
    tracker = make_tracker({"lane_id": 7, "space_id": 5})
    issues = await tracker.fetch_issues_by_states(["Done"])
    assert [i.state for i in issues] == ["Done"]
    params = query(cards)
    assert params["condition"] == "1"
    assert params["column_ids"] == str(DONE)
    assert (params["lane_id"], params["space_id"]) == ("7", "5")


@respx.mock
async def test_pages_are_read_by_offset_until_a_short_page() -> None:
    mock_board()
    first = [card(n) for n in range(1, 101)]
    second = [card(n) for n in range(101, 131)]
    cards = mock_cards(first, second)
    issues = await make_tracker().fetch_issues_by_states(["Backlog"])
    assert len(issues) == 130
    assert [query(cards, i)["offset"] for i in range(2)] == ["0", "100"]
    assert cards.call_count == 2


@respx.mock
async def test_a_full_last_page_costs_one_empty_page_and_duplicates_keep_the_first() -> None:
    mock_board()
    first = [card(n) for n in range(1, 101)]
    second = [card(100, title="moved while paging")]
    cards = mock_cards(first, second)
    issues = await make_tracker().fetch_issues_by_states(["Backlog"])
    assert len(issues) == 100 and issues[-1].title == "Card 100"
    assert cards.call_count == 2


@respx.mock
async def test_states_without_a_column_on_the_board_cost_no_card_request() -> None:
    mock_board()
    cards = respx.get(CARDS)
    assert await make_tracker().fetch_issues_by_states(["Nope"]) == []
    assert await make_tracker().fetch_issues_by_states([]) == []
    assert cards.call_count == 0


@respx.mock
async def test_a_card_whose_column_is_not_one_of_the_states_is_left_out() -> None:
    mock_board()
    mock_cards([card(1, BACKLOG), card(2, DONE)])  # a card moved between answers
    issues = await make_tracker().fetch_issues_by_states(["Backlog"])
    assert [i.id for i in issues] == ["1"]


# Column states


@respx.mock
async def test_a_card_in_a_sub_column_takes_its_parents_state() -> None:
    mock_board()
    mock_cards([card(1, DOING), card(2, REVIEW)])
    issues = await make_tracker().fetch_issues_by_states(["In Progress"])
    assert [(i.id, i.state) for i in issues] == [("1", "In Progress"), ("2", "In Progress")]
    assert issues[1].native_ref is not None and issues[1].native_ref["column_id"] == REVIEW


@respx.mock
async def test_a_sub_column_named_in_the_workflow_is_a_state_of_its_own() -> None:
    mock_board()
    cards = mock_cards([card(2, REVIEW)], [card(1, DOING)])
    tracker = make_tracker(extra_states=("Review",))
    review = await tracker.fetch_issues_by_states(["Review"])
    assert [(i.id, i.state) for i in review] == [("2", "Review")]
    assert query(cards)["column_ids"] == str(REVIEW)
    progress = await tracker.fetch_issues_by_states(["In Progress"])
    assert [(i.id, i.state) for i in progress] == [("1", "In Progress")]
    assert str(REVIEW) not in query(cards, 1)["column_ids"].split(",")


@respx.mock
async def test_sub_columns_are_read_per_column_when_the_board_lists_none() -> None:
    top = [c for c in payloads.columns() if c["column_id"] is None]
    mock_board(top)
    subs = respx.get(f"{API}/columns/{IN_PROGRESS}/subcolumns").mock(
        return_value=httpx.Response(200, json=[column(DOING, "Doing", 2, parent=IN_PROGRESS)])
    )
    others = respx.get(url__regex=rf"{API}/columns/(?!{IN_PROGRESS}/)\d+/subcolumns").mock(
        return_value=httpx.Response(200, json=[])
    )
    mock_cards([card(1, DOING)])
    issues = await make_tracker().fetch_issues_by_states(["In Progress"])
    assert [(i.id, i.state) for i in issues] == [("1", "In Progress")]
    assert subs.call_count == 1 and others.call_count == 2


# Discovered states


@respx.mock
async def test_discovered_states_come_from_top_level_column_types() -> None:
    mock_board(
        [
            column(1, "Ideas", 1, order=1),
            column(2, "Doing", 2, order=2),
            column(21, "Pairing", 2, parent=2),
            column(3, "Shipped", 3, order=4),
            column(4, "Verify", 2, order=3),
            column(5, "Dropped", 3, order=5),
        ]
    )
    active, terminal = await make_tracker(active=(), terminal=()).discover_states()
    assert active == ("Ideas", "Doing", "Verify")
    assert terminal == ("Shipped", "Dropped")


@respx.mock
async def test_discovered_terminal_states_decide_blockers_when_the_workflow_names_none() -> None:
    mock_board()
    mock_cards([card(1, BACKLOG, blocked_by=[2]), card(2, DONE, state=1)])
    tracker = make_tracker(active=(), terminal=())
    await tracker.discover_states()
    issues = await tracker.fetch_issues_by_states(["Backlog", "Done"])
    assert issues[0].dispatchable is True


@respx.mock
async def test_a_workflow_without_states_gets_them_from_the_board(tmp_path: Path) -> None:
    mock_board()
    workflow = tmp_path / "WORKFLOW.md"
    workflow.write_text(
        f"---\ntracker:\n  kind: kaiten\n  provider: {{domain: acme, board_id: {BOARD}}}\n"
        "---\nWork on {{ issue.identifier }}\n"
    )
    settings = load_settings(workflow, ENV)
    assert settings.tracker.active_states == () and settings.tracker.terminal_states == ()
    tracker = kaiten.create_tracker(settings.tracker, TrackerContext(tmp_path, ENV))
    resolved = await resolve_states(settings.tracker, tracker)
    assert resolved.active_states == ("Backlog", "In Progress")
    assert resolved.terminal_states == ("Done",)
    await tracker.aclose()


@respx.mock
async def test_a_board_without_a_done_column_cannot_supply_states() -> None:
    mock_board([column(1, "Todo", 1), column(2, "Doing", 2)])
    respx.get(url__regex=rf"{API}/columns/\d+/subcolumns").mock(
        return_value=httpx.Response(200, json=[])
    )
    with pytest.raises(TrackerError) as caught:
        await make_tracker(active=(), terminal=()).discover_states()
    assert caught.value.category == INVALID_TRACKER_CONFIG
    assert "terminal_states" in caught.value.message


# Refresh by id


def timed(clock: FakeClock, answer: Callable[[httpx.Request], httpx.Response]) -> Any:
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now)
        return answer(request)

    return sent, handler


@respx.mock
async def test_refresh_reads_one_card_per_request_within_5_per_second() -> None:
    clock = FakeClock()
    sent, handler = timed(
        clock,
        lambda r: httpx.Response(200, json=card(int(r.url.path.rsplit("/", 1)[1]), DOING, state=2)),
    )
    respx.get(url__regex=rf"{API}/cards/\d+$").mock(side_effect=handler)
    board_sent, board = timed(clock, lambda r: httpx.Response(200, json=payloads.columns()))
    respx.get(COLUMNS).mock(side_effect=board)
    tracker = make_tracker(clock=clock)
    ids = [str(n) for n in range(1, 12)]
    issues = await tracker.fetch_issues_by_ids([*ids, "2", "x"])
    assert [i.id for i in issues] == ids
    assert [i.state for i in issues] == ["In Progress"] * 11
    times = sorted(board_sent + sent)
    assert len(times) == 12  # the columns, then one request per distinct numeric id
    # No more than 5 requests in any one second (answers here take no time at all).
    assert all(times[i + 5] - times[i] >= 1.0 for i in range(len(times) - 5))
    assert times[-1] - times[0] < 2.5  # and no slower than the limit requires


@respx.mock
async def test_refresh_omits_cards_gone_archived_or_moved_out_of_scope() -> None:
    mock_board()
    respx.get(f"{CARDS}/1").mock(return_value=httpx.Response(404, json={"message": "nope"}))
    respx.get(f"{CARDS}/2").mock(return_value=httpx.Response(200, json=card(2, condition=2)))
    respx.get(f"{CARDS}/3").mock(return_value=httpx.Response(200, json=card(3, board_id=99)))
    respx.get(f"{CARDS}/4").mock(return_value=httpx.Response(200, json=card(4, lane_id=8)))
    respx.get(f"{CARDS}/5").mock(return_value=httpx.Response(200, json=card(5, lane_id=7)))
    issues = await make_tracker({"lane_id": 7}).fetch_issues_by_ids(["1", "2", "3", "4", "5"])
    assert [i.id for i in issues] == ["5"]


@respx.mock
async def test_refresh_rereads_cached_columns_once_for_a_column_it_does_not_know() -> None:
    board = mock_board()
    respx.get(f"{CARDS}/1").mock(return_value=httpx.Response(200, json=card(1, 555)))
    respx.get(f"{CARDS}/2").mock(return_value=httpx.Response(200, json=card(2, DOING)))
    tracker = make_tracker()
    await tracker.fetch_issues_by_ids(["2"])
    assert board.call_count == 1
    for expected_calls in (2, 3):  # once per read, never in a loop
        with pytest.raises(TrackerError) as caught:
            await tracker.fetch_issues_by_ids(["1", "1"])
        assert caught.value.category == TRACKER_RESPONSE
        assert "column 555" in caught.value.message
        assert board.call_count == expected_calls


@respx.mock
async def test_columns_just_read_are_not_read_again_for_an_unknown_column() -> None:
    board = mock_board()
    respx.get(f"{CARDS}/1").mock(return_value=httpx.Response(200, json=card(1, 555)))
    with pytest.raises(TrackerError):
        await make_tracker().fetch_issues_by_ids(["1"])
    assert board.call_count == 1


@respx.mock
async def test_columns_are_cached_across_polls_for_minutes() -> None:
    clock = FakeClock()
    board = mock_board()
    respx.get(CARDS).mock(return_value=httpx.Response(200, json=[card(1, BACKLOG)]))
    tracker = make_tracker(clock=clock)
    for _ in range(10):
        await tracker.fetch_issues_by_states(["Backlog"])
        clock.now += 20
    assert board.call_count == 1
    clock.now += LAYOUT_MAX_AGE_S
    await tracker.fetch_issues_by_states(["Backlog"])
    assert board.call_count == 2


# Blockers


@respx.mock
async def test_a_card_blocked_by_an_unfinished_card_is_not_dispatchable() -> None:
    mock_board()
    mock_cards([card(1, BACKLOG, blocked_by=[2], blocked=True), card(2, DOING, state=2)])
    issues = await make_tracker().fetch_issues_by_states(["Backlog", "In Progress"])
    first = issues[0]
    assert first.dispatchable is False
    assert [(b.id, b.identifier, b.state) for b in first.blocked_by] == [
        ("2", "KT-2", "In Progress")
    ]
    assert issues[1].dispatchable is True


@respx.mock
async def test_blockers_outside_the_listing_are_read_and_done_ones_do_not_block() -> None:
    mock_board()
    mock_cards(
        [
            card(1, blocked_by=[8]),
            card(2, blocked_by=[9]),
            card(3, blocked_by=[10]),
            card(4, blocked_by=[11]),
        ]
    )
    respx.get(f"{CARDS}/8").mock(return_value=httpx.Response(200, json=card(8, DONE, state=3)))
    respx.get(f"{CARDS}/9").mock(return_value=httpx.Response(200, json=card(9, DOING, state=2)))
    # On another board: Kaiten's own done state decides.
    respx.get(f"{CARDS}/10").mock(
        return_value=httpx.Response(200, json=card(10, 900, state=3, board_id=77))
    )
    respx.get(f"{CARDS}/11").mock(return_value=httpx.Response(404, json={"message": "gone"}))
    issues = await make_tracker().fetch_issues_by_states(["Backlog"])
    assert [i.dispatchable for i in issues] == [True, False, True, True]
    assert issues[0].blocked_by[0].state == "Done"
    assert issues[2].blocked_by[0].state is None
    assert issues[3].blocked_by == ()


@respx.mock
async def test_a_block_set_by_hand_without_a_blocking_card_keeps_the_card_waiting() -> None:
    mock_board()
    mock_cards([card(1, blocked=True), card(2, blocked=False)])
    issues = await make_tracker().fetch_issues_by_states(["Backlog"])
    assert [i.dispatchable for i in issues] == [False, True]


@respx.mock
async def test_terminal_cards_do_not_read_their_blockers() -> None:
    mock_board()
    mock_cards([card(1, DONE, state=3, blocked_by=[9])])
    blocker = respx.get(f"{CARDS}/9")
    issues = await make_tracker().fetch_issues_by_states(["Done"])
    assert issues[0].blocked_by == () and blocker.call_count == 0


# Malformed cards


@respx.mock
async def test_malformed_cards_are_skipped_and_logged_once_per_problem() -> None:
    mock_board()
    broken = [card(1), {"id": 2, "title": "", "column_id": BACKLOG}, "junk", card(3, 555)]
    respx.get(CARDS).mock(return_value=httpx.Response(200, json=broken))
    tracker = make_tracker()
    with capture_logs() as logs:
        for _ in range(3):
            issues = await tracker.fetch_issues_by_states(["Backlog"])
            assert [i.id for i in issues] == ["1"]
    skipped = [e for e in logs if e["event"] == "kaiten card skipped"]
    assert sorted(e["card_id"] for e in skipped) == ["2", "3", "?"]
    assert TOKEN not in repr(logs)


@respx.mock
async def test_a_malformed_card_fails_a_refresh_with_tracker_response() -> None:
    mock_board()
    respx.get(f"{CARDS}/4").mock(return_value=httpx.Response(200, json={"id": 4, "title": "t"}))
    with pytest.raises(TrackerError) as caught:
        await make_tracker().fetch_issues_by_ids(["4"])
    assert caught.value.category == TRACKER_RESPONSE
    assert "column_id" in caught.value.message


@respx.mock
async def test_a_listing_that_is_not_a_list_is_a_response_error() -> None:
    mock_board()
    respx.get(CARDS).mock(return_value=httpx.Response(200, json={"cards": []}))
    with pytest.raises(TrackerError) as caught:
        await make_tracker().fetch_issues_by_states(["Backlog"])
    assert caught.value.category == TRACKER_RESPONSE


# Rate limits and errors


@respx.mock
async def test_a_429_blocks_every_request_until_the_reset_epoch() -> None:
    clock = FakeClock()
    mock_board()
    reset = int(clock.now) + 30
    cards = respx.get(CARDS).mock(
        side_effect=[
            httpx.Response(
                429, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
            ),
            httpx.Response(200, json=[card(1)]),
        ]
    )
    tracker = make_tracker(clock=clock)
    with pytest.raises(TrackerError) as caught:
        await tracker.fetch_issues_by_states(["Backlog"])
    assert caught.value.category == TRACKER_RATE_LIMITED
    assert caught.value.retry_after_s == pytest.approx(reset - clock.now, abs=1)
    sent = tracker.http.quota.requests
    with pytest.raises(TrackerError) as again:
        await tracker.fetch_issues_by_ids(["1"])
    assert again.value.category == TRACKER_RATE_LIMITED
    assert tracker.http.quota.requests == sent  # refused without a request
    clock.now = reset + 1
    assert [i.id for i in await tracker.fetch_issues_by_states(["Backlog"])] == ["1"]
    assert cards.call_count == 2


@respx.mock
async def test_the_token_is_sent_as_bearer_and_never_appears_in_errors() -> None:
    route = respx.get(COLUMNS).mock(return_value=httpx.Response(401, text="Invalid token"))
    with pytest.raises(TrackerError) as caught:
        await make_tracker().fetch_issues_by_states(["Backlog"])
    assert route.calls[0].request.headers["authorization"] == f"Bearer {TOKEN}"
    assert caught.value.category == TRACKER_STATUS
    assert TOKEN not in caught.value.message and "401" in caught.value.message


# Normalization


@respx.mock
async def test_cards_become_normalized_issues() -> None:
    mock_board()
    mock_cards(
        [
            card(
                42,
                DOING,
                title="  Fix login ",
                tags=["Bug", "bug", "Backend"],
                asap=True,
                responsible=300,
                state=2,
            ),
            card(43, description=None),
        ]
    )
    issues = await make_tracker().fetch_issues_by_states(["In Progress", "Backlog"])
    first, second = issues
    assert first.id == "42" and first.identifier == "KT-42"
    assert first.title == "Fix login" and first.state == "In Progress"
    assert first.labels == ("bug", "backend")
    assert first.priority == 1 and second.priority is None
    assert first.assignee_id == "300" and second.assignee_id is None
    assert first.url == "https://acme.kaiten.ru/42"
    assert first.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert first.updated_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert first.description == "Do the thing." and second.description is None
    assert first.native_ref == {
        "card_id": 42,
        "board_id": BOARD,
        "column_id": DOING,
        "lane_id": 7,
    }


@respx.mock
async def test_with_a_space_the_card_url_names_it() -> None:
    mock_board()
    mock_cards([card(42)])
    issues = await make_tracker({"space_id": 5}).fetch_issues_by_states(["Backlog"])
    assert issues[0].url == "https://acme.kaiten.ru/space/5/card/42"

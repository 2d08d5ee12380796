"""The daemon's writes on GitLab: moves, notes as comments, new issues with blockers, state
labels; against the fake GitLab over real HTTP, and respx mocks where a single answer matters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import pytest
import respx
from structlog.testing import capture_logs

from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_RATE_LIMITED,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    Comment,
    NewTicket,
    TrackerError,
)
from symphony_adapters.gitlab.tracker import GitLabTracker
from tests.adapters.clock import FakeClock
from tests.adapters.gitlab import payloads
from tests.adapters.gitlab.fake_gitlab import BOT, FakeGitLab, serve
from tests.adapters.gitlab.helpers import TOKEN, make_tracker, session_issue
from tests.adapters.gitlab.payloads import API, ISSUES, PROJECT, error, issue, note

LABELS = f"{API}/projects/acme%2Fplatform%2Fwidgets/labels"


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with serve(FakeGitLab()) as fake:
        yield fake


def on(fake: FakeGitLab, **provider: object) -> GitLabTracker:
    return make_tracker({"base_url": fake.base, **provider}, environ={"GITLAB_TOKEN": fake.token})


def sent(route: respx.Route, index: int = 0) -> dict[str, str]:
    body: dict[str, str] = json.loads(route.calls[index].request.content)
    return body


async def rejected(call: object) -> TrackerError:
    with pytest.raises(TrackerError) as info:
        await call  # type: ignore[misc]
    assert info.value.category == TRACKER_REJECTED, info.value.message
    return info.value


# Moves


@respx.mock
async def test_move_issue_sends_the_one_put_the_move_tool_sends() -> None:
    put = respx.put(f"{ISSUES}/1").mock(
        return_value=httpx.Response(200, json=issue(1, labels=["workflow::human review"]))
    )
    tracker = make_tracker()
    snapshot = session_issue(labels=("workflow::todo", "workflow::blocked"))
    result = await tracker.execute_tool("gitlab_move_issue", {"state": "Human Review"}, snapshot)
    assert result.success
    assert await tracker.move_issue(snapshot, "Human Review") is None
    assert put.call_count == 2
    assert sent(put, 1) == sent(put, 0)
    assert sent(put, 1)["add_labels"] == "workflow::human review"
    assert sent(put, 1)["state_event"] == "reopen"


async def test_moving_twice_to_the_same_state_leaves_the_issue_as_one_move_does(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["bug", "workflow::todo"])
    tracker = on(gitlab)
    [snapshot] = await tracker.fetch_issues_by_ids(["1"])
    await tracker.move_issue(snapshot, "in progress")
    once = gitlab.labels_of(1)
    await tracker.move_issue(snapshot, "In Progress")
    assert gitlab.labels_of(1) == once == ["bug", "workflow::in progress"]
    [moved] = await tracker.fetch_issues_by_ids(["1"])
    assert moved.state == "In Progress"
    assert [r.method for r in gitlab.requests].count("PUT") == 2  # one PUT per move
    await tracker.aclose()


async def test_move_issue_to_the_closed_state_closes_it_and_back_reopens_it(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::in progress"])
    tracker = on(gitlab)
    [snapshot] = await tracker.fetch_issues_by_ids(["1"])
    await tracker.move_issue(snapshot, "Done")
    [closed] = await tracker.fetch_issues_by_ids(["1"])
    assert (closed.state, gitlab.issues[1].state, gitlab.labels_of(1)) == ("Done", "closed", [])
    await tracker.move_issue(closed, "Todo")
    [reopened] = await tracker.fetch_issues_by_ids(["1"])
    assert (reopened.state, gitlab.issues[1].state) == ("Todo", "opened")
    await tracker.aclose()


@pytest.mark.parametrize("state", ["a,b", "two\nlines", " ", "x" * 101])
@respx.mock
async def test_move_issue_to_a_state_no_label_can_hold_is_rejected_before_any_request(
    state: str,
) -> None:
    await rejected(make_tracker().move_issue(session_issue(), state))
    assert len(respx.calls) == 0


@respx.mock
async def test_a_state_whose_label_would_be_too_long_is_rejected() -> None:
    tracker = make_tracker({"state_label_prefix": "w" * 200 + "::"})
    error = await rejected(tracker.move_issue(session_issue(), "s" * 60))
    assert "too long" in error.message
    assert len(respx.calls) == 0


@respx.mock
async def test_writes_to_an_issue_outside_the_project_are_rejected_before_any_request() -> None:
    tracker = make_tracker()
    other = replace(session_issue(), native_ref={"project": "acme/other", "iid": 1, "id": 1})
    await rejected(tracker.move_issue(other, "Todo"))
    await rejected(tracker.add_comment(other, "x"))
    await rejected(tracker.edit_comment(other, "5", "x"))
    await rejected(tracker.list_comments(other))
    await rejected(tracker.link_pull_request(other, "https://gitlab.example/mr/1", "!1"))
    await rejected(tracker.create_issue(NewTicket("t", "", "Todo", parent=other)))
    assert len(respx.calls) == 0


@respx.mock
async def test_a_failed_move_keeps_its_category_and_never_shows_the_token() -> None:
    respx.put(f"{ISSUES}/1").mock(return_value=httpx.Response(403, json=error("403 Forbidden")))
    with pytest.raises(TrackerError) as info:
        await make_tracker().move_issue(session_issue(), "Todo")
    assert info.value.category == TRACKER_STATUS
    assert TOKEN not in info.value.message


@respx.mock
async def test_a_rate_limited_write_blocks_the_reads_that_follow() -> None:
    clock = FakeClock()
    respx.post(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(429, headers={"Retry-After": "20"})
    )
    reads = respx.get(ISSUES).mock(return_value=httpx.Response(200, json=[]))
    tracker = make_tracker(clock=clock)
    with pytest.raises(TrackerError) as info:
        await tracker.add_comment(session_issue(), "x")
    assert info.value.category == TRACKER_RATE_LIMITED and info.value.retry_after_s == 20
    with pytest.raises(TrackerError):
        await tracker.fetch_issues_by_states(["Todo"])
    assert reads.call_count == 0


# Comments


@respx.mock
async def test_add_comment_returns_the_note_as_gitlab_answered_it() -> None:
    post = respx.post(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(
            201, json=note(77, "Plan:\n1. do it", created_at="2026-01-02T05:04:05.250+02:00")
        )
    )
    comment = await make_tracker().add_comment(session_issue(), "Plan:\n1. do it")
    assert sent(post) == {"body": "Plan:\n1. do it"}
    assert comment == Comment(
        "77", "Plan:\n1. do it", "symphony-bot", datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)
    )
    assert comment.created_at is not None and comment.created_at.tzinfo is UTC


@pytest.mark.parametrize("body", ["", "   ", "x" * 1_000_001])
@respx.mock
async def test_a_blank_or_oversized_comment_is_rejected_before_any_request(body: str) -> None:
    tracker = make_tracker()
    await rejected(tracker.add_comment(session_issue(), body))
    await rejected(tracker.edit_comment(session_issue(), "5", body))
    assert len(respx.calls) == 0


@respx.mock
async def test_a_note_answer_without_an_id_is_a_response_error() -> None:
    respx.post(f"{ISSUES}/1/notes").mock(return_value=httpx.Response(201, json={"body": "x"}))
    with pytest.raises(TrackerError) as info:
        await make_tracker().add_comment(session_issue(), "x")
    assert info.value.category == TRACKER_RESPONSE


async def test_edit_comment_replaces_the_body_of_the_daemons_own_note(gitlab: FakeGitLab) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    tracker = on(gitlab)
    posted = await tracker.add_comment(session_issue(), "Plan: v1")
    edited = await tracker.edit_comment(session_issue(), posted.id, "Plan: v2")
    assert (edited.id, edited.body, edited.author) == (posted.id, "Plan: v2", BOT)
    assert edited.created_at == posted.created_at
    assert [n.body for n in gitlab.issues[1].notes] == ["Plan: v2"]
    put = gitlab.requests[-1]
    assert (put.method, put.path.rsplit("/", 2)[1:], put.body) == (
        "PUT",
        ["notes", posted.id],
        {"body": "Plan: v2"},
    )
    await tracker.aclose()


async def test_editing_a_note_someone_else_wrote_or_one_that_is_gone_is_rejected(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    theirs = gitlab.add_note(1, "Please add tests.", "amy")
    tracker = on(gitlab)
    await rejected(tracker.edit_comment(session_issue(), str(theirs), "mine now"))
    await rejected(tracker.edit_comment(session_issue(), "999", "x"))
    before = len(gitlab.requests)
    await rejected(tracker.edit_comment(session_issue(), "note-1", "x"))
    assert len(gitlab.requests) == before  # not a note id: nothing sent
    assert gitlab.issues[1].notes[0].body == "Please add tests."
    await tracker.aclose()


async def test_list_comments_pages_through_every_note_oldest_first_without_system_notes(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    gitlab.add_note(1, "first", "amy")
    gitlab.add_note(1, "added ~workflow::todo label", "amy", system=True)
    for n in range(150):
        gitlab.add_note(1, f"note {n}", "bob")
    tracker = on(gitlab)
    await tracker.add_comment(session_issue(), "the daemon's")
    comments = await tracker.list_comments(session_issue())
    assert len(comments) == 152
    assert (comments[0].body, comments[0].author) == ("first", "amy")
    assert (comments[-1].body, comments[-1].author) == ("the daemon's", BOT)
    assert [c.created_at for c in comments] == sorted(c.created_at for c in comments)
    assert all(c.created_at and c.created_at.tzinfo is UTC for c in comments)
    assert len({c.id for c in comments}) == 152
    lists = [r for r in gitlab.requests if r.method == "GET" and r.path.endswith("/notes")]
    assert len(lists) == 2
    assert lists[0].query == {"sort": ["asc"], "order_by": ["created_at"], "per_page": ["100"]}
    assert lists[1].query["page"] == ["2"]
    await tracker.aclose()


@respx.mock
async def test_a_note_repeated_on_the_next_page_is_listed_once() -> None:
    first = [note(1, "a"), note(2, "b")]
    respx.get(f"{ISSUES}/1/notes").mock(
        side_effect=[
            httpx.Response(200, json=first, headers={"x-next-page": "2"}),
            httpx.Response(200, json=[note(2, "b"), note(3, "c")], headers={"x-next-page": ""}),
        ]
    )
    respx.get(f"{API}/projects/acme%2Fplatform%2Fwidgets/members/all").mock(
        return_value=httpx.Response(200, json=[], headers={"x-next-page": ""})
    )
    comments = await make_tracker().list_comments(session_issue())
    assert [c.id for c in comments] == ["1", "2", "3"]


@respx.mock
async def test_a_looping_notes_listing_fails_with_tracker_pagination() -> None:
    respx.get(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(200, json=[note(1, "a")], headers={"x-next-page": "2"})
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker().list_comments(session_issue())
    assert info.value.category == TRACKER_PAGINATION


@respx.mock
async def test_a_malformed_note_fails_the_listing() -> None:
    respx.get(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(200, json=[note(1, "a"), {"id": 2, "system": False}])
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker().list_comments(session_issue())
    assert info.value.category == TRACKER_RESPONSE


# Merge request links


def merge_request(fake: FakeGitLab, iid: int, project: str = "acme/gadgets") -> str:
    """A merge request page of this instance; by default of another project than the issue's."""
    return f"{fake.base}/{project}/-/merge_requests/{iid}"


async def test_link_pull_request_posts_the_link_tools_note_once_per_url(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    gitlab.add_note(1, "mentioned in merge request !12", system=True)  # GitLab's own line
    tracker = on(gitlab)
    url = merge_request(gitlab, 12)
    await tracker.link_pull_request(session_issue(), url, "!12 Fix the widget")
    await tracker.link_pull_request(session_issue(), url, "!12 Fix the widget")
    line = f"Linked merge request: {url}"
    assert [n.body for n in gitlab.issues[1].notes if not n.system] == [line]
    posts = [r for r in gitlab.requests if r.method == "POST"]
    assert [(r.path.rsplit("/", 1)[1], r.body) for r in posts] == [("notes", {"body": line})]
    # The link tool finds the same note: an agent linking it too adds nothing.
    tool = await tracker.execute_tool("gitlab_link_merge_request", {"url": url}, session_issue())
    assert tool.success and tool.output["commented"] is False
    assert tool.output["note_id"] == int((await tracker.list_comments(session_issue()))[0].id)
    other = merge_request(gitlab, 3)
    await tracker.link_pull_request(session_issue(), other, "!3 Gadget")
    assert [n.body for n in gitlab.issues[1].notes if not n.system] == [
        line,
        f"Linked merge request: {other}",
    ]
    await tracker.aclose()


async def test_a_merge_request_of_the_project_is_linked_by_its_closing_reference(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    tracker = on(gitlab)
    before = len(gitlab.requests)
    for own in (merge_request(gitlab, 7, PROJECT), merge_request(gitlab, 7, PROJECT.upper())):
        await tracker.link_pull_request(session_issue(), own, "!7 Fix")
    assert len(gitlab.requests) == before and gitlab.issues[1].notes == []
    # An agent's merge request may lack the reference: its tool notes it whatever the project.
    own = merge_request(gitlab, 7, PROJECT)
    tool = await tracker.execute_tool("gitlab_link_merge_request", {"url": own}, session_issue())
    assert tool.success and [n.body for n in gitlab.issues[1].notes] == [
        f"Linked merge request: {own}"
    ]
    await tracker.aclose()


async def test_a_note_the_link_tool_posted_is_found_by_the_daemon(gitlab: FakeGitLab) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    url = merge_request(gitlab, 12)
    gitlab.add_note(1, f"Linked merge request: {url}0")  # another URL that starts the same
    tracker = on(gitlab)
    tool = await tracker.execute_tool("gitlab_link_merge_request", {"url": url}, session_issue())
    assert tool.success and tool.output["commented"] is True
    await tracker.link_pull_request(session_issue(), url, "!12")
    assert [n.body for n in gitlab.issues[1].notes] == [
        f"Linked merge request: {url}0",
        f"Linked merge request: {url}",
    ]
    await tracker.aclose()


@respx.mock
async def test_a_merge_request_link_that_is_not_an_http_url_is_rejected_before_any_request() -> (
    None
):
    tracker = make_tracker()
    for bad in ("", "javascript:alert(1)", "gitlab.example/acme/widgets/-/merge_requests/1"):
        await rejected(tracker.link_pull_request(session_issue(), bad, "!1"))
    assert len(respx.calls) == 0


# New issues


async def test_create_issue_posts_it_in_its_state_with_blockers_and_returns_it_as_read(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(7, labels=["workflow::in progress"])
    gitlab.add(8, labels=["workflow::todo"])
    gitlab.add(9, state="closed")
    tracker = on(gitlab)
    [parent] = await tracker.fetch_issues_by_ids(["7"])
    created = await tracker.create_issue(
        NewTicket("Split part", "The second half.", "Todo", (f"{PROJECT}#8", "#9", "#8"), parent)
    )
    assert created.identifier == f"{PROJECT}#10" and created.state == "Todo"
    assert (created.title, created.description) == ("Split part", "The second half.")
    assert [b.identifier for b in created.blocked_by] == [f"{PROJECT}#8", f"{PROJECT}#9"]
    assert created.dispatchable is False  # #8 is still open
    assert [created] == await tracker.fetch_issues_by_ids(["10"])
    post = next(r for r in gitlab.requests if r.method == "POST" and r.path.endswith("/issues"))
    assert post.body == {
        "title": "Split part",
        "description": "The second half.",
        "labels": "workflow::todo",
    }
    links = [r.body for r in gitlab.requests if r.method == "POST" and r.path.endswith("/links")]
    assert links == [
        {"target_project_id": "42", "target_issue_iid": "8", "link_type": "is_blocked_by"},
        {"target_project_id": "42", "target_issue_iid": "9", "link_type": "is_blocked_by"},
    ]
    await tracker.aclose()


async def test_create_issue_in_the_closed_state_creates_then_closes_as_a_move_would(
    gitlab: FakeGitLab,
) -> None:
    tracker = on(gitlab)
    created = await tracker.create_issue(NewTicket("Already done", "", "done"))
    assert (created.state, gitlab.issues[1].state, gitlab.issues[1].labels) == (
        "Done",
        "closed",
        [],
    )
    post, put = gitlab.requests
    assert post.body == {"title": "Already done"}
    assert put.method == "PUT" and put.body["state_event"] == "close"
    await tracker.aclose()


async def test_create_issue_in_a_state_the_workflow_does_not_list_uses_its_prefixed_label(
    gitlab: FakeGitLab,
) -> None:
    tracker = on(gitlab)
    created = await tracker.create_issue(NewTicket("Review me", "", "Plan  Review"))
    assert gitlab.labels_of(1) == ["workflow::plan review"]
    assert created.state == "workflow::plan review"  # as a read spells a hand-off state
    await tracker.aclose()


async def test_a_blocker_that_does_not_resolve_is_rejected_before_anything_is_created(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    tracker = on(gitlab)
    for blocked_by in [("#1", "#99"), ("acme/unknown#1",), ("not a reference",), ("#0",)]:
        await rejected(tracker.create_issue(NewTicket("t", "", "Todo", blocked_by)))
    assert not any(r.method == "POST" for r in gitlab.requests)
    assert list(gitlab.issues) == [1]
    await tracker.aclose()


@respx.mock
async def test_a_blocker_in_another_project_is_linked_by_that_projects_id() -> None:
    other = respx.get(f"{API}/projects/acme%2Fother/issues/3").mock(
        return_value=httpx.Response(200, json=issue(3, project="acme/other", project_id=43))
    )
    respx.post(ISSUES).mock(
        return_value=httpx.Response(201, json=issue(11, labels=["workflow::todo"]))
    )
    link = respx.post(f"{ISSUES}/11/links").mock(return_value=httpx.Response(201, json={}))
    respx.get(f"{ISSUES}/11/links").mock(return_value=httpx.Response(200, json=[]))
    created = await make_tracker().create_issue(NewTicket("t", "", "Todo", ("acme/other#3",)))
    assert created.id == "11" and other.call_count == 1
    assert sent(link) == {
        "target_project_id": "43",
        "target_issue_iid": "3",
        "link_type": "is_blocked_by",
    }


async def test_without_blocking_links_the_issue_is_created_and_the_blocker_logged_as_lost(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    gitlab.links_available = False  # a tier without blocking links
    tracker = on(gitlab)
    with capture_logs() as logs:
        created = await tracker.create_issue(NewTicket("t", "", "Todo", ("#1",)))
    assert created.id == "2" and created.blocked_by == () and created.dispatchable
    [lost] = [entry for entry in logs if entry["event"] == "blocker not recorded"]
    assert lost["blocker"] == "#1" and "403" in lost["reason"]
    await tracker.aclose()


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (201, {"id": 1, "link_type": "relates_to"}),  # a version that ignores the type
        (404, error("No matching issue found.")),  # the blocker went away meanwhile
    ],
)
@respx.mock
async def test_a_blocker_gitlab_does_not_record_as_blocking_is_logged_not_raised(
    status: int, answer: dict[str, object]
) -> None:
    respx.get(f"{ISSUES}/3").mock(return_value=httpx.Response(200, json=issue(3)))
    respx.post(ISSUES).mock(
        return_value=httpx.Response(201, json=issue(11, labels=["workflow::todo"]))
    )
    respx.post(f"{ISSUES}/11/links").mock(return_value=httpx.Response(status, json=answer))
    respx.get(f"{ISSUES}/11/links").mock(return_value=httpx.Response(200, json=[]))
    with capture_logs() as logs:
        created = await make_tracker().create_issue(NewTicket("t", "", "Todo", ("#3",)))
    assert created.id == "11" and created.blocked_by == ()
    assert [e["blocker"] for e in logs if e["event"] == "blocker not recorded"] == ["#3"]


@pytest.mark.parametrize("title", ["", "   ", "x" * 256, "two\nlines"])
@respx.mock
async def test_a_new_issue_needs_a_one_line_title_gitlab_accepts(title: str) -> None:
    await rejected(make_tracker().create_issue(NewTicket(title, "", "Todo")))
    assert len(respx.calls) == 0


@respx.mock
async def test_an_issue_gitlab_refuses_to_create_is_rejected_with_its_reason() -> None:
    respx.post(ISSUES).mock(
        return_value=httpx.Response(400, json=error({"labels": ["is invalid"]}))
    )
    failure = await rejected(make_tracker().create_issue(NewTicket("t", "", "Todo")))
    assert "is invalid" in failure.message


@respx.mock
async def test_a_failure_after_the_issue_exists_names_the_created_issue() -> None:
    respx.post(ISSUES).mock(return_value=httpx.Response(201, json=issue(12)))
    respx.put(f"{ISSUES}/12").mock(return_value=httpx.Response(503))
    with pytest.raises(TrackerError) as info:
        await make_tracker().create_issue(NewTicket("t", "", "Done"))
    assert info.value.category == TRACKER_STATUS
    assert f"created {PROJECT}#12" in info.value.message


# States


async def test_the_tracker_lists_no_states_since_any_label_can_be_one() -> None:
    assert await make_tracker().tracker_states() is None


async def test_ensure_states_creates_only_the_missing_state_labels(gitlab: FakeGitLab) -> None:
    gitlab.add_label("workflow::todo")
    for n in range(120):  # the label list spans two pages
        gitlab.add_label(f"area::{n}")
    tracker = on(gitlab)
    created = await tracker.ensure_states(
        ["Todo", "Plan Review", "plan review", "Done", "Cancelled"]
    )
    assert created == ["Plan Review", "Cancelled"]  # the closed state is a closed issue
    assert gitlab.labels["workflow::plan review"]["color"].startswith("#")
    assert gitlab.labels["workflow::cancelled"]["description"] == "Workflow state Cancelled"
    assert await tracker.ensure_states(["Todo", "Plan Review", "Done"]) == []
    label_lists = [r for r in gitlab.requests if r.method == "GET" and r.path.endswith("/labels")]
    assert [r.query.get("page") for r in label_lists] == [None, ["2"], None, ["2"]]
    await tracker.aclose()


@respx.mock
async def test_ensure_states_counts_a_label_created_meanwhile_as_not_created() -> None:
    respx.get(LABELS).mock(return_value=httpx.Response(200, json=[]))
    respx.post(LABELS).mock(return_value=httpx.Response(409, json=error("Label already exists")))
    assert await make_tracker().ensure_states(["Todo"]) == []


@respx.mock
async def test_ensure_states_rejects_a_state_no_label_can_hold_before_any_request() -> None:
    await rejected(make_tracker().ensure_states(["Todo", "a,b"]))
    assert len(respx.calls) == 0


@respx.mock
async def test_ensure_states_for_the_closed_state_alone_sends_nothing() -> None:
    assert await make_tracker().ensure_states(["Done"]) == []
    assert len(respx.calls) == 0


def test_the_move_tool_is_marked_as_moving_the_ticket() -> None:
    marked = {spec.name: spec.moves_ticket for spec in make_tracker().agent_tools()}
    assert marked == {
        "gitlab_move_issue": True,
        "gitlab_add_comment": False,
        "gitlab_link_merge_request": False,
    }


# Membership of comment authors


async def test_comments_say_whether_their_authors_are_project_members_with_one_request() -> None:
    clock = FakeClock()
    with serve(FakeGitLab()) as gitlab:
        gitlab.add(1, labels=["workflow::todo"])
        gitlab.members.add("guest", 10)
        gitlab.members.add("minimal", 5)
        gitlab.members.add("waiting", 30, state="awaiting")
        for author in ("amy", "guest", "minimal", "waiting", "stranger", "amy"):
            gitlab.add_note(1, f"by {author}", author)
        tracker = make_tracker(
            {"base_url": gitlab.base}, clock=clock, environ={"GITLAB_TOKEN": gitlab.token}
        )
        comments = await tracker.list_comments(session_issue())
        assert [(c.author, c.author_member) for c in comments] == [
            ("amy", True),
            ("guest", True),
            ("minimal", False),
            ("waiting", False),
            ("stranger", False),
            ("amy", True),
        ]
        assert len(gitlab.members.asked) == 1
        asked = {int(i) for i in gitlab.members.asked[0]["user_ids[]"]}
        assert len(asked) == 5  # each author once, not once per note

        gitlab.members.add("stranger")
        await tracker.list_comments(session_issue())
        assert len(gitlab.members.asked) == 1  # the answers stand within the TTL
        clock.now += 301
        comments = await tracker.list_comments(session_issue())
        assert len(gitlab.members.asked) == 2
        assert [c.author_member for c in comments if c.author == "stranger"] == [True]
        await tracker.aclose()


async def test_members_the_token_may_not_read_leave_every_author_unknown(
    gitlab: FakeGitLab,
) -> None:
    gitlab.add(1, labels=["workflow::todo"])
    gitlab.add_note(1, "hi", "amy")
    gitlab.members.readable = False
    tracker = on(gitlab)
    with capture_logs() as logs:
        comments = await tracker.list_comments(session_issue())
    assert [(c.author, c.author_member) for c in comments] == [("amy", None)]
    assert any("members unreadable" in e["event"] for e in logs)
    await tracker.aclose()


@respx.mock
async def test_the_members_list_is_followed_across_pages() -> None:
    respx.get(f"{ISSUES}/1/notes").mock(
        return_value=httpx.Response(
            200, json=[note(1, "a", author="amy"), note(2, "b", author="bob")]
        )
    )
    amy, bob = payloads.member("amy", 30), payloads.member("bob", 40)
    respx.get(f"{API}/projects/acme%2Fplatform%2Fwidgets/members/all").mock(
        side_effect=[
            httpx.Response(200, json=[amy], headers={"x-next-page": "2"}),
            httpx.Response(200, json=[bob], headers={"x-next-page": ""}),
        ]
    )
    comments = await make_tracker().list_comments(session_issue())
    assert [c.author_member for c in comments] == [True, True]

"""The daemon's writes to Linear: moves as the move tool makes them, comments (posted, edited,
listed oldest first), new issues in the parent's team with their blockers, the scope's workflow
states, and the rejections that a retry would not fix."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from symphony.base.issue import Issue
from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_RATE_LIMITED,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    NewTicket,
    TrackerError,
)
from symphony_adapters.linear import LinearTracker, writes
from tests.adapters.linear.conftest import MakeTracker
from tests.adapters.linear.fake_linear import API_KEY, FakeLinear


async def read(tracker: LinearTracker, issue_id: str) -> Issue:
    [issue] = await tracker.fetch_issues_by_ids([issue_id])
    return issue


async def rejected(call: Awaitable[Any]) -> TrackerError:
    with pytest.raises(TrackerError) as err:
        await call
    assert err.value.category == TRACKER_REJECTED, err.value.message
    return err.value


# Moves


async def test_daemon_move_sends_what_the_move_tool_sends(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    one, two = await read(tracker, fake.add("ENG-1").id), await read(tracker, fake.add("ENG-2").id)
    sent = len(fake.requests)
    await tracker.move_issue(one, "human review")
    by_daemon = fake.requests[sent:]
    sent = len(fake.requests)
    await tracker.execute_tool("linear_move_issue", {"state": "human review"}, two)
    by_tool = fake.requests[sent:]
    assert [name for name, _ in by_daemon] == ["SymphonyIssueTeamStates", "SymphonyMoveIssue"]
    assert by_daemon[1][1] == {"id": one.id, "stateId": "state-eng-human-review"}
    assert [name for name, _ in by_tool] == [name for name, _ in by_daemon]
    assert fake.by_identifier("ENG-1").state == "Human Review"
    [moved] = await tracker.fetch_issues_by_ids([one.id])
    assert moved.state == "Human Review"


async def test_daemon_move_to_the_current_state_sends_no_mutation(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1", state="In Progress").id)
    await tracker.move_issue(issue, "IN PROGRESS")
    assert "SymphonyMoveIssue" not in fake.operations()


async def test_daemon_move_finds_the_state_in_the_team_the_issue_is_in_now(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.by_identifier("ENG-1").team = "OPS"  # moved to OPS since it was read
    await tracker.move_issue(issue, "Shipped")
    assert fake.requests[-1][1]["stateId"] == "state-ops-shipped"


async def test_daemon_move_to_an_unknown_state_is_rejected_naming_the_teams_states(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    error = await rejected(tracker.move_issue(issue, "Plan Review"))
    assert "team ENG" in error.message and "Human Review" in error.message
    assert await rejected(tracker.move_issue(issue, "  "))
    assert "SymphonyMoveIssue" not in fake.operations()
    assert fake.by_identifier("ENG-1").state == "Todo"


async def test_a_move_linear_answers_with_success_false_is_rejected(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    team = fake.teams["ENG"]
    lookup = {
        "id": issue.id,
        "identifier": "ENG-1",
        "state": {"id": "state-eng-todo", "name": "Todo"},
        "team": {"id": team.id, "key": "ENG", "states": {"nodes": team.states}},
    }
    fake.fail_next(200, {"data": {"issue": lookup}})
    fake.fail_next(200, {"data": {"issueUpdate": {"success": False, "issue": None}}})
    error = await rejected(tracker.move_issue(issue, "Done"))
    assert "success: false" in error.message


async def test_moving_an_issue_that_is_gone_keeps_the_response_category_of_the_tool(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    del fake.issues[issue.id]
    with pytest.raises(TrackerError) as err:
        await tracker.move_issue(issue, "Done")
    assert err.value.category == TRACKER_RESPONSE


async def test_a_move_linear_fails_with_a_5xx_is_sent_once_and_left_to_the_daemon_to_retry(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.fail_operation("SymphonyMoveIssue", 503, {"errors": [{"message": "upstream error"}]})
    with pytest.raises(TrackerError) as err:
        await tracker.move_issue(issue, "Human Review")
    assert err.value.category == TRACKER_STATUS and "503" in err.value.message
    # The mutation may have been applied: the client does not send it again by itself.
    assert fake.operations().count("SymphonyMoveIssue") == 1
    assert fake.by_identifier("ENG-1").state == "Todo"
    await tracker.move_issue(issue, "Human Review")
    assert fake.by_identifier("ENG-1").state == "Human Review"


def test_the_move_tool_and_the_mutating_graphql_tool_are_marked_as_moving_the_ticket(
    make_tracker: MakeTracker,
) -> None:
    marked = {spec.name: spec.moves_ticket for spec in make_tracker().agent_tools()}
    assert marked == {
        "linear_move_issue": True,
        "linear_add_comment": False,
        "linear_attach_url": False,
        "linear_graphql": True,  # it runs mutations: stage mode withholds it too
    }


# Comments


async def test_add_comment_returns_the_comment_as_linear_stored_it(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    comment = await tracker.add_comment(issue, "Plan:\n1. do it")
    [stored] = fake.comment_records
    assert comment.id == stored.id == "comment-1"
    assert comment.body == "Plan:\n1. do it"
    assert comment.author == "symphony"  # the key's user, by display name
    assert comment.created_at == stored.created_at and comment.created_at.tzinfo == UTC
    # The same request the comment tool sends.
    assert fake.requests[-1] == ("SymphonyAddComment", {"issueId": issue.id, "body": comment.body})
    tool = await tracker.execute_tool("linear_add_comment", {"body": "Done"}, issue)
    assert tool.success and fake.requests[-1][0] == "SymphonyAddComment"


async def test_a_blank_comment_is_rejected_without_a_request(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    sent = len(fake.requests)
    await rejected(tracker.add_comment(issue, " \n"))
    assert len(fake.requests) == sent


async def test_a_comment_linear_answers_with_success_false_is_rejected(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.fail_next(200, {"data": {"commentCreate": {"success": False, "comment": None}}})
    await rejected(tracker.add_comment(issue, "hi"))


async def test_comments_are_listed_oldest_first_across_pages(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.add("ENG-2")
    base = datetime(2026, 3, 1, 9, tzinfo=UTC)
    # Served in this order; Linear's order is not promised, so the adapter sorts.
    for minutes, body in [(30, "third"), (10, "first"), (40, "fourth"), (20, "second")]:
        fake.comment("ENG-1", body, at=base + timedelta(minutes=minutes))
    fake.comment("ENG-1", "fifth", user="user-me", at=base + timedelta(minutes=50))
    fake.comment("ENG-2", "elsewhere")
    fake.comment_page_cap = 2
    sent = len(fake.requests)
    comments = await tracker.list_comments(issue)
    assert [c.body for c in comments] == ["first", "second", "third", "fourth", "fifth"]
    assert [c.author for c in comments] == ["ana", "ana", "ana", "ana", "symphony"]
    assert comments[0].created_at == base + timedelta(minutes=10)
    assert all(c.created_at is not None and c.created_at.tzinfo == UTC for c in comments)
    pages = fake.requests[sent:]
    assert [name for name, _ in pages] == ["SymphonyIssueComments"] * 3
    assert [v["after"] for _, v in pages] == [None, "2", "4"]
    assert all(v == {"id": issue.id, "first": 100, "after": v["after"]} for _, v in pages)


async def test_a_comment_author_is_the_display_name_else_the_name_else_none(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.users["user-ana"].display_name = ""
    fake.comment("ENG-1", "by a person")
    fake.comment("ENG-1", "by an integration", user=None)
    assert [c.author for c in await tracker.list_comments(issue)] == ["Ana Lima", None]


async def test_a_comment_author_is_a_member_unless_a_guest_or_an_integration(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.comment("ENG-1", "by a member")
    fake.users["user-ana"].guest = True
    fake.comment("ENG-1", "by a guest")
    fake.comment("ENG-1", "by an integration", user=None)
    said = await tracker.list_comments(issue)
    assert [c.author_member for c in said] == [False, False, False]  # ana is a guest now
    fake.users["user-ana"].guest = False
    said = await tracker.list_comments(issue)
    assert [c.author_member for c in said] == [True, True, False]


async def test_an_issue_without_comments_lists_none_in_one_request(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    sent = len(fake.requests)
    assert await tracker.list_comments(issue) == []
    assert len(fake.requests) == sent + 1


async def test_a_comment_listing_that_does_not_end_is_a_pagination_fault(
    fake: FakeLinear, make_tracker: MakeTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    for n in range(5):
        fake.comment("ENG-1", f"comment {n}")
    fake.comment_page_cap = 1
    monkeypatch.setattr(writes, "MAX_COMMENT_PAGES", 3)
    with pytest.raises(TrackerError) as err:
        await tracker.list_comments(issue)
    assert err.value.category == TRACKER_PAGINATION
    stuck = {"hasNextPage": True, "endCursor": None}
    fake.fail_next(
        200, {"data": {"issue": {"id": issue.id, "comments": {"nodes": [], "pageInfo": stuck}}}}
    )
    with pytest.raises(TrackerError) as again:
        await tracker.list_comments(issue)
    assert again.value.category == TRACKER_PAGINATION


async def test_edit_comment_replaces_the_body_of_the_daemons_own_comment(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    posted = await tracker.add_comment(issue, "Plan: draft")
    sent = len(fake.requests)
    edited = await tracker.edit_comment(issue, posted.id, "Plan: final")
    assert (edited.id, edited.body, edited.author) == (posted.id, "Plan: final", "symphony")
    assert edited.created_at == posted.created_at
    assert [c.body for c in await tracker.list_comments(issue)] == ["Plan: final"]
    assert [name for name, _ in fake.requests[sent : sent + 3]] == [
        "SymphonyViewer",  # asked once per tracker, then kept
        "SymphonyCommentOwner",
        "SymphonyEditComment",
    ]
    await tracker.edit_comment(issue, posted.id, "Plan: final, again")
    assert fake.operations().count("SymphonyViewer") == 1


async def test_editing_a_comment_that_is_not_the_daemons_own_on_this_issue_is_rejected(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.add("ENG-2")
    persons = fake.comment("ENG-1", "Please add tests.")
    elsewhere = fake.comment("ENG-2", "Mine, on another issue", user="user-me")
    error = await rejected(tracker.edit_comment(issue, persons.id, "overwritten"))
    assert "not written by the API key's user" in error.message
    error = await rejected(tracker.edit_comment(issue, elsewhere.id, "overwritten"))
    assert "not a comment on ENG-1" in error.message
    await rejected(tracker.edit_comment(issue, "comment-404", "overwritten"))
    await rejected(tracker.edit_comment(issue, "c", " "))
    assert "SymphonyEditComment" not in fake.operations()
    assert [c.body for c in fake.comment_records] == ["Please add tests.", "Mine, on another issue"]


# Pull request links

PR = "https://github.com/acme/widgets/pull/12"


async def test_daemon_links_a_pull_request_as_the_attach_tool_does_once_per_url(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    one, two = await read(tracker, fake.add("ENG-1").id), await read(tracker, fake.add("ENG-2").id)
    sent = len(fake.requests)
    await tracker.link_pull_request(one, PR, "#12 Fix the widget")
    await tracker.link_pull_request(one, PR, "#12 Fix the widget")
    by_daemon = fake.requests[sent:]
    assert (
        by_daemon
        == [("SymphonyAttachUrl", {"issueId": one.id, "url": PR, "title": "#12 Fix the widget"})]
        * 2
    )
    # Linear keeps one attachment per URL and issue: the second call added nothing.
    assert fake.attachments == {(one.id, PR): "#12 Fix the widget"}
    tool = await tracker.execute_tool("linear_attach_url", {"url": PR}, two)
    assert tool.success and fake.requests[-1][0] == "SymphonyAttachUrl"


async def test_a_long_pull_request_title_is_cut_to_what_the_tool_accepts(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    await tracker.link_pull_request(issue, PR, "  " + "x" * 400)
    assert fake.attachments == {(issue.id, PR): "x" * 250}
    await tracker.link_pull_request(issue, "https://github.com/acme/widgets/pull/13", " ")
    assert fake.attachments[(issue.id, "https://github.com/acme/widgets/pull/13")] is None


async def test_a_pull_request_link_that_is_not_http_is_rejected_without_a_request(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    sent = len(fake.requests)
    await rejected(tracker.link_pull_request(issue, "javascript:alert(1)", "PR"))
    assert len(fake.requests) == sent


async def test_a_link_linear_answers_with_success_false_is_rejected(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.fail_next(200, {"data": {"attachmentLinkURL": {"success": False, "attachment": None}}})
    error = await rejected(tracker.link_pull_request(issue, PR, "PR"))
    assert "success: false" in error.message
    fake.fail_next(200, {"data": {"attachmentLinkURL": {"success": False, "attachment": None}}})
    tool = await tracker.execute_tool("linear_attach_url", {"url": PR}, issue)
    assert not tool.success and tool.output["error"] == "mutation_failed"


# New issues


async def test_create_issue_in_the_parents_team_in_the_named_state_with_blockers(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    parent = await read(tracker, fake.add("ENG-7").id)
    fake.add("ENG-9", state="Done")
    sent = len(fake.requests)
    created = await tracker.create_issue(
        NewTicket("Split part", "The second half.\n", "todo", ("ENG-7", "eng-9", "ENG-7"), parent)
    )
    assert created.identifier == "ENG-10" and created.state == "Todo"
    assert created.title == "Split part" and created.description == "The second half."
    assert [b.identifier for b in created.blocked_by] == ["ENG-7", "ENG-9"]
    assert created.dispatchable is False  # ENG-7 is still open
    assert fake.by_identifier("ENG-10").project is None  # the scope is the team
    assert [name for name, _ in fake.requests[sent:]] == [
        "SymphonyIssueScope",
        "SymphonyIssueRef",
        "SymphonyIssueRef",
        "SymphonyCreateIssue",
        "SymphonyAddBlocker",
        "SymphonyAddBlocker",
        "SymphonyIssuesById",
    ]
    create = next(v for name, v in fake.requests if name == "SymphonyCreateIssue")
    assert create == {
        "teamId": "team-eng",
        "title": "Split part",
        "description": "The second half.",
        "stateId": "state-eng-todo",
        "projectId": None,
    }
    relations = [v for name, v in fake.requests if name == "SymphonyAddBlocker"]
    assert relations[0] == {"blockerId": "uuid-eng-7", "issueId": created.id}


async def test_create_issue_without_a_parent_goes_to_the_configured_team(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker(team_key="OPS")
    created = await tracker.create_issue(NewTicket("Standalone", "", "Doing"))
    assert (created.identifier, created.state, created.description) == ("OPS-1", "Doing", None)
    assert created.blocked_by == () and created.dispatchable is True
    assert fake.requests[0] == ("SymphonyTeamByKey", {"key": "OPS"})


async def test_project_scope_creates_in_the_parents_team_inside_the_project(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker(team_key=None, project_slug="proj1slug")
    parent = await read(tracker, fake.add("OPS-3", project="proj1slug").id)
    created = await tracker.create_issue(NewTicket("Follow-up", "text", "Todo", (), parent))
    assert created.identifier == "OPS-4"
    assert created.native_ref is not None
    assert created.native_ref["project_slug_id"] == "proj1slug"
    create = next(v for name, v in fake.requests if name == "SymphonyCreateIssue")
    assert create["teamId"] == "team-ops" and create["projectId"] == "project-proj1slug"


async def test_project_scope_without_a_parent_needs_the_project_to_have_one_team(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    solo = make_tracker(team_key=None, project_slug="solo")
    created = await solo.create_issue(NewTicket("Alone", "", "Backlog"))
    assert created.identifier == "ENG-1" and fake.by_identifier("ENG-1").project == "solo"
    shared = make_tracker(team_key=None, project_slug="proj1slug")
    error = await rejected(shared.create_issue(NewTicket("Where?", "", "Todo")))
    assert "ENG, OPS" in error.message
    assert fake.operations().count("SymphonyCreateIssue") == 1


async def test_create_rejects_an_unknown_blocker_before_creating_anything(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    parent = await read(tracker, fake.add("ENG-1").id)
    for blockers in [("ENG-1", "ENG-404"), ("not an identifier",), ("",)]:
        await rejected(tracker.create_issue(NewTicket("t", "", "Todo", blockers, parent)))
    assert "SymphonyCreateIssue" not in fake.operations()
    assert list(fake.issues) == [parent.id]


async def test_create_rejects_an_unknown_state_or_a_bad_title_before_creating_anything(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker(team_key="OPS")
    parent = await read(tracker, fake.add("OPS-1").id)
    error = await rejected(tracker.create_issue(NewTicket("t", "", "Human Review", (), parent)))
    assert "team OPS" in error.message and "Todo, Doing, Shipped" in error.message
    await rejected(tracker.create_issue(NewTicket("two\nlines", "", "Todo", (), parent)))
    await rejected(tracker.create_issue(NewTicket(" ", "", "Todo", (), parent)))
    assert "SymphonyCreateIssue" not in fake.operations()


async def test_create_rejects_a_parent_outside_the_configured_scope(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    # Parents as trackers of other scopes read them (a refresh omits out-of-scope issues).
    ops = await read(make_tracker(team_key="OPS"), fake.add("OPS-1").id)
    error = await rejected(make_tracker().create_issue(NewTicket("t", "", "Todo", (), ops)))
    assert "OPS-1 is not in team ENG" in error.message
    elsewhere = await read(make_tracker(), fake.add("ENG-1", project="elsewhere").id)
    project_scope = make_tracker(team_key=None, project_slug="proj1slug")
    error = await rejected(project_scope.create_issue(NewTicket("t", "", "Todo", (), elsewhere)))
    assert "ENG-1 is not in project proj1slug" in error.message
    assert "SymphonyCreateIssue" not in fake.operations()


async def test_a_parent_that_is_gone_is_rejected(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    parent = await read(tracker, fake.add("ENG-1").id)
    del fake.issues[parent.id]
    error = await rejected(tracker.create_issue(NewTicket("t", "", "Todo", (), parent)))
    assert "not visible" in error.message


async def test_a_blocker_linear_refuses_after_creating_names_the_created_issue(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    parent = await read(tracker, fake.add("ENG-1").id)
    sent = len(fake.requests)
    original = fake._op_SymphonyAddBlocker

    def refuse(v: dict[str, object]) -> dict[str, object]:
        original(v)  # type: ignore[arg-type]
        return {"data": {"issueRelationCreate": {"success": False, "issueRelation": {"id": "r"}}}}

    fake._op_SymphonyAddBlocker = refuse  # type: ignore[method-assign]
    error = await rejected(tracker.create_issue(NewTicket("t", "", "Todo", ("ENG-1",), parent)))
    assert "ENG-2 was created" in error.message and "ENG-1" in error.message
    assert "SymphonyCreateIssue" in [name for name, _ in fake.requests[sent:]]


async def test_other_lookup_errors_are_not_mistaken_for_unknown_blockers(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    parent = await read(tracker, fake.add("ENG-1").id)
    lookup = {
        "id": parent.id,
        "identifier": "ENG-1",
        "team": fake.team_node(fake.teams["ENG"]),
        "project": None,
    }
    fake.fail_next(200, {"data": {"issue": lookup}})
    fake.fail_next(
        200,
        {
            "errors": [{"message": "Internal error", "extensions": {"type": "internal error"}}],
            "data": None,
        },
    )
    with pytest.raises(TrackerError) as err:
        await tracker.create_issue(NewTicket("t", "", "Todo", ("ENG-1",), parent))
    assert err.value.category == TRACKER_RESPONSE
    assert "SymphonyCreateIssue" not in fake.operations()


# States


async def test_tracker_states_are_the_configured_teams_workflow_states(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    assert await make_tracker(team_key="OPS").tracker_states() == ["Todo", "Doing", "Shipped"]


async def test_a_projects_states_are_its_teams_states_each_name_once(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    states = await make_tracker(team_key=None, project_slug="proj1slug").tracker_states()
    assert states == [
        "Backlog",
        "Todo",
        "In Progress",
        "Human Review",
        "Done",
        "Canceled",
        "Duplicate",
        "Doing",
        "Shipped",
    ]


async def test_states_of_a_scope_the_key_cannot_see_are_rejected(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    await rejected(make_tracker(team_key="NOPE").tracker_states())
    await rejected(make_tracker(team_key=None, project_slug="gone").tracker_states())


async def test_a_project_with_more_teams_than_one_request_reads_is_a_pagination_fault(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    project = {
        "id": "project-big",
        "slugId": "big",
        "teams": {"nodes": [], "pageInfo": {"hasNextPage": True}},
    }
    fake.fail_next(200, {"data": {"projects": {"nodes": [project]}}})
    with pytest.raises(TrackerError) as err:
        await make_tracker(team_key=None, project_slug="big").tracker_states()
    assert err.value.category == TRACKER_PAGINATION


async def test_ensure_states_creates_nothing_and_sends_nothing(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    assert await make_tracker().ensure_states(["Plan Review", "Todo"]) == []
    assert fake.requests == []


# Shared client


async def test_writes_share_the_clients_rate_limit_block_and_never_show_the_key(
    fake: FakeLinear, make_tracker: MakeTracker
) -> None:
    tracker = make_tracker()
    issue = await read(tracker, fake.add("ENG-1").id)
    fake.fail_next(429, {"message": f"slow down {API_KEY}"}, {"retry-after": "30"})
    with pytest.raises(TrackerError) as err:
        await tracker.add_comment(issue, "hi")
    assert err.value.category == TRACKER_RATE_LIMITED and err.value.retry_after_s == 30
    sent = len(fake.requests)
    for call in [
        tracker.move_issue(issue, "Done"),
        tracker.list_comments(issue),
        tracker.create_issue(NewTicket("t", "", "Todo", (), issue)),
        tracker.tracker_states(),
    ]:
        with pytest.raises(TrackerError) as blocked:
            await call
        assert blocked.value.category == TRACKER_RATE_LIMITED
        assert API_KEY not in blocked.value.message
    assert len(fake.requests) == sent  # blocked calls spend nothing
    assert fake.comments == []

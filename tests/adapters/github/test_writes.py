"""The daemon's writes on GitHub (moves, comments, new issues, state labels) in both scopes,
against the in-memory fake GitHub (REST and the Projects v2 GraphQL operations) or respx."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from symphony.base.issue import Issue
from symphony.config.sections import TrackerSettings
from symphony.tracker.contract import (
    TRACKER_RATE_LIMITED,
    TRACKER_REJECTED,
    TRACKER_STATUS,
    NewTicket,
    TrackerContext,
    TrackerError,
)
from symphony_adapters import github as github_adapter
from symphony_adapters.github import queries
from symphony_adapters.github.config import parse_config
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.clock import FakeClock
from tests.adapters.github.fake_github import FakeGitHub, FakeProject, transport
from tests.adapters.github.helpers import ENV, ISSUES, TOKEN, make_tracker
from tests.adapters.github.payloads import API, REPO, comment, error, issue, validation_failed

PROJECT = {"project": {"owner": "acme", "number": 3}}
LONG_STATE = "A state whose label is much too long for GitHub"  # its label has 54 characters


def on_fake(fake: FakeGitHub, provider: Mapping[str, Any] | None = None) -> GitHubTracker:
    clock = FakeClock()
    scope = provider if provider is not None else {"repository": fake.repo}
    config = parse_config(scope, ENV, ("Todo", "In Progress"), ("Done",))
    return GitHubTracker(config, transport=transport(fake), clock=clock, sleep=clock.sleep)


def board(**fields: Any) -> FakeGitHub:
    fake = FakeGitHub(token=TOKEN, **fields)
    fake.add(1, labels=["status:todo", "bug"])
    fake.add(2, labels=["status:todo", "bug"])
    return fake


async def read(tracker: GitHubTracker, issue_id: str) -> Issue:
    [found] = await tracker.fetch_issues_by_ids([issue_id])
    return found


def sent(fake: FakeGitHub, since: int = 0) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests[since:]]


def writes(fake: FakeGitHub, since: int = 0) -> list[tuple[str, str, Any]]:
    return [(r.method, r.path, r.body) for r in fake.requests[since:] if r.method != "GET"]


def repository_issue(repository: str = REPO, number: int = 1) -> Issue:
    return Issue(
        id=str(number),
        identifier=f"{repository}#{number}",
        title="t",
        state="Todo",
        dispatchable=True,
        native_ref={"repository": repository, "number": number},
    )


def foreign_issue() -> Issue:
    return repository_issue("other/repo")


async def rejected(call: Any) -> TrackerError:
    with pytest.raises(TrackerError) as info:
        await call
    assert info.value.category == TRACKER_REJECTED
    return info.value


# Moves


async def test_move_issue_sends_what_the_move_tool_sends_and_repeating_it_writes_nothing() -> None:
    fake = board()
    tracker = on_fake(fake)
    first, second = await read(tracker, "1"), await read(tracker, "2")
    start = len(fake.requests)
    result = await tracker.execute_tool("github_move_issue", {"state": "In Progress"}, first)
    assert result.success, result.output
    middle = len(fake.requests)
    await tracker.move_issue(second, "in progress")
    assert [(m, p.replace("/1", "/N")) for m, p in sent(fake, start)[: middle - start]] == [
        (m, p.replace("/2", "/N")) for m, p in sent(fake, middle)
    ]
    assert fake.labels_of(1) == fake.labels_of(2) == ["bug", "status:in-progress"]
    again = len(fake.requests)
    await tracker.move_issue(second, "In Progress")
    assert sent(fake, again) == [("GET", f"/repos/{REPO}/issues/2")]


async def test_move_issue_to_the_closed_state_closes_the_issue_and_a_later_move_reopens_it() -> (
    None
):
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    await tracker.move_issue(target, "done")
    assert fake.issues[1].state == "closed" and fake.labels_of(1) == ["bug"]
    assert (await read(tracker, "1")).state == "Done"
    await tracker.move_issue(target, "Todo")
    assert fake.issues[1].state == "open" and fake.labels_of(1) == ["bug", "status:todo"]


@pytest.mark.parametrize("state", ["two\nlines", "", LONG_STATE])
async def test_move_issue_rejects_a_state_it_cannot_write_before_any_request(state: str) -> None:
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    await rejected(tracker.move_issue(target, state))
    assert sent(fake, start) == []


async def test_writes_refuse_an_issue_outside_the_configured_repository() -> None:
    fake = board()
    tracker = on_fake(fake)
    for call in (
        tracker.move_issue(foreign_issue(), "Todo"),
        tracker.add_comment(foreign_issue(), "hello"),
        tracker.edit_comment(foreign_issue(), "101", "hello"),
        tracker.list_comments(foreign_issue()),
        tracker.link_pull_request(foreign_issue(), f"{WEB}/{REPO}/pull/5", "#5 PR"),
    ):
        error_ = await rejected(call)
        assert "other/repo#1" in error_.message
    assert fake.requests == []


# Comments


async def test_add_comment_returns_the_comment_as_github_stored_it() -> None:
    fake = board()
    tracker = on_fake(fake)
    added = await tracker.add_comment(await read(tracker, "1"), "Plan:\n1. do it")
    assert fake.comments_of(1) == ["Plan:\n1. do it"]
    assert (added.id, added.body, added.author) == ("101", "Plan:\n1. do it", "octocat")
    assert added.created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def test_the_comment_tool_and_add_comment_post_the_same_request() -> None:
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    result = await tracker.execute_tool("github_add_comment", {"body": "same"}, target)
    assert result.output["comment_id"] == 101
    await tracker.add_comment(target, "same")
    first, second = writes(fake, start)
    assert first == second == ("POST", f"/repos/{REPO}/issues/1/comments", {"body": "same"})


async def test_add_comment_rejects_an_empty_body_before_any_request() -> None:
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    await rejected(tracker.add_comment(target, "  "))
    assert sent(fake, start) == []


async def test_list_comments_reads_every_page_oldest_first_with_logins_and_utc_times() -> None:
    fake = board()
    for n in range(130):
        fake.comment(
            1,
            f"comment {n}",
            author=None if n == 5 else ("ana" if n % 2 else "octocat"),
            created_at=f"2026-02-01T{n // 60:02d}:{n % 60:02d}:00Z",
        )
    fake.comment(2, "on another issue")
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    comments = await tracker.list_comments(target)
    assert [c.body for c in comments] == [f"comment {n}" for n in range(130)]
    assert [c.author for c in comments[4:7]] == ["octocat", None, "octocat"]
    assert comments[1].author == "ana"
    assert comments[-1].created_at == datetime(2026, 2, 1, 2, 9, tzinfo=UTC)
    assert all(c.created_at and c.created_at.utcoffset() is not None for c in comments)
    pages = fake.requests[start:]
    assert [(r.path, r.query.get("page")) for r in pages] == [
        (f"/repos/{REPO}/issues/1/comments", None),
        (f"/repos/{REPO}/issues/1/comments", ["2"]),
    ]
    assert all(r.query["per_page"] == ["100"] for r in pages)
    again = len(fake.requests)
    assert await tracker.list_comments(target) == comments
    assert {r.status for r in fake.requests[again:]} == {304}  # unchanged: no quota spent


async def test_a_comment_author_is_a_member_when_github_associates_them_with_the_repository() -> (
    None
):
    fake = board()
    for association in ("OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "NONE"):
        fake.comment(1, association.lower(), association=association)
    tracker = on_fake(fake)
    comments = await tracker.list_comments(await read(tracker, "1"))
    assert [c.author_member for c in comments] == [True, True, True, False, False]


async def test_list_comments_of_an_issue_without_comments_is_empty() -> None:
    fake = board()
    tracker = on_fake(fake)
    assert await tracker.list_comments(await read(tracker, "2")) == []


async def test_edit_comment_replaces_the_body_and_leaves_an_unchanged_one_alone() -> None:
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    posted = await tracker.add_comment(target, "Plan: draft")
    edited = await tracker.edit_comment(target, posted.id, "Plan: final")
    assert (edited.id, edited.body) == (posted.id, "Plan: final")
    assert fake.comments_of(1) == ["Plan: final"]
    start = len(fake.requests)
    same = await tracker.edit_comment(target, posted.id, "Plan: final")
    assert same.body == "Plan: final"
    assert [m for m, _ in sent(fake, start)] == ["GET"]
    assert [c.body for c in await tracker.list_comments(target)] == ["Plan: final"]


async def test_edit_comment_refuses_unknown_ids_and_comments_of_other_issues() -> None:
    fake = board()
    other = fake.comment(2, "a person's comment on issue 2")
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    await rejected(tracker.edit_comment(target, "abc", "x"))
    assert sent(fake, start) == []
    await rejected(tracker.edit_comment(target, "999", "x"))
    error_ = await rejected(tracker.edit_comment(target, str(other.id), "x"))
    assert f"{REPO}#1" in error_.message
    assert writes(fake, start) == []
    assert fake.comments_of(2) == ["a person's comment on issue 2"]


# Pull request links

WEB = "https://github.com"
PULL = f"{WEB}/acme/gadgets/pull/12"
"""A pull request of another repository than the configured one."""


async def test_link_pull_request_posts_the_link_tools_comment_once_per_url() -> None:
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    await tracker.link_pull_request(target, PULL, "#12 Fix the widget")
    await tracker.link_pull_request(target, PULL, "#12 Fix the widget")
    assert fake.comments_of(1) == [f"Linked pull request: {PULL}"]
    assert writes(fake, start) == [
        ("POST", f"/repos/{REPO}/issues/1/comments", {"body": f"Linked pull request: {PULL}"})
    ]
    # The link tool finds the same comment: an agent linking it too adds nothing.
    tool = await tracker.execute_tool("github_link_pull_request", {"url": PULL}, target)
    assert tool.success and tool.output == {
        "identifier": f"{REPO}#1",
        "commented": False,
        "comment_id": 101,
        "comment_url": f"{WEB}/{REPO}/issues/1#issuecomment-101",
        "pull_request": PULL,
    }
    other = f"{WEB}/acme/gadgets/pull/13"
    await tracker.link_pull_request(target, other, "#13 Gadget")
    assert fake.comments_of(1) == [f"Linked pull request: {PULL}", f"Linked pull request: {other}"]


async def test_a_pull_request_of_the_issues_own_repository_is_linked_by_its_closing_reference() -> (
    None
):
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    for own in (f"{WEB}/{REPO}/pull/7", f"{WEB}/ACME/Widgets/pull/7"):
        await tracker.link_pull_request(target, own, "#7 Fix")
    assert sent(fake, start) == [] and fake.comments_of(1) == []
    # An agent's pull request may lack the reference: its tool comments whatever the repository.
    tool = await tracker.execute_tool(
        "github_link_pull_request", {"url": f"{WEB}/{REPO}/pull/7"}, target
    )
    assert tool.success and fake.comments_of(1) == [f"Linked pull request: {WEB}/{REPO}/pull/7"]


async def test_a_link_posted_by_the_tool_is_found_by_the_daemon() -> None:
    fake = board()
    fake.comment(1, f"Linked pull request: {PULL}5")  # another URL that starts the same
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    tool = await tracker.execute_tool("github_link_pull_request", {"url": PULL + "/"}, target)
    assert tool.success and tool.output["commented"] is True
    await tracker.link_pull_request(target, PULL, "#12 Fix the widget")
    assert fake.comments_of(1) == [
        f"Linked pull request: {PULL}5",
        f"Linked pull request: {PULL}",
    ]


async def test_link_pull_request_rejects_what_is_not_an_http_url_before_any_request() -> None:
    fake = board()
    tracker = on_fake(fake)
    target = await read(tracker, "1")
    start = len(fake.requests)
    for bad in ("", "javascript:alert(1)", "github.com/acme/widgets/pull/1"):
        await rejected(tracker.link_pull_request(target, bad, "PR"))
    assert sent(fake, start) == []


# Creating issues (label scope)


async def test_create_issue_opens_it_with_the_state_label_and_records_each_blocker() -> None:
    fake = board()
    tracker = on_fake(fake)
    parent = await read(tracker, "1")
    created = await tracker.create_issue(
        NewTicket(
            "Split part",
            "The second half.",
            "todo",
            (f"{REPO}#1", "#2", "#1"),
            parent,
        )
    )
    assert (created.id, created.identifier, created.state) == ("3", f"{REPO}#3", "Todo")
    assert created.description == "The second half."
    assert [b.identifier for b in created.blocked_by] == [f"{REPO}#1", f"{REPO}#2"]
    assert created.dispatchable is False  # its blockers are open
    assert created.native_ref == {"repository": REPO, "number": 3, "node_id": "I_node3"}
    assert writes(fake) == [
        (
            "POST",
            f"/repos/{REPO}/issues",
            {"title": "Split part", "body": "The second half.", "labels": ["status:todo"]},
        ),
        ("POST", f"/repos/{REPO}/issues/3/dependencies/blocked_by", {"issue_id": 1001}),
        ("POST", f"/repos/{REPO}/issues/3/dependencies/blocked_by", {"issue_id": 1002}),
    ]
    assert await tracker.fetch_issues_by_ids(["3"]) == [created]


async def test_create_issue_in_the_closed_state_opens_then_closes_it() -> None:
    fake = board()
    tracker = on_fake(fake)
    created = await tracker.create_issue(NewTicket("Already done", "", "Done"))
    assert created.state == "Done"
    assert fake.issues[3].state == "closed" and fake.issues[3].labels == []
    assert [(m, p) for m, p, _ in writes(fake)] == [
        ("POST", f"/repos/{REPO}/issues"),
        ("PATCH", f"/repos/{REPO}/issues/3"),
    ]
    assert writes(fake)[0][2] == {"title": "Already done", "body": ""}


async def test_create_issue_adds_the_state_label_when_github_drops_it() -> None:
    fake = board()
    fake.push_access = False  # GitHub silently drops labels given without push access
    tracker = on_fake(fake)
    created = await tracker.create_issue(NewTicket("New", "Body", "In Progress"))
    assert created.state == "In Progress"
    assert fake.labels_of(3) == ["status:in-progress"]
    assert writes(fake)[1] == (
        "POST",
        f"/repos/{REPO}/issues/3/labels",
        {"labels": ["status:in-progress"]},
    )


@pytest.mark.parametrize(
    "blocker", ["#99", "widgets#1", "acme/widgets", "acme/..#1", "#4", "https://x/1"]
)
async def test_create_issue_rejects_an_unresolvable_blocker_before_creating_anything(
    blocker: str,
) -> None:
    fake = board()
    fake.add(4, pull_request=True)
    tracker = on_fake(fake)
    error_ = await rejected(tracker.create_issue(NewTicket("New", "", "Todo", ("#1", blocker))))
    assert blocker in error_.message or "pull request" in error_.message
    assert writes(fake) == []
    assert sorted(fake.issues) == [1, 2, 4]


async def test_create_issue_refuses_a_parent_outside_the_repository_and_a_bad_title() -> None:
    fake = board()
    tracker = on_fake(fake)
    await rejected(tracker.create_issue(NewTicket("New", "", "Todo", (), foreign_issue())))
    await rejected(tracker.create_issue(NewTicket("  ", "", "Todo")))
    await rejected(tracker.create_issue(NewTicket("two\nlines", "", "Todo")))
    await rejected(tracker.create_issue(NewTicket("New", "", "bad\nstate")))
    assert fake.requests == []


@respx.mock
async def test_a_failure_after_the_issue_exists_keeps_its_category_and_names_the_issue() -> None:
    respx.get(f"{ISSUES}/1").mock(return_value=httpx.Response(200, json=issue(1)))
    respx.post(ISSUES).mock(return_value=httpx.Response(201, json=issue(5, labels=["status:todo"])))
    respx.post(f"{ISSUES}/5/dependencies/blocked_by").mock(
        return_value=httpx.Response(403, json=error("Resource not accessible by integration"))
    )
    with pytest.raises(TrackerError) as info:
        await make_tracker().create_issue(NewTicket("New", "", "Todo", ("#1",)))
    assert info.value.category == TRACKER_STATUS
    assert f"created {REPO}#5" in info.value.message
    assert "Resource not accessible" in info.value.message


# State labels


async def test_ensure_states_creates_only_the_missing_state_labels() -> None:
    fake = board()
    fake.repo_labels = [f"area-{n}" for n in range(120)] + ["Status:Todo", "bug"]
    tracker = on_fake(fake)
    states = ["Todo", "In Progress", "Human Review", "Done", "human review"]
    assert await tracker.ensure_states(states) == ["In Progress", "Human Review"]
    assert writes(fake) == [
        (
            "POST",
            f"/repos/{REPO}/labels",
            {"name": n, "color": "ededed", "description": f"Workflow state: {s}"},
        )
        for n, s in (("status:in-progress", "In Progress"), ("status:human-review", "Human Review"))
    ]
    listed = [r for r in fake.requests if r.method == "GET"]
    assert [r.query.get("page") for r in listed] == [None, ["2"]]
    assert await tracker.ensure_states(states) == []
    assert len(writes(fake)) == 2


async def test_ensure_states_labels_the_closed_state_only_when_configured() -> None:
    fake = board()
    tracker = on_fake(fake)
    assert await tracker.ensure_states(["Done"]) == []
    assert fake.requests == []  # the closed state is GitHub's closed flag: nothing to create
    configured = on_fake(fake, {"repository": REPO, "state_labels": {"Done": "status:shipped"}})
    assert await configured.ensure_states(["Done"]) == ["Done"]
    assert fake.repo_labels == ["status:shipped"]


@respx.mock
async def test_ensure_states_counts_a_label_created_meanwhile_as_existing() -> None:
    respx.get(f"{API}/repos/{REPO}/labels").mock(return_value=httpx.Response(200, json=[]))
    respx.post(f"{API}/repos/{REPO}/labels").mock(
        side_effect=[
            httpx.Response(422, json=validation_failed("Validation Failed", "already_exists")),
            httpx.Response(422, json=validation_failed("Validation Failed", "invalid")),
        ]
    )
    tracker = make_tracker()
    assert await tracker.ensure_states(["Todo"]) == []
    error_ = await rejected(tracker.ensure_states(["In Progress"]))
    assert "status:in-progress" in error_.message


async def test_ensure_states_rejects_a_state_whose_label_github_would_refuse() -> None:
    fake = board()
    await rejected(on_fake(fake).ensure_states(["Todo", LONG_STATE]))
    assert fake.requests == []


async def test_label_scope_accepts_any_state_name_so_it_lists_none() -> None:
    fake = board()
    assert await on_fake(fake).tracker_states() is None
    assert fake.requests == []


async def test_a_checkpoint_state_reads_back_in_the_workflows_spelling_after_a_move() -> None:
    # Stage mode moves issues to states no stage runs (Plan Review); the daemon confirms each
    # move by reading the issue back, so its label must map back to the state, not to itself.
    fake = board()
    settings = TrackerSettings(
        kind="github",
        provider={"repository": REPO, "api_url": "https://api.github.com"},
        active_states=("Todo",),
        terminal_states=("Done",),
        other_states=("Plan Review",),
    )
    tracker = github_adapter.create_tracker(settings, TrackerContext(Path("."), ENV))
    assert isinstance(tracker, GitHubTracker)
    tracker.http.transport = transport(fake)
    await tracker.move_issue(await read(tracker, "1"), "Plan Review")
    assert fake.labels_of(1) == ["bug", "status:plan-review"]
    assert (await read(tracker, "1")).state == "Plan Review"
    [found] = await tracker.fetch_issues_by_states(["plan review"])
    assert (found.id, found.state) == ("1", "Plan Review")


# Shared behaviour


@pytest.mark.parametrize("provider", [{"repository": REPO}, PROJECT])
def test_only_the_move_tool_is_marked_as_moving_the_ticket(provider: dict[str, Any]) -> None:
    specs = on_fake(FakeGitHub(token=TOKEN), provider).agent_tools()
    assert {s.name: s.moves_ticket for s in specs} == {
        "github_move_issue": True,
        "github_add_comment": False,
        "github_link_pull_request": False,
        "github_graphql": False,
    }


@respx.mock
async def test_a_rate_limited_write_blocks_the_client_for_every_later_request() -> None:
    clock = FakeClock()
    route = respx.post(f"{ISSUES}/1/comments").mock(
        return_value=httpx.Response(
            429, json=error("API rate limit exceeded"), headers={"retry-after": "30"}
        )
    )
    tracker = make_tracker(clock=clock)
    target = repository_issue()
    for call in (tracker.add_comment(target, "x"), tracker.list_comments(target)):
        with pytest.raises(TrackerError) as info:
            await call
        assert info.value.category == TRACKER_RATE_LIMITED
        assert info.value.retry_after_s == pytest.approx(30)
    assert route.call_count == 1
    assert len(respx.calls) == 1


@respx.mock
async def test_a_failed_write_keeps_its_status_category_and_never_the_token() -> None:
    respx.post(f"{ISSUES}/1/comments").mock(
        return_value=httpx.Response(403, json=error(f"Resource not accessible {TOKEN[:4]}"))
    )
    target = repository_issue()
    with pytest.raises(TrackerError) as info:
        await make_tracker().add_comment(target, "x")
    assert info.value.category == TRACKER_STATUS
    assert TOKEN not in info.value.message


@respx.mock
async def test_list_comments_maps_github_comment_fields() -> None:
    respx.get(f"{ISSUES}/1/comments").mock(
        return_value=httpx.Response(
            200,
            json=[
                comment(7, "later", created_at="2026-03-01T10:00:00+02:00"),
                {"body": "no id: cannot be named, so left out"},
                comment(3, "earlier", author=None),
            ],
        )
    )
    target = repository_issue()
    comments = await make_tracker().list_comments(target)
    assert [(c.id, c.body, c.author) for c in comments] == [
        ("3", "earlier", None),
        ("7", "later", "octocat"),
    ]
    assert comments[1].created_at == datetime(2026, 3, 1, 8, tzinfo=UTC)
    assert comments[1].created_at.tzinfo is UTC


# Projects v2 scope


def project_board() -> FakeGitHub:
    fake = board(project=FakeProject())
    fake.put_on_project(1, "Todo")
    fake.put_on_project(2, "In Progress")
    return fake


def graphql_operations(fake: FakeGitHub, since: int = 0) -> list[str]:
    names = []
    for r in fake.requests[since:]:
        if r.path == "/graphql":
            match = re.search(r"\b(?:query|mutation)\s+(\w+)", r.body["query"])
            names.append(match.group(1) if match else "?")
    return names


async def test_project_move_issue_sets_the_status_option_and_repeating_it_writes_nothing() -> None:
    fake = project_board()
    tracker = on_fake(fake, PROJECT)
    target = await read(tracker, "PVTI_1")
    await tracker.move_issue(target, "human review")
    assert fake.project is not None
    assert fake.project.items["PVTI_1"].status == "Human Review"
    start = len(fake.requests)
    await tracker.move_issue(target, "Human Review")
    assert graphql_operations(fake, start) == ["ProjectItemsById"]


async def test_project_move_issue_rejects_an_unknown_status_and_an_item_off_the_project() -> None:
    fake = project_board()
    tracker = on_fake(fake, PROJECT)
    target = await read(tracker, "PVTI_1")
    error_ = await rejected(tracker.move_issue(target, "Shipped"))
    assert "Todo, In Progress, Human Review, Done" in error_.message
    gone = Issue(
        id="PVTI_77",
        identifier=f"{REPO}#9",
        title="t",
        state="Todo",
        dispatchable=True,
        native_ref={"repository": REPO, "number": 9, "project_item_id": "PVTI_77"},
    )
    await rejected(tracker.move_issue(gone, "Done"))
    assert "SetItemStatus" not in graphql_operations(fake)


async def test_project_states_are_the_status_options_and_nothing_needs_creating() -> None:
    fake = project_board()
    tracker = on_fake(fake, PROJECT)
    assert await tracker.tracker_states() == ["Todo", "In Progress", "Human Review", "Done"]
    assert await tracker.ensure_states(["Todo", "Plan Review"]) == []
    assert graphql_operations(fake) == ["ProjectOfOrganization"]


async def test_project_create_issue_opens_it_in_the_parents_repository_on_the_board() -> None:
    fake = project_board()
    tracker = on_fake(fake, PROJECT)
    parent = await read(tracker, "PVTI_1")
    start = len(fake.requests)
    created = await tracker.create_issue(
        NewTicket("Follow-up", "Details.", "human review", ("#2",), parent)
    )
    assert (created.identifier, created.state) == (f"{REPO}#3", "Human Review")
    assert created.native_ref is not None
    assert created.native_ref["project_item_id"] == created.id == "PVTI_3"
    assert fake.issues[3].blocked_by == [2]
    assert writes(fake, start)[0] == (
        "POST",
        f"/repos/{REPO}/issues",
        {"title": "Follow-up", "body": "Details."},
    )
    assert graphql_operations(fake, start) == [
        "AddProjectItem",
        "SetItemStatus",
        "ProjectItemsById",
    ]
    add = next(
        r for r in fake.requests if r.path == "/graphql" and "AddProjectItem" in r.body["query"]
    )
    assert add.body["query"] == queries.ADD_TO_PROJECT
    assert add.body["variables"] == {"projectId": "PVT_1", "contentId": "I_node3"}


@pytest.mark.parametrize(
    ("state", "blockers", "with_parent"),
    [("Shipped", (), True), ("Todo", ("#99",), True), ("Todo", (), False)],
)
async def test_project_create_issue_is_rejected_before_anything_is_created(
    state: str, blockers: Sequence[str], with_parent: bool
) -> None:
    fake = project_board()
    tracker = on_fake(fake, PROJECT)
    parent = await read(tracker, "PVTI_1") if with_parent else None
    await rejected(tracker.create_issue(NewTicket("New", "", state, tuple(blockers), parent)))
    assert [w for w in writes(fake) if w[1] != "/graphql"] == []
    assert "AddProjectItem" not in graphql_operations(fake)
    assert sorted(fake.issues) == [1, 2]


async def test_project_comments_are_those_of_the_items_issue() -> None:
    fake = project_board()
    tracker = on_fake(fake, PROJECT)
    target = await read(tracker, "PVTI_2")
    added = await tracker.add_comment(target, "Plan")
    assert fake.comments_of(2) == ["Plan"]
    assert await tracker.list_comments(target) == [added]
    edited = await tracker.edit_comment(target, added.id, "Plan, revised")
    assert edited.body == "Plan, revised"
    # No body in the project scope carries a closing reference: even a pull request of the
    # issue's own repository is named in a comment, once.
    own = f"{WEB}/{REPO}/pull/7"
    await tracker.link_pull_request(target, own, "#7 Fix")
    await tracker.link_pull_request(target, own, "#7 Fix")
    assert fake.comments_of(2) == ["Plan, revised", f"Linked pull request: {own}"]

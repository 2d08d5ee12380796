"""Stage mode end to end on GitHub: the real daemon against the local GitHub fake over HTTP, with
the quickstart's demonstration agent in a real subprocess. The agent only reports; the daemon
moves issues between state labels (or a project's Status options), posts the plan and the
escalations as issue comments, and creates follow-up issues with GitHub's blockers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from symphony.core import transitions
from tests.adapters.github.fake_github import FakeGitHub, FakeProject, serve
from tests.adapters.github.payloads import REPO
from tests.stage_flow import StageRun, stage_workflow

pytestmark = pytest.mark.slow

TOKEN = "ghp_stage_e2e_token_0001"
PLAN_MARKER = "— symphony · plan"
PLAN_LINE = "1. Read the code"

# The labels a repository set up for the workflow by hand already has: the stages' own states.
# The checkpoints (Plan Review, Human Review, Needs Attention) are the daemon's to create.
PREPARED_LABELS = ["bug", "status:todo", "status:ready", "status:rework"]
CHECKPOINT_LABELS = ["status:plan-review", "status:human-review", "status:needs-attention"]

STATUS_OPTIONS = {
    f"opt-{n}": name
    for n, name in enumerate(
        ["Todo", "Plan Review", "Ready", "Rework", "Human Review", "Needs Attention", "Done"]
    )
}


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(token=TOKEN)
    fake.repo_labels = list(PREPARED_LABELS)
    with serve(fake):
        yield fake


@pytest.fixture
def project_github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(token=TOKEN, project=FakeProject(options=dict(STATUS_OPTIONS)))
    with serve(fake):
        yield fake


class Daemon(StageRun):
    """The daemon in stage mode on the GitHub fake."""

    def __init__(self, workflow: Path, github: FakeGitHub, env: Mapping[str, str]) -> None:
        self.github = github
        super().__init__(workflow, {"GITHUB_TOKEN": TOKEN, **env}, timeout=25, poll_s=0.2)

    async def settle_label(self, number: int, label: str) -> None:
        await self.settle(str(number), lambda: label in self.github.labels_of(number))


def start(
    root: Path,
    github: FakeGitHub,
    *,
    scope: Mapping[str, Any] | None = None,
    implement: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    **env: str,
) -> Daemon:
    """The daemon in stage mode on `github`: the label scope of the repository unless `scope`
    names another (`{"project": ...}`); `env` reaches the demo agent."""
    tracker = {
        "kind": "github",
        "provider": {"api_url": github.base, **(scope or {"repository": REPO})},
        "terminal_states": ["Done", "Cancelled"],
    }
    workflow = stage_workflow(root, tracker, implement=implement, agent=agent)
    return Daemon(workflow, github, env)


def daemon_comments(github: FakeGitHub, number: int) -> list[str]:
    return [body for body in github.comments_of(number) if "— symphony · " in body]


# 1. Plan, approval, implementation


async def test_an_issue_is_planned_then_implemented_after_approval_with_the_plan_in_the_prompt(
    tmp_path: Path, github: FakeGitHub
) -> None:
    github.add(1, labels=["status:todo", "bug"])
    daemon = start(tmp_path, github)
    try:
        await daemon.settle_label(1, "status:plan-review")
        comments = daemon_comments(github, 1)
        plan = [c for c in comments if c.endswith(PLAN_MARKER)]
        assert len(plan) == 1 and PLAN_LINE in plan[0]
        assert any("Stage `plan` is done; moving the ticket to Plan Review." in c for c in comments)
        assert github.labels_of(1) == ["bug", "status:plan-review"]
        assert daemon.events(f"{REPO}#1", "moved") == [
            "daemon moved it to Plan Review (plan: done)"
        ]

        github.edit(1, labels=["bug", "status:ready"])  # a person approves the plan
        await daemon.settle_label(1, "status:human-review")
        notes = daemon.notes(f"{REPO}#1")
        assert f"The approved plan: {PLAN_LINE}" in notes
        assert github.labels_of(1) == ["bug", "status:human-review"]
        assert daemon.events(f"{REPO}#1", "moved_by_person") == [
            "a person moved it from Plan Review to Ready"
        ]
    finally:
        await daemon.stop()
    assert len(daemon.dispatches(f"{REPO}#1")) == 2  # plan, implement: nothing twice
    # The agents never had the move tool: only the daemon moved the issue.
    assert len(daemon.offered) == 2
    for tools in daemon.offered:
        assert "github_move_issue" not in tools
        assert {"report_outcome", "create_follow_up", "github_add_comment"} <= tools
    # At start the daemon created the state labels the repository lacked, and only those.
    created = [
        r.body["name"]
        for r in github.requests
        if r.method == "POST" and r.path == f"/repos/{REPO}/labels"
    ]
    assert sorted(created) == sorted(CHECKPOINT_LABELS)
    assert set(CHECKPOINT_LABELS) <= set(github.repo_labels)


async def test_a_project_issue_moves_through_the_status_options_by_the_daemon(
    tmp_path: Path, project_github: FakeGitHub
) -> None:
    github = project_github
    github.add(1)
    item = github.put_on_project(1, "Todo")
    project = github.project
    assert project is not None

    def status() -> str | None:
        with github.lock:
            return project.items[item].status

    scope = {"project": {"owner": "acme", "number": 3, "owner_type": "organization"}}
    daemon = start(tmp_path, github, scope=scope)
    try:
        await daemon.settle(item, lambda: status() == "Plan Review")
        plan = [c for c in daemon_comments(github, 1) if c.endswith(PLAN_MARKER)]
        assert len(plan) == 1 and PLAN_LINE in plan[0]

        with github.lock:
            project.items[item].status = "Ready"  # a person approves the plan
        await daemon.settle(item, lambda: status() == "Human Review")
        assert f"The approved plan: {PLAN_LINE}" in daemon.notes(f"{REPO}#1")
    finally:
        await daemon.stop()
    assert len(daemon.dispatches(f"{REPO}#1")) == 2
    assert all("github_move_issue" not in tools for tools in daemon.offered)
    assert github.repo_labels == []  # a project's states are its Status options: nothing made
    assert github.labels_of(1) == []


# 2. Review comments


async def test_a_reviewer_comment_and_a_move_to_rework_reach_the_next_prompt(
    tmp_path: Path, github: FakeGitHub
) -> None:
    github.add(1, labels=["status:ready"])
    daemon = start(tmp_path, github)
    try:
        await daemon.settle_label(1, "status:human-review")
        github.comment(1, "Please rename the helper.", author="reviewer")
        github.edit(1, labels=["status:rework"])
        await daemon.settle_label(1, "status:human-review")
        notes = daemon.notes(f"{REPO}#1")
    finally:
        await daemon.stop()
    # The rework prompt (the newest entry: each run is a new agent process, counting from
    # turn 1) lists every comment, oldest first, with its author.
    first, second = notes.split("## Turn 1")[1:]
    assert "Please rename the helper." not in first
    done = second.index("Comment by octocat: Stage `implement` is done")
    review = second.index("Comment by reviewer: Please rename the helper.")
    assert done < review
    assert len(daemon.dispatches(f"{REPO}#1")) == 2
    assert daemon.events(f"{REPO}#1", "moved_by_person") == [
        "a person moved it from Human Review to Rework"
    ]


# 3. Escalations


async def test_a_blocked_report_moves_the_issue_to_needs_attention_with_the_question(
    tmp_path: Path, github: FakeGitHub
) -> None:
    github.add(1, labels=["status:ready"])
    daemon = start(tmp_path, github, DEMO_AGENT_OUTCOME="blocked")
    try:
        await daemon.settle_label(1, "status:needs-attention")
    finally:
        await daemon.stop()
    [comment] = daemon_comments(github, 1)
    assert "The agent is blocked in stage `implement`" in comment
    assert "- Which behaviour do you want when the input is empty?" in comment
    assert github.labels_of(1) == ["status:needs-attention"]
    assert github.issues[1].state == "open"


async def test_an_agent_that_never_reports_is_escalated_after_max_total_turns(
    tmp_path: Path, github: FakeGitHub
) -> None:
    github.add(1, labels=["status:ready"])
    daemon = start(
        tmp_path,
        github,
        implement={"max_total_turns": 2},
        agent={"max_turns": 1},
        DEMO_AGENT_OUTCOME="silent",
    )
    try:
        await daemon.settle_label(1, "status:needs-attention")
    finally:
        await daemon.stop()
    [comment] = daemon_comments(github, 1)
    assert "Stage `implement` used 2 turns (max_total_turns 2)" in comment
    assert "The agent's last message:" in comment and "nothing to report yet" in comment
    assert len(daemon.dispatches(f"{REPO}#1")) == 2  # two attempts of one turn each


# 4. Follow-up issues


async def test_a_follow_up_issue_waits_for_its_blocker_to_close_and_then_runs(
    tmp_path: Path, github: FakeGitHub
) -> None:
    github.add(1, labels=["status:ready"])
    follow_up = {
        "title": "Second half",
        "description": "The rest of the work.",
        "blocked_by": [f"{REPO}#1"],
        # Named, not defaulted: the default is the first stage state in WORKFLOW.md's order,
        # and `write_workflow` writes the stages sorted by name (implement before plan).
        "state": "Todo",
    }
    daemon = start(tmp_path, github, DEMO_AGENT_FOLLOW_UP=json.dumps(follow_up))
    try:
        await daemon.settle_label(1, "status:human-review")
        with github.lock:
            created = github.issues[2]
            assert (created.title, created.body) == ("Second half", "The rest of the work.")
            assert created.labels == ["status:todo"] and created.blocked_by == [1]
        daemon.orchestrator.request_refresh()
        await daemon.until(lambda: "2" in daemon.orchestrator.board.rows)
        row = daemon.orchestrator.view.issue_snapshot(f"{REPO}#2")
        assert row is not None and row["status"] == "waiting"
        assert row["reason"] == f"blocked by {REPO}#1 (Human Review)"
        assert daemon.dispatches(f"{REPO}#2") == []

        github.edit(1, state="closed")  # the person merges the work and closes the issue
        await daemon.settle_label(2, "status:plan-review")
    finally:
        await daemon.stop()
    assert len(daemon.dispatches(f"{REPO}#2")) == 1
    assert any(c.endswith(PLAN_MARKER) for c in github.comments_of(2))


# 5. A move GitHub fails


async def test_a_move_github_fails_twice_is_retried_until_it_lands_and_runs_once(
    tmp_path: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    github.add(1, labels=["status:todo"])
    fault = github.fail("POST", re.escape(f"/repos/{REPO}/issues/1/labels"), times=2, status=502)
    daemon = start(tmp_path, github)
    try:
        await daemon.until(lambda: fault.times == 0)
        for _ in range(3):  # polls while the move is being retried: the claim holds
            daemon.orchestrator.request_refresh()
        await daemon.settle_label(1, "status:plan-review")
    finally:
        await daemon.stop()
    assert len(daemon.dispatches(f"{REPO}#1")) == 1
    assert github.labels_of(1) == ["status:plan-review"]
    assert sum(c.endswith(PLAN_MARKER) for c in github.comments_of(1)) == 1  # not one per try
    assert len(daemon_comments(github, 1)) == 2  # the plan and the done note, once each
    retries = daemon.events(f"{REPO}#1", "move_retrying")
    assert len(retries) == 2 and "502" in retries[0]
    failed = [
        r
        for r in github.requests
        if r.method == "POST" and r.path == f"/repos/{REPO}/issues/1/labels"
    ]
    assert [r.status for r in failed] == [502, 502, 200]


# 5. A person's actions from the review surface, as GitHub sees them


async def test_review_actions_are_label_moves_comments_and_issues_on_github(
    tmp_path: Path, github: FakeGitHub
) -> None:
    import httpx

    from symphony.observability.server import create_app

    secret = "review-token-for-github-e2e"
    github.add(1, labels=["status:todo"])
    github.add(2, labels=["status:todo"])
    daemon = start(tmp_path, github)
    app = create_app(daemon.orchestrator.view, auth_token=secret)
    person = {"Authorization": f"Bearer {secret}", "X-Symphony-Actor": "ada"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://symphony"
    ) as http:
        try:
            await daemon.settle_label(1, "status:plan-review")
            await daemon.settle_label(2, "status:plan-review")
            approved = await http.post(f"/api/v1/{REPO}%231/actions/approve", headers=person)
            assert approved.status_code == 200, approved.text
            assert approved.json()["target"] == "Ready"
            await daemon.settle_label(1, "status:human-review")
            sent_back = await http.post(
                f"/api/v1/{REPO}%231/actions/request_changes", headers=person,
                json={"comment": "Name the test after what it checks."},
            )  # fmt: skip
            assert sent_back.status_code == 200, sent_back.text
            await daemon.settle_label(1, "status:human-review")  # reworked and handed back
            split = await http.post(
                f"/api/v1/{REPO}%232/actions/split", headers=person,
                json={"tickets": [{"title": "Guard divide by zero"},
                                  {"title": "Document the error", "description": "In README"}]},
            )  # fmt: skip
            assert split.status_code == 200, split.text
            await daemon.settle_label(2, "status:cancelled")
            twice = await http.post(f"/api/v1/{REPO}%232/actions/split", headers=person,
                                    json={"tickets": [{"title": "Again"}]})  # fmt: skip
        finally:
            await daemon.stop()
    comments = github.comments_of(1)
    assert any("ada approved at Plan Review; moving the ticket to Ready." in c for c in comments)
    assert any(
        "ada requested changes at Human Review" in c and "Name the test after what it checks." in c
        for c in comments
    )
    assert "Name the test after what it checks." in daemon.notes(f"{REPO}#1")
    made = {n: i for n, i in github.issues.items() if n not in (1, 2)}
    titles = sorted(i.title for i in made.values())
    assert titles == ["Document the error", "Guard divide by zero"]
    guard = next(n for n, i in made.items() if i.title == "Guard divide by zero")
    document = next(i for i in made.values() if i.title == "Document the error")
    assert document.blocked_by == [guard]  # the plan's steps, in order
    assert any("Split into" in c for c in github.comments_of(2))
    # Cancelled: no longer at its checkpoint (409) or, once a poll has dropped it, unknown (404).
    assert twice.status_code in (404, 409)  # and no second set of tickets
    assert len(github.issues) == 4

"""Stage mode end to end on GitLab: the real daemon against the local GitLab fake over HTTP, with
the quickstart's demonstration agent in a real subprocess. The agent only reports; the daemon
moves issues between scoped state labels (`workflow::todo`, ...; Done is a closed issue), posts
the plan and the escalations as issue notes, and creates follow-up issues with `is_blocked_by`
links."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from symphony.core import transitions
from symphony_adapters._support.http import HttpClient
from symphony_adapters.gitlab.tools import ADD_COMMENT, MOVE_ISSUE
from tests.adapters.gitlab.fake_gitlab import BOT, FakeGitLab, serve
from tests.adapters.gitlab.payloads import PROJECT
from tests.stage_flow import StageRun, stage_workflow

pytestmark = pytest.mark.slow

TOKEN = "glpat-stage_e2e_token_0001"
PREFIX = "/api/v4/projects/acme%2Fplatform%2Fwidgets"
PLAN_MARKER = "— symphony · plan"
PLAN_LINE = "1. Read the code"

# The labels a project set up for the workflow by hand already has: the stages' own states.
# The checkpoints (Plan Review, Human Review, Needs Attention) are the daemon's to create.
PREPARED_LABELS = ["bug", "workflow::todo", "workflow::ready", "workflow::rework"]
CHECKPOINT_LABELS = ["workflow::plan review", "workflow::human review", "workflow::needs attention"]


class StageGitLab(FakeGitLab):
    """The GitLab fake with requests it can be told to fail."""

    def __init__(self) -> None:
        super().__init__(token=TOKEN)
        self.failing_moves = 0
        """How many of the next issue updates (`PUT …/issues/{iid}`) to answer 502 unapplied."""
        self.lost_note_answers = 0
        """How many of the next new notes (`POST …/notes`) to record, then answer 502 for, as
        a proxy that loses GitLab's answer would."""

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, dict[str, str], Any]:
        # `handle` holds the lock around `_route`.
        if method == "PUT" and re.fullmatch(rf"{PREFIX}/issues/\d+", path) and self.failing_moves:
            self.failing_moves -= 1
            return 502, {}, {"message": "502 Bad Gateway"}
        answer = super()._route(method, path, query, headers, body)
        if method == "POST" and path.endswith("/notes") and self.lost_note_answers:
            self.lost_note_answers -= 1
            return 502, {}, {"message": "502 Bad Gateway"}
        return answer

    def notes_of(self, iid: int) -> list[str]:
        with self.lock:
            return [n.body for n in self.issues[iid].notes]

    def daemon_notes(self, iid: int) -> list[str]:
        """The notes the daemon posted (its token's user), oldest first."""
        with self.lock:
            return [n.body for n in self.issues[iid].notes if n.author == BOT]

    def is_closed(self, iid: int) -> bool:
        with self.lock:
            return self.issues[iid].state == "closed"

    def statuses(self, method: str, path: str) -> list[int]:
        """What the fake answered to every `method` request on `path`, in order."""
        with self.lock:
            return [r.status for r in self.requests if r.method == method and r.path == path]

    def bodies(self, method: str, path: str) -> list[Any]:
        with self.lock:
            return [r.body for r in self.requests if r.method == method and r.path == path]


@pytest.fixture
def gitlab() -> Iterator[StageGitLab]:
    fake = StageGitLab()
    for name in PREPARED_LABELS:
        fake.add_label(name)
    with serve(fake):
        yield fake


class Daemon(StageRun):
    """The daemon in stage mode on the GitLab fake."""

    def __init__(self, workflow: Path, gitlab: StageGitLab, env: Mapping[str, str]) -> None:
        self.gitlab = gitlab
        super().__init__(workflow, {"GITLAB_TOKEN": TOKEN, **env}, timeout=25, poll_s=0.2)

    async def settle_label(self, iid: int, label: str) -> None:
        await self.settle(str(iid), lambda: label in self.gitlab.labels_of(iid))


def start(
    root: Path,
    gitlab: StageGitLab,
    *,
    implement: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    **env: str,
) -> Daemon:
    """The daemon in stage mode on `gitlab`; `env` reaches the demo agent."""
    tracker = {
        "kind": "gitlab",
        "provider": {"project": PROJECT, "base_url": gitlab.base},
        "terminal_states": ["Done", "Cancelled"],
    }
    workflow = stage_workflow(root, tracker, implement=implement, agent=agent)
    return Daemon(workflow, gitlab, env)


# 1. Plan, approval, implementation


async def test_an_issue_is_planned_then_implemented_after_approval_with_the_plan_in_the_prompt(
    tmp_path: Path, gitlab: StageGitLab
) -> None:
    gitlab.add(1, "Add a greeting", labels=["workflow::todo", "bug"])
    daemon = start(tmp_path, gitlab)
    try:
        await daemon.settle_label(1, "workflow::plan review")
        notes = gitlab.daemon_notes(1)
        plans = [n for n in notes if n.endswith(PLAN_MARKER)]
        assert len(plans) == 1 and "1. Read the code that 'Add a greeting' touches." in plans[0]
        assert any("Stage `plan` is done; moving the ticket to Plan Review." in n for n in notes)
        assert gitlab.labels_of(1) == ["bug", "workflow::plan review"]
        assert daemon.events(f"{PROJECT}#1", "moved") == [
            "daemon moved it to Plan Review (plan: done)"
        ]

        gitlab.edit(1, labels=["bug", "workflow::ready"])  # a person approves the plan
        gitlab.add_note(1, "changed the label", author="amy", system=True)
        await daemon.settle_label(1, "workflow::human review")
        written = daemon.notes(f"{PROJECT}#1")
        assert "Stage: implement" in written
        assert "The approved plan: 1. Read the code that 'Add a greeting' touches." in written
        assert "changed the label" not in written  # GitLab's activity lines are not comments
        assert gitlab.labels_of(1) == ["bug", "workflow::human review"]
        assert not gitlab.is_closed(1)
        assert daemon.events(f"{PROJECT}#1", "moved_by_person") == [
            "a person moved it from Plan Review to Ready"
        ]
    finally:
        await daemon.stop()
    assert len(daemon.dispatches(f"{PROJECT}#1")) == 2  # plan, implement: nothing twice
    # The agents never had the move tool: every move was the daemon's, one PUT per transition.
    assert len(daemon.offered) == 2
    for tools in daemon.offered:
        assert MOVE_ISSUE not in tools
        assert {"report_outcome", "create_follow_up", ADD_COMMENT} <= tools
    moves = gitlab.bodies("PUT", f"{PREFIX}/issues/1")
    assert [m["add_labels"] for m in moves] == ["workflow::plan review", "workflow::human review"]
    # At start the daemon created the state labels the project lacked, and only those.
    created = [b["name"] for b in gitlab.bodies("POST", f"{PREFIX}/labels")]
    assert sorted(created) == sorted(CHECKPOINT_LABELS)
    with gitlab.lock:
        assert all(gitlab.labels[name]["color"] == "#1f75cb" for name in CHECKPOINT_LABELS)


# 2. Review comments


async def test_a_reviewer_note_and_a_move_to_rework_reach_the_next_prompt(
    tmp_path: Path, gitlab: StageGitLab
) -> None:
    gitlab.add(1, labels=["workflow::human review"])
    daemon = start(tmp_path, gitlab)
    try:
        await daemon.until(lambda: "1" in daemon.orchestrator.board.rows)  # the poll saw it
        assert daemon.dispatches(f"{PROJECT}#1") == []  # a person's turn: nothing runs
        gitlab.add_note(1, "Please rename the helper.", author="rita")
        gitlab.edit(1, labels=["workflow::rework"])
        gitlab.add_note(1, "added ~workflow::rework label", author="rita", system=True)
        await daemon.settle_label(1, "workflow::human review")
    finally:
        await daemon.stop()
    written = daemon.notes(f"{PROJECT}#1")
    assert "Stage: implement" in written
    assert "Comment by rita: Please rename the helper." in written
    assert "added ~workflow::rework label" not in written
    assert daemon.events(f"{PROJECT}#1", "moved_by_person") == [
        "a person moved it from Human Review to Rework"
    ]
    assert gitlab.notes_of(1)[-1].startswith("Stage `implement` is done")
    assert len(daemon.dispatches(f"{PROJECT}#1")) == 1


# 3. Escalations


async def test_a_blocked_report_moves_the_issue_to_needs_attention_with_the_question(
    tmp_path: Path, gitlab: StageGitLab
) -> None:
    gitlab.add(1, labels=["workflow::ready"])
    daemon = start(tmp_path, gitlab, DEMO_AGENT_OUTCOME="blocked")
    try:
        await daemon.settle_label(1, "workflow::needs attention")
    finally:
        await daemon.stop()
    [note] = gitlab.daemon_notes(1)
    assert note.startswith("The agent is blocked in stage `implement`; moving the ticket to ")
    assert "- Which behaviour do you want when the input is empty?" in note
    assert gitlab.labels_of(1) == ["workflow::needs attention"]
    assert not gitlab.is_closed(1)
    assert daemon.events(f"{PROJECT}#1", "moved") == [
        "daemon moved it to Needs Attention (implement: blocked)"
    ]


async def test_an_agent_that_never_reports_is_moved_to_needs_attention_after_max_total_turns(
    tmp_path: Path, gitlab: StageGitLab
) -> None:
    gitlab.add(1, labels=["workflow::ready"])
    daemon = start(
        tmp_path,
        gitlab,
        implement={"max_total_turns": 2},
        agent={"max_turns": 1},
        DEMO_AGENT_OUTCOME="silent",
    )
    try:
        await daemon.settle_label(1, "workflow::needs attention")
    finally:
        await daemon.stop()
    [note] = gitlab.daemon_notes(1)
    assert "Stage `implement` used 2 turns (max_total_turns 2)" in note
    assert "The agent's last message:" in note and "nothing to report yet" in note
    assert gitlab.labels_of(1) == ["workflow::needs attention"]
    assert len(daemon.dispatches(f"{PROJECT}#1")) == 2  # two attempts of one turn each


# 4. Follow-up issues


async def test_a_follow_up_issue_waits_for_its_blocker_to_close_and_then_runs(
    tmp_path: Path, gitlab: StageGitLab
) -> None:
    gitlab.add(1, labels=["workflow::ready"])
    follow_up = {
        "title": "Second half",
        "description": "The rest of the work.",
        "blocked_by": [f"{PROJECT}#1"],
        # No state: a follow-up starts in the first stage's first state (Todo).
    }
    daemon = start(tmp_path, gitlab, DEMO_AGENT_FOLLOW_UP=json.dumps(follow_up))
    try:
        await daemon.settle_label(1, "workflow::human review")
        with gitlab.lock:
            created = gitlab.issues[2]
            assert (created.title, created.description) == ("Second half", "The rest of the work.")
            assert created.labels == ["workflow::todo"] and created.blocked_by == [1]
            assert created.state == "opened"
        # The poll that first saw the follow-up may have read its blocker before the hand-off
        # moved it: the reason names the blocker's state as of the latest poll.
        daemon.orchestrator.request_refresh()

        def waiting_on_the_review() -> bool:
            row = daemon.orchestrator.view.issue_snapshot(f"{PROJECT}#2")
            return (
                row is not None
                and row["status"] == "waiting"
                and row["reason"] == f"blocked by {PROJECT}#1 (Human Review)"
            )

        await daemon.until(waiting_on_the_review)
        assert daemon.dispatches(f"{PROJECT}#2") == []

        gitlab.edit(1, state="closed")  # the person merges the work; GitLab closes the issue
        await daemon.settle_label(2, "workflow::plan review")
    finally:
        await daemon.stop()
    assert len(daemon.dispatches(f"{PROJECT}#2")) == 1
    assert any(n.endswith(PLAN_MARKER) for n in gitlab.daemon_notes(2))
    assert gitlab.labels_of(1) == ["workflow::human review"]  # closed is Done: labels stay
    assert len(daemon.dispatches(f"{PROJECT}#1")) == 1


# 5. Writes GitLab fails


async def test_a_move_gitlab_fails_twice_is_retried_until_it_lands_and_the_issue_runs_once(
    tmp_path: Path, gitlab: StageGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    # The HTTP client sends a failed PUT `attempts` times itself: fail the daemon's move twice.
    gitlab.failing_moves = 2 * HttpClient.attempts
    gitlab.add(1, labels=["workflow::todo"])
    daemon = start(tmp_path, gitlab)
    try:
        await daemon.until(lambda: len(daemon.events(f"{PROJECT}#1", "move_retrying")) == 2)
        for _ in range(3):  # polls while the move is being retried: the claim holds
            daemon.orchestrator.request_refresh()
        await daemon.settle_label(1, "workflow::plan review")
    finally:
        await daemon.stop()
    failed = [502] * (2 * HttpClient.attempts)
    assert gitlab.statuses("PUT", f"{PREFIX}/issues/1") == [*failed, 200]
    retries = daemon.events(f"{PROJECT}#1", "move_retrying")
    assert len(retries) == 2 and all("502" in message for message in retries)
    assert len(daemon.dispatches(f"{PROJECT}#1")) == 1
    assert gitlab.labels_of(1) == ["workflow::plan review"]
    notes = gitlab.daemon_notes(1)
    assert sum(n.endswith(PLAN_MARKER) for n in notes) == 1  # posted once, not per try
    assert sum("Stage `plan` is done" in n for n in notes) == 1
    assert len(notes) == 2


async def test_a_plan_note_whose_answer_is_lost_is_not_posted_again_on_the_retry(
    tmp_path: Path, gitlab: StageGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    gitlab.lost_note_answers = 1  # GitLab records the plan note, the answer never arrives
    gitlab.add(1, labels=["workflow::todo"])
    daemon = start(tmp_path, gitlab)
    try:
        await daemon.settle_label(1, "workflow::plan review")
    finally:
        await daemon.stop()
    # Not resent by the client (it may have been applied); the daemon's retry finds it.
    assert gitlab.statuses("POST", f"{PREFIX}/issues/1/notes") == [502, 201]
    notes = gitlab.daemon_notes(1)
    assert len(notes) == 2
    assert notes[0].endswith(PLAN_MARKER) and PLAN_LINE in notes[0]
    assert "Stage `plan` is done" in notes[1]
    assert len(daemon.events(f"{PROJECT}#1", "move_retrying")) == 1
    assert len(daemon.dispatches(f"{PROJECT}#1")) == 1

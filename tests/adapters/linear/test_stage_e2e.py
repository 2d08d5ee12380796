"""Stage mode end to end against a Linear stand-in: the real daemon takes team ENG's issues
through the stages of a workflow while the quickstart's demonstration agent (a real subprocess
speaking the app-server protocol) only reports, and every move and comment reaches the fake
over Linear's GraphQL API, as the daemon's own writes."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from symphony.core import transitions
from tests.adapters.linear.fake_linear import (
    API_KEY,
    STAGE_STATES,
    FakeLinear,
    FakeLinearServer,
)
from tests.stage_flow import StageRun, stage_workflow

pytestmark = pytest.mark.slow

MOVE_TOOL = "linear_move_issue"
MOVE = "SymphonyMoveIssue"
PLAN_MARKER = "— symphony · plan"
UNAVAILABLE = {"errors": [{"message": "upstream connect error or disconnect/reset"}]}


@pytest.fixture
def server(fake: FakeLinear) -> Iterator[FakeLinearServer]:
    fake.add_states("ENG", STAGE_STATES)
    with FakeLinearServer(fake) as running:
        yield running


class StageDaemon(StageRun):
    """The daemon in stage mode on team ENG of the fake."""

    def __init__(
        self,
        root: Path,
        fake: FakeLinear,
        server: FakeLinearServer,
        *,
        implement: Mapping[str, Any] | None = None,
        agent: Mapping[str, Any] | None = None,
        **env: str,
    ) -> None:
        self.fake = fake
        tracker = {"kind": "linear", "provider": {"team_key": "ENG", "endpoint": server.endpoint}}
        workflow = stage_workflow(
            root, tracker, polling_ms=60_000, implement=implement, agent=agent
        )
        # The fake changes behind the daemon's back: `until` looks again every 0.1 s.
        super().__init__(workflow, {"LINEAR_API_KEY": API_KEY, **env}, timeout=20, poll_s=0.1)

    def state_of(self, identifier: str) -> str:
        with self.fake.lock:
            return self.fake.by_identifier(identifier).state

    def set_state(self, identifier: str, state: str) -> None:
        """A person moves the issue in Linear."""
        with self.fake.lock:
            self.fake.by_identifier(identifier).state = state

    def comment(self, identifier: str, body: str, user: str = "user-ana") -> None:
        with self.fake.lock:
            self.fake.comment(identifier, body, user=user)

    def bodies(self, identifier: str) -> list[str]:
        with self.fake.lock:
            return [c.body for c in self.fake.comments_on(identifier)]

    def moves(self) -> list[dict[str, Any]]:
        with self.fake.lock:
            return [variables for name, variables in self.fake.requests if name == MOVE]

    async def settle_state(self, identifier: str, state: str) -> None:
        """Wait until the daemon has moved the issue to `state` on the fake and let go of it."""
        issue_id = f"uuid-{identifier.lower()}"
        await self.settle(issue_id, lambda: self.state_of(identifier) == state)


async def test_an_issue_is_planned_then_implemented_once_a_person_approves_the_plan(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1", title="Add an export button")
    daemon = StageDaemon(tmp_path, fake, server)
    try:
        await daemon.settle_state("ENG-1", "Plan Review")
        bodies = daemon.bodies("ENG-1")
        plans = [b for b in bodies if b.endswith(PLAN_MARKER)]
        assert len(plans) == 1 and "1. Read the code that 'Add an export button'" in plans[0]
        assert any("Stage `plan` is done; moving the ticket to Plan Review." in b for b in bodies)
        with fake.lock:
            authors = {c.user.id if c.user else None for c in fake.comments_on("ENG-1")}
        assert authors == {"user-me"}  # posted with the daemon's key
        assert daemon.moves() == [{"id": "uuid-eng-1", "stateId": "state-eng-plan-review"}]
        assert daemon.events("ENG-1", "moved") == ["daemon moved it to Plan Review (plan: done)"]

        daemon.set_state("ENG-1", "Ready")  # a person approves the plan
        await daemon.settle_state("ENG-1", "Human Review")
        notes = daemon.notes("ENG-1")
        assert "> Stage: implement" in notes
        assert "> The approved plan: 1. Read the code that 'Add an export button'" in notes
        assert [m["stateId"] for m in daemon.moves()] == [
            "state-eng-plan-review",
            "state-eng-human-review",
        ]
        assert daemon.events("ENG-1", "moved_by_person")
    finally:
        await daemon.stop()
    assert len(daemon.events("ENG-1", "dispatched")) == 2
    # Every move was the daemon's: no agent session was offered Linear's move tool.
    assert len(daemon.offered) == 2
    for tools in daemon.offered:
        assert MOVE_TOOL not in tools
        assert {"report_outcome", "create_follow_up", "linear_add_comment"} <= tools


async def test_a_reviewer_comment_and_a_move_to_rework_reach_the_next_prompt(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1", state="Human Review")
    fake.comment("ENG-1", f"1. Rename the helper.\n\n{PLAN_MARKER}", user="user-me")
    daemon = StageDaemon(tmp_path, fake, server)
    try:
        await daemon.until(lambda: daemon.orchestrator.board.row("ENG-1") is not None)
        assert daemon.events("ENG-1", "dispatched") == []  # Human Review is a checkpoint

        daemon.comment("ENG-1", "Please keep the old name as an alias.")
        daemon.set_state("ENG-1", "Rework")
        await daemon.settle_state("ENG-1", "Human Review")
        notes = daemon.notes("ENG-1")
        assert "> Stage: implement" in notes
        assert "> The approved plan: 1. Rename the helper." in notes
        # Oldest first, the plan without its marker, authors as Linear's display names.
        plan = notes.index("> Comment by symphony: 1. Rename the helper.")
        review = notes.index("> Comment by ana: Please keep the old name as an alias.")
        assert plan < review and PLAN_MARKER not in notes
        assert any(
            "Stage `implement` is done; moving the ticket to Human Review." in b
            for b in daemon.bodies("ENG-1")
        )
        assert daemon.moves() == [{"id": "uuid-eng-1", "stateId": "state-eng-human-review"}]
        assert daemon.events("ENG-1", "moved_by_person")
    finally:
        await daemon.stop()
    assert len(daemon.events("ENG-1", "dispatched")) == 1


async def test_a_blocked_report_moves_the_issue_to_needs_attention_with_the_question(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1", state="Ready")
    daemon = StageDaemon(tmp_path, fake, server, DEMO_AGENT_OUTCOME="blocked")
    try:
        await daemon.settle_state("ENG-1", "Needs Attention")
    finally:
        await daemon.stop()
    [blocked] = [b for b in daemon.bodies("ENG-1") if "blocked" in b]
    assert "The agent is blocked in stage `implement`; moving the ticket to Needs Attention." in (
        blocked
    )
    assert "- Which behaviour do you want when the input is empty?" in blocked
    assert daemon.moves() == [{"id": "uuid-eng-1", "stateId": "state-eng-needs-attention"}]


async def test_an_agent_that_never_reports_moves_to_needs_attention_after_max_total_turns(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1", state="Ready")
    daemon = StageDaemon(
        tmp_path,
        fake,
        server,
        implement={"max_total_turns": 2},
        agent={"max_turns": 1},
        DEMO_AGENT_OUTCOME="silent",
    )
    try:
        await daemon.settle_state("ENG-1", "Needs Attention")
    finally:
        await daemon.stop()
    [stuck] = daemon.bodies("ENG-1")
    assert "Stage `implement` used 2 turns (max_total_turns 2)" in stuck
    assert "The agent's last message:" in stuck and "nothing to report yet" in stuck
    assert daemon.moves() == [{"id": "uuid-eng-1", "stateId": "state-eng-needs-attention"}]
    assert len(daemon.events("ENG-1", "dispatched")) == 2  # two attempts of one turn each


async def test_a_follow_up_issue_is_created_blocked_and_runs_once_its_blocker_is_done(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1", state="Ready")
    follow_up = {
        "title": "Second half",
        "description": "The rest of the work.",
        "blocked_by": ["ENG-1"],
        # Named, not left to the default (the first stage state): `write_workflow` writes
        # the stages in alphabetical order, which puts `implement`'s states first.
        "state": "Todo",
    }
    daemon = StageDaemon(tmp_path, fake, server, DEMO_AGENT_FOLLOW_UP=json.dumps(follow_up))
    try:
        await daemon.settle_state("ENG-1", "Human Review")
        with fake.lock:
            created = fake.by_identifier("ENG-2")
            relations = [v for name, v in fake.requests if name == "SymphonyAddBlocker"]
        assert (created.team, created.state, created.title) == ("ENG", "Todo", "Second half")
        assert created.description == "The rest of the work."
        assert created.blocked_by == ["ENG-1"]
        assert relations == [{"blockerId": "uuid-eng-1", "issueId": "uuid-eng-2"}]

        def waiting() -> bool:
            # A poll made while ENG-1 was still running saw it in Ready: wait for a later one.
            row = daemon.orchestrator.view.issue_snapshot("ENG-2")
            return (
                row is not None
                and row["status"] == "waiting"
                and row["reason"] == "blocked by ENG-1 (Human Review)"
            )

        daemon.orchestrator.request_refresh()
        await daemon.until(waiting)
        assert daemon.events("ENG-2", "dispatched") == []

        daemon.set_state("ENG-1", "Done")
        await daemon.settle_state("ENG-2", "Plan Review")
    finally:
        await daemon.stop()
    assert len(daemon.events("ENG-2", "dispatched")) == 1
    assert len(daemon.events("ENG-1", "dispatched")) == 1  # the follow-up is made once


async def test_a_move_that_fails_twice_is_retried_until_it_lands_and_the_issue_runs_once(
    fake: FakeLinear,
    server: FakeLinearServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    fake.add("ENG-1")
    fake.fail_operation(MOVE, 503, UNAVAILABLE, times=2)
    daemon = StageDaemon(tmp_path, fake, server)
    try:
        await daemon.until(lambda: fake.failures_left(MOVE) == 0)
        for _ in range(3):  # polls while the move is being retried: the claim holds
            daemon.orchestrator.request_refresh()
        await daemon.settle_state("ENG-1", "Plan Review")
    finally:
        await daemon.stop()
    assert len(daemon.events("ENG-1", "dispatched")) == 1
    assert daemon.moves() == [{"id": "uuid-eng-1", "stateId": "state-eng-plan-review"}] * 3
    bodies = daemon.bodies("ENG-1")
    assert len(bodies) == 2  # the plan and the stage's note, each posted once, not per try
    assert sum(b.endswith(PLAN_MARKER) for b in bodies) == 1
    retries = daemon.events("ENG-1", "move_retrying")
    assert len(retries) == 2 and all("503" in message for message in retries)


async def test_a_move_whose_answer_is_lost_is_confirmed_by_reading_back_not_sent_again(
    fake: FakeLinear,
    server: FakeLinearServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    fake.add("ENG-1")
    fake.fail_operation(MOVE, 502, UNAVAILABLE, applied=True)
    daemon = StageDaemon(tmp_path, fake, server)
    try:
        await daemon.settle_state("ENG-1", "Plan Review")
        await daemon.until(lambda: bool(daemon.events("ENG-1", "moved")))
    finally:
        await daemon.stop()
    assert daemon.moves() == [{"id": "uuid-eng-1", "stateId": "state-eng-plan-review"}]
    assert len(daemon.events("ENG-1", "move_retrying")) == 1
    assert len(daemon.events("ENG-1", "dispatched")) == 1
    assert len(daemon.bodies("ENG-1")) == 2

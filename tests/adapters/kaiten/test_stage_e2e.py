"""Stage mode end to end on Kaiten: the real daemon moves cards between the board's columns
through the kaiten adapter, over HTTP against the Kaiten fake under its 5 requests per second,
while the quickstart's demonstration agent (a real subprocess) only reports its outcomes.

The board has a column for every state the stages name: Todo and Ready are queue columns,
Plan Review, Rework, Human Review and Needs Attention in-progress ones, Done a done column.
Every request counts against the limit, so each test keeps its flow short and ends by checking
that the fake answered nothing 429."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from symphony.core import transitions
from symphony_adapters._support.http import HttpClient
from symphony_adapters.kaiten.tools import ADD_COMMENT, MOVE_CARD
from tests.adapters.kaiten import payloads
from tests.adapters.kaiten.fake_kaiten import PREFIX, FakeKaiten, serve
from tests.adapters.kaiten.payloads import BOARD, column
from tests.stage_flow import StageRun, stage_workflow

pytestmark = pytest.mark.slow

TOKEN = "kaiten_stage_e2e_token_0001"
TODO, PLAN_REVIEW, READY, REWORK, HUMAN_REVIEW, NEEDS_ATTENTION, DONE, REVIEW = range(301, 309)

REVIEWER = payloads.user(2, "Rita Reviewer", "rita")
PLAN_MARKER = "— symphony · plan"


def board() -> list[dict[str, Any]]:
    """A column per state, all top-level."""
    return [
        column(TODO, "Todo", 1, order=1),
        column(PLAN_REVIEW, "Plan Review", 2, order=2),
        column(READY, "Ready", 1, order=3),
        column(REWORK, "Rework", 2, order=4),
        column(HUMAN_REVIEW, "Human Review", 2, order=5),
        column(NEEDS_ATTENTION, "Needs Attention", 2, order=6),
        column(DONE, "Done", 3, order=7),
    ]


def board_with_review_subcolumns() -> list[dict[str, Any]]:
    """The checkpoints where a person reviews as sub-columns of one Review column, as Kaiten
    boards often group them: the sub-columns' own titles are the states."""
    return [
        column(TODO, "Todo", 1, order=1),
        column(READY, "Ready", 1, order=2),
        column(REWORK, "Rework", 2, order=3),
        column(REVIEW, "Review", 2, order=4),
        column(PLAN_REVIEW, "Plan Review", 2, parent=REVIEW, order=1),
        column(HUMAN_REVIEW, "Human Review", 2, parent=REVIEW, order=2),
        column(NEEDS_ATTENTION, "Needs Attention", 2, order=5),
        column(DONE, "Done", 3, order=6),
    ]


LAYOUTS = {"columns": board, "review_subcolumns": board_with_review_subcolumns}


class StageKaiten(FakeKaiten):
    """The Kaiten fake with a person's comments, and moves it can be told to fail."""

    def __init__(self, columns: list[dict[str, Any]]) -> None:
        super().__init__(token=TOKEN, columns=columns)
        self.failing_moves = 0
        """How many of the next moves (`PATCH /cards/{id}`) to answer 502 without applying."""

    def comment_as(self, card_id: int, author: dict[str, Any], text: str) -> None:
        """A comment a person writes in Kaiten's web app."""
        now = time.time()
        created = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        )
        with self.lock:
            self.next_id += 1
            card = self.cards[card_id]
            card.comments.append(
                payloads.comment(self.next_id, card_id, text, created=created, author=author)
            )

    def comments_of(self, card_id: int) -> list[str]:
        with self.lock:
            return [str(c["text"]) for c in self.cards[card_id].comments]

    def moves(self, card_id: int) -> list[int]:
        """The statuses Kaiten answered to every move of the card, in order."""
        path = f"{PREFIX}/cards/{card_id}"
        return [r.status for r in self.requests if r.method == "PATCH" and r.path == path]

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, dict[str, str], Any]:
        if method == "PATCH" and re.fullmatch(rf"{PREFIX}/cards/\d+", path):
            with self.lock:
                fail = self.failing_moves > 0
                self.failing_moves -= fail
            if fail:
                return 502, {}, {"message": "Bad Gateway"}
        return super()._route(method, path, query, headers, body)


@pytest.fixture
def kaiten(request: pytest.FixtureRequest) -> Iterator[StageKaiten]:
    """The fake with one of `LAYOUTS` (by indirect parametrization; flat columns otherwise)."""
    fake = StageKaiten(LAYOUTS[getattr(request, "param", "columns")]())
    with serve(fake):
        yield fake


def start(
    tmp_path: Path,
    kaiten: StageKaiten,
    *,
    implement: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
    **env: str,
) -> StageRun:
    tracker = {
        "kind": "kaiten",
        "provider": {"base_url": kaiten.base, "board_id": BOARD},
        "terminal_states": ["Done"],
    }
    workflow = stage_workflow(tmp_path, tracker, polling_ms=1000, implement=implement, agent=agent)
    return StageRun(workflow, {"KAITEN_TOKEN": TOKEN, **env}, timeout=25, poll_s=0.2)


async def settle(run: StageRun, kaiten: StageKaiten, card_id: int, column_id: int) -> None:
    """Wait until the card is in `column_id` and the daemon has let go of it."""
    await run.settle(str(card_id), lambda: kaiten.column_of(card_id) == column_id)


@pytest.mark.parametrize("kaiten", list(LAYOUTS), indirect=True)
async def test_a_card_is_planned_by_the_daemon_and_implemented_with_the_plan_once_approved(
    tmp_path: Path, kaiten: StageKaiten
) -> None:
    kaiten.add(1, TODO, title="Add a greeting")
    run = start(tmp_path, kaiten)
    try:
        await settle(run, kaiten, 1, PLAN_REVIEW)
        comments = kaiten.comments_of(1)
        plans = [c for c in comments if c.endswith(PLAN_MARKER)]
        assert len(plans) == 1 and "1. Read the code that 'Add a greeting' touches." in plans[0]
        assert any("Stage `plan` is done; moving the ticket to Plan Review." in c for c in comments)
        assert run.events("KT-1", "moved") == ["daemon moved it to Plan Review (plan: done)"]

        kaiten.move(1, READY)  # a person approves the plan
        await settle(run, kaiten, 1, HUMAN_REVIEW)
        written = run.notes("KT-1")
        assert "Stage: implement" in written
        assert "The approved plan: 1. Read the code that 'Add a greeting' touches." in written
        assert run.events("KT-1", "moved")[-1] == (
            "daemon moved it to Human Review (implement: done)"
        )
    finally:
        await run.stop()
    # The agents reported; they were never offered the move tool, and every move was the
    # daemon's: one per transition.
    assert len(run.offered) == 2
    assert all({"report_outcome", ADD_COMMENT} <= tools for tools in run.offered)
    assert not any(MOVE_CARD in tools for tools in run.offered)
    assert kaiten.moves(1) == [200, 200]
    assert len(run.events("KT-1", "dispatched")) == 2
    # Only the approval was a person's: the daemon's moves are never credited to a person,
    # even when a poll sees the card in its target before the move is confirmed.
    assert run.events("KT-1", "moved_by_person") == ["a person moved it from Plan Review to Ready"]
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]


async def test_a_reviewer_comment_and_a_move_to_rework_reach_the_next_prompt(
    tmp_path: Path, kaiten: StageKaiten
) -> None:
    kaiten.add(1, HUMAN_REVIEW, title="Add a greeting")
    run = start(tmp_path, kaiten)
    try:
        await run.until(lambda: "1" in run.orchestrator.board.rows)  # the poll saw it
        assert run.events("KT-1", "dispatched") == []  # a person's turn: nothing runs
        kaiten.comment_as(1, REVIEWER, "Please rename the helper.")
        kaiten.move(1, REWORK)
        await settle(run, kaiten, 1, HUMAN_REVIEW)
    finally:
        await run.stop()
    written = run.notes("KT-1")
    assert "Stage: implement" in written
    # The author's name reaches the template as one plain handle (SPEC §25.3).
    assert "Comment by Rita_Reviewer: Please rename the helper." in written
    assert run.events("KT-1", "moved_by_person") == [
        "a person moved it from Human Review to Rework"
    ]
    assert kaiten.comments_of(1)[-1].startswith("Stage `implement` is done")
    assert len(run.events("KT-1", "dispatched")) == 1
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]


async def test_a_blocked_report_moves_the_card_to_needs_attention_with_the_question(
    tmp_path: Path, kaiten: StageKaiten
) -> None:
    kaiten.add(1, READY)
    run = start(tmp_path, kaiten, DEMO_AGENT_OUTCOME="blocked")
    try:
        await settle(run, kaiten, 1, NEEDS_ATTENTION)
    finally:
        await run.stop()
    [comment] = kaiten.comments_of(1)
    assert comment.startswith("The agent is blocked in stage `implement`; moving the ticket to ")
    assert "- Which behaviour do you want when the input is empty?" in comment
    assert run.events("KT-1", "moved") == [
        "daemon moved it to Needs Attention (implement: blocked)"
    ]
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]


async def test_an_agent_that_never_reports_is_moved_to_needs_attention_after_max_total_turns(
    tmp_path: Path, kaiten: StageKaiten
) -> None:
    kaiten.add(1, READY)
    run = start(
        tmp_path,
        kaiten,
        implement={"max_total_turns": 2},
        agent={"max_turns": 1},
        DEMO_AGENT_OUTCOME="silent",
    )
    try:
        await settle(run, kaiten, 1, NEEDS_ATTENTION)
    finally:
        await run.stop()
    [comment] = kaiten.comments_of(1)
    assert "Stage `implement` used 2 turns (max_total_turns 2)" in comment
    assert "The agent's last message:" in comment and "nothing to report yet" in comment
    assert len(run.events("KT-1", "dispatched")) == 2  # two attempts of one turn each
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]


async def test_a_follow_up_card_waits_for_its_blocker_card_to_be_done_and_then_runs(
    tmp_path: Path, kaiten: StageKaiten
) -> None:
    kaiten.add(1, READY)
    follow_up = {
        "title": "Second half",
        "description": "The rest of the work.",
        "blocked_by": ["KT-1"],
    }
    run = start(tmp_path, kaiten, DEMO_AGENT_FOLLOW_UP=json.dumps(follow_up))
    try:
        await settle(run, kaiten, 1, HUMAN_REVIEW)
        [created] = [card for card in kaiten.cards.values() if card.id != 1]
        assert (created.title, created.column_id, created.blocked_by) == (
            "Second half",
            TODO,
            [1],
        )
        identifier = f"KT-{created.id}"
        run.orchestrator.request_refresh()

        def waiting_reason() -> str | None:
            row = run.orchestrator.view.issue_snapshot(identifier)
            return row["reason"] if row is not None and row["status"] == "waiting" else None

        # A poll that read the new card while KT-1 was still being moved says `Ready`; the
        # refresh reads both again.
        await run.until(lambda: waiting_reason() == "blocked by KT-1 (Human Review)")
        assert run.events(identifier, "dispatched") == []

        kaiten.move(1, DONE)  # the blocker is done: the follow-up may run
        await settle(run, kaiten, created.id, PLAN_REVIEW)
    finally:
        await run.stop()
    assert len(run.events(identifier, "dispatched")) == 1
    assert any(c.endswith(PLAN_MARKER) for c in kaiten.comments_of(created.id))
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]


async def test_a_move_kaiten_fails_twice_is_retried_until_it_lands_and_the_card_runs_once(
    tmp_path: Path, kaiten: StageKaiten, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    # The HTTP client tries each 5xx `attempts` times itself: fail the daemon's move twice.
    kaiten.failing_moves = 2 * HttpClient.attempts
    kaiten.add(1, TODO)
    run = start(tmp_path, kaiten)
    try:
        await run.until(lambda: bool(run.events("KT-1", "move_retrying")))
        for _ in range(3):  # polls while the move is being retried: the claim holds
            run.orchestrator.request_refresh()
        await settle(run, kaiten, 1, PLAN_REVIEW)
    finally:
        await run.stop()
    assert kaiten.moves(1) == [502] * (2 * HttpClient.attempts) + [200]
    retries = run.events("KT-1", "move_retrying")
    assert len(retries) == 2 and all("502" in message for message in retries)
    assert len(run.events("KT-1", "dispatched")) == 1
    comments = kaiten.comments_of(1)
    assert sum(c.endswith(PLAN_MARKER) for c in comments) == 1  # posted once, not per try
    assert sum("Stage `plan` is done" in c for c in comments) == 1
    assert not kaiten.over_limit, [(r.method, r.path, r.at) for r in kaiten.over_limit]

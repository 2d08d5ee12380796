"""Stage mode end to end on the local board: the daemon moves tickets through the stages
declared in WORKFLOW.md while the demonstration agent (a real subprocess speaking the app-server
protocol) only reports through `report_outcome`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from symphony.config.load import load_settings
from symphony.core import transitions
from symphony.tracker.contract import TRACKER_REQUEST, TrackerContext, TrackerError, create_tracker
from symphony_adapters.local.board import LocalBoard
from tests.stage_flow import PLAN_PROMPT, StageBoard, settle, start

pytestmark = pytest.mark.slow


@pytest.fixture
def board(tmp_path: Path) -> StageBoard:
    return StageBoard(tmp_path)


async def test_a_ticket_is_planned_approved_implemented_and_reworked_by_the_daemon(
    board: StageBoard,
) -> None:
    board.ticket("DEMO-1")
    board.write_workflow()
    run = start(board)
    try:
        await settle(run, board, "DEMO-1", "Plan Review")
        text = board.text("DEMO-1")
        assert "— symphony · plan" in text and "1. Read the code" in text
        assert "Stage `plan` is done; moving the ticket to Plan Review." in text
        assert "(symphony)" in text and "(agent)" not in text
        moved = run.events("DEMO-1", "moved")
        assert moved and "daemon moved it to Plan Review (plan: done)" in moved[-1]

        board.set_state("DEMO-1", "Ready")  # the person approves the plan
        await settle(run, board, "DEMO-1", "Human Review")
        notes = run.notes("DEMO-1")
        assert "The approved plan: 1. Read the code" in notes

        board.comment("DEMO-1", "reviewer", "Please rename the helper.")
        board.set_state("DEMO-1", "Rework")
        await settle(run, board, "DEMO-1", "Human Review")
        notes = run.notes("DEMO-1")
        assert "Comment by reviewer: Please rename the helper." in notes
        assert run.events("DEMO-1", "moved_by_person")
    finally:
        await run.stop()
    assert len(run.dispatches("DEMO-1")) == 3  # plan, implement, rework: nothing twice


async def test_a_blocked_report_escalates_with_the_agents_questions(board: StageBoard) -> None:
    board.ticket("DEMO-1", state="Ready")
    board.write_workflow()
    run = start(board, DEMO_AGENT_OUTCOME="blocked")
    try:
        await settle(run, board, "DEMO-1", "Needs Attention")
    finally:
        await run.stop()
    text = board.text("DEMO-1")
    assert "The agent is blocked in stage `implement`" in text
    assert "- Which behaviour do you want when the input is empty?" in text


async def test_an_agent_that_never_reports_is_escalated_after_max_total_turns(
    board: StageBoard,
) -> None:
    board.ticket("DEMO-1", state="Ready")
    board.write_workflow(implement={"max_total_turns": 2}, max_turns=1)
    run = start(board, DEMO_AGENT_OUTCOME="silent")
    try:
        await settle(run, board, "DEMO-1", "Needs Attention")
    finally:
        await run.stop()
    text = board.text("DEMO-1")
    assert "Stage `implement` used 2 turns (max_total_turns 2)" in text
    assert "The agent's last message:" in text and "nothing to report yet" in text
    assert len(run.dispatches("DEMO-1")) == 2  # two attempts of one turn each


async def test_a_follow_up_ticket_waits_for_its_blocker_and_then_runs(board: StageBoard) -> None:
    board.ticket("DEMO-1", state="Ready")
    board.write_workflow()
    follow_up = (
        '{"title": "Second half", "description": "The rest of the work.", "blocked_by": ["DEMO-1"]}'
    )
    run = start(board, DEMO_AGENT_FOLLOW_UP=follow_up)
    try:
        await settle(run, board, "DEMO-1", "Human Review")
        assert board.state_of("DEMO-2") == "Todo"
        assert "blocked_by:\n- DEMO-1" in board.text("DEMO-2")
        run.orchestrator.request_refresh()
        await run.until(lambda: "DEMO-2" in run.orchestrator.board.rows)
        row = run.orchestrator.view.issue_snapshot("DEMO-2")
        assert row is not None and row["status"] == "waiting"
        assert row["reason"] == "blocked by DEMO-1 (Human Review)"
        assert run.dispatches("DEMO-2") == []
        board.set_state("DEMO-1", "Done")
        await settle(run, board, "DEMO-2", "Plan Review")
    finally:
        await run.stop()


class MoveFailsTwice(LocalBoard):
    """The tracker refuses the daemon's first two moves, as a flaky connection would."""

    failures = 2

    async def move_issue(self, issue: Any, state: str) -> None:
        if self.failures:
            self.failures -= 1
            raise TrackerError(TRACKER_REQUEST, "connection reset while moving")
        await super().move_issue(issue, state)


async def test_a_failed_move_is_retried_until_it_lands_and_the_ticket_never_runs_twice(
    board: StageBoard, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transitions, "TRANSITION_BASE_DELAY_S", 0.1)
    board.ticket("DEMO-1")
    board.write_workflow()
    settings = load_settings(board.workflow, dict(os.environ))
    plain = create_tracker(settings.tracker, TrackerContext(board.root, os.environ))
    assert isinstance(plain, LocalBoard)
    flaky = MoveFailsTwice(plain.folder, settings.tracker.active_states, ("Done", "Cancelled"))
    run = start(board, tracker=flaky)
    try:
        await run.until(lambda: flaky.failures == 0)
        for _ in range(3):  # polls while the move is being retried: the claim holds
            run.orchestrator.request_refresh()
        await settle(run, board, "DEMO-1", "Plan Review")
    finally:
        await run.stop()
    assert len(run.dispatches("DEMO-1")) == 1
    assert board.text("DEMO-1").count("— symphony · plan") == 1  # posted once, not per try
    retries = run.events("DEMO-1", "move_retrying")
    assert len(retries) == 2 and "connection reset" in retries[-1]


async def test_a_prompt_file_edit_applies_live_and_a_broken_one_waits_for_its_fix(
    board: StageBoard,
) -> None:
    prompts = board.root / "prompts"
    prompts.mkdir()
    (prompts / "plan.md").write_text(PLAN_PROMPT)
    board.write_workflow(plan={"prompt": None, "prompt_file": "prompts/plan.md"})
    run = start(board)
    orchestrator = run.orchestrator
    try:
        await run.until(lambda: orchestrator.health.last_tick_at is not None)
        first = orchestrator.settings
        for _ in range(2):  # an unchanged workflow is never reloaded
            orchestrator.request_refresh()
            ticks = orchestrator.health.last_tick_at
            await run.until(lambda t=ticks: orchestrator.health.last_tick_at != t)
        assert orchestrator.settings is first
        (prompts / "plan.md").write_text(PLAN_PROMPT + "{{ plam }}\n")
        orchestrator.request_refresh()
        await run.until(lambda: orchestrator.health.workflow_error is not None)
        assert "prompts/plan.md" in (orchestrator.health.workflow_error or "")
        (prompts / "plan.md").write_text(PLAN_PROMPT + "Be brief.\n")
        orchestrator.request_refresh()
        await run.until(lambda: orchestrator.health.workflow_error is None)
        assert orchestrator.settings.machine is not None
        assert orchestrator.settings.machine.stages[0].prompt_template.endswith("Be brief.")
    finally:
        await run.stop()


def test_check_shows_the_machine_and_each_tickets_stage(board: StageBoard) -> None:
    import subprocess

    board.ticket("DEMO-1")
    board.ticket("DEMO-2", state="Ready")
    board.write_workflow(plan={"agent": "claude"})
    text = board.workflow.read_text().replace(
        "---\n", "---\nclaude:\n  command: no-such-claude\n", 1
    )
    board.workflow.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "symphony", "check"],
        cwd=board.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "stages (escalation: Needs Attention):" in out
    assert "plan         Todo" in out and "-> done: Plan Review" in out
    assert "agent: claude" in out and "agent: codex" in out
    # Every agent the workflow runs is checked, not only the default one.
    assert "`no-such-claude` (claude.command) was not found on PATH" in out
    assert "DEMO-1           Todo (plan)" in out and "DEMO-2           Ready (implement)" in out


async def test_check_shows_the_gates_and_a_full_review_queue_holding_new_tickets(
    board: StageBoard, capsys: pytest.CaptureFixture[str]
) -> None:
    from symphony.cli import check

    board.ticket("DEMO-1", state="Human Review")
    board.ticket("DEMO-2", state="Ready")
    board.write_workflow(
        implement={"verify": [{"name": "tests", "run": "true"}], "on_verify_failed": "Broken"},
        max_in_review=1,
    )
    settings = load_settings(board.workflow, dict(os.environ))
    tracker = create_tracker(settings.tracker, TrackerContext(board.root, os.environ))
    assert await check.report(settings, tracker) == 0
    out = capsys.readouterr().out
    assert "verify: tests; after 2 fix turn(s) still failing: Broken" in out
    assert "review queue  1 ticket(s) wait for review, at most 1 (agent.max_in_review)" in out
    assert "new tickets wait" in out
    assert "waits: waits for reviewers: 1 tickets wait for review" in out


async def test_check_fails_on_a_state_the_tracker_does_not_have(
    board: StageBoard, capsys: pytest.CaptureFixture[str]
) -> None:
    from symphony.cli import check

    board.write_workflow()
    settings = load_settings(board.workflow, dict(os.environ))
    tracker = create_tracker(settings.tracker, TrackerContext(board.root, os.environ))

    class ListsItsStates(type(tracker)):  # type: ignore[misc]
        async def tracker_states(self) -> list[str]:
            return ["Todo", "Ready", "Rework", "Plan Review", "Human Review", "Done"]

    tracker.__class__ = ListsItsStates
    assert await check.report(settings, tracker) == 1
    out = capsys.readouterr().out
    assert "error: the tracker has no state 'Needs Attention'" in out
    assert out.count("error:") == 1  # only the missing one


async def test_a_reload_into_a_broken_stage_machine_keeps_the_last_good_one(
    board: StageBoard,
) -> None:
    board.write_workflow()
    run = start(board)
    orchestrator = run.orchestrator
    try:
        await run.until(lambda: orchestrator.health.last_tick_at is not None)
        good = orchestrator.settings
        board.workflow.write_text(
            board.workflow.read_text().replace("on_success: Plan Review", "on_success: Todo")
        )
        orchestrator.request_refresh()
        await run.until(lambda: orchestrator.health.workflow_error is not None)
        assert "one of the stage's own states" in (orchestrator.health.workflow_error or "")
        assert orchestrator.settings is good
    finally:
        await run.stop()

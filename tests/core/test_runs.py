"""What comes after a turn: the rules the worker asks the core about (`symphony.core.runs`)."""

from __future__ import annotations

import dataclasses

import pytest

from symphony.base.issue import Issue
from symphony.config.codex import CodexSettings
from symphony.config.sections import Settings
from symphony.config.stages import Report, StageMachine, StageOutcome
from symphony.core.runs import (
    GateStep,
    TurnVerdict,
    after_gates,
    before_first_turn,
    next_turn,
    turn_limits,
)
from symphony.core.verification import GateResult, GateRound
from tests.factories import make_issue, make_settings, make_stage

PLAN = make_stage("plan", ("Todo",), max_total_turns=5)
IMPLEMENT = make_stage("implement", ("Ready",), max_total_turns=5, max_turns=3)


def stage_settings(**kw: object) -> Settings:
    machine = StageMachine((PLAN, IMPLEMENT), "Needs Attention")
    settings = make_settings(active=("Todo", "Ready"), **kw)  # type: ignore[arg-type]
    return dataclasses.replace(settings, machine=machine)


def test_limits_take_the_stage_turns_over_the_agent_ones_and_count_earlier_attempts() -> None:
    settings = stage_settings(max_turns=20)
    implementing = turn_limits(settings, IMPLEMENT, turns_used=4)
    assert (implementing.max_turns, implementing.budget) == (3, 1)
    limits = turn_limits(settings, PLAN, turns_used=0)
    assert (limits.max_turns, limits.budget) == (20, 5)
    plain = turn_limits(make_settings(max_turns=7), None, turns_used=99)
    assert (plain.max_turns, plain.budget) == (7, 7)  # spec mode: no budget across attempts


def test_a_run_starts_only_while_its_stage_has_turns_left() -> None:
    settings = stage_settings()
    assert before_first_turn(turn_limits(settings, IMPLEMENT, 4)).verdict is TurnVerdict.CONTINUE
    used_up = before_first_turn(turn_limits(settings, IMPLEMENT, 5))
    assert used_up.verdict is TurnVerdict.STUCK and "budget" in used_up.reason


def test_an_active_routable_ticket_with_turns_left_gets_another_turn() -> None:
    settings = make_settings(max_turns=3)
    limits = turn_limits(settings, None, 0)
    ticket = make_issue("A-1", state="In Progress")
    verdict = next_turn(ticket, turn=2, limits=limits, stage=None, settings=settings)
    assert verdict.verdict is TurnVerdict.CONTINUE
    last = next_turn(ticket, turn=3, limits=limits, stage=None, settings=settings)
    assert last.verdict is TurnVerdict.STOP and last.reason == "max_turns (3) reached"


def test_a_ticket_that_left_the_run_stops_it_and_says_why() -> None:
    settings = make_settings(required_labels=("agent",))
    limits = turn_limits(settings, None, 0)
    labelled = make_issue("A-1", labels=("agent",))

    def after(issue: Issue | None) -> tuple[TurnVerdict, str]:
        found = next_turn(issue, turn=1, limits=limits, stage=None, settings=settings)
        return found.verdict, found.reason

    assert after(labelled) == (TurnVerdict.CONTINUE, "turns left")
    assert after(None) == (TurnVerdict.STOP, "issue no longer visible")
    assert after(dataclasses.replace(labelled, state="Done")) == (
        TurnVerdict.STOP,
        "state is now Done",
    )
    assert after(dataclasses.replace(labelled, labels=())) == (
        TurnVerdict.STOP,
        "issue no longer routable",
    )


def test_in_stage_mode_a_move_to_another_stage_stops_and_a_used_budget_is_stuck() -> None:
    settings = stage_settings()
    limits = turn_limits(settings, PLAN, turns_used=3)  # 2 of the stage's 5 turns left
    planning = make_issue("A-1", state="Todo")
    moved = next_turn(
        dataclasses.replace(planning, state="Ready"),
        turn=1,
        limits=limits,
        stage=PLAN,
        settings=settings,
    )
    assert (moved.verdict, moved.reason) == (TurnVerdict.STOP, "moved to Ready, another stage")
    assert next_turn(planning, turn=1, limits=limits, stage=PLAN, settings=settings).verdict is (
        TurnVerdict.CONTINUE
    )
    stuck = next_turn(planning, turn=2, limits=limits, stage=PLAN, settings=settings)
    assert stuck.verdict is TurnVerdict.STUCK and "max_total_turns (5)" in stuck.reason


def test_a_stage_narrows_the_agent_block_its_runs_start_with() -> None:
    codex = CodexSettings(command="codex app-server", thread_sandbox="workspace-write")
    settings = make_settings(codex=codex)
    assert settings.agent_block(None, "codex") is codex
    planning = dataclasses.replace(
        PLAN, has_approval_policy=True, approval_policy="on-request", thread_sandbox="read-only"
    )
    narrowed = settings.agent_block(planning, "codex")
    assert isinstance(narrowed, CodexSettings)
    assert (narrowed.approval_policy, narrowed.thread_sandbox) == ("on-request", "read-only")
    assert narrowed.command == "codex app-server"
    # A stage's own block of the kind replaces the workflow's (the stall timeout comes with it).
    own = dataclasses.replace(PLAN, sessions={"codex": CodexSettings(stall_timeout_ms=5)})
    assert settings.agent_block(own, "codex").stall_timeout_ms == 5


def gate_round(*passed: bool) -> GateRound:
    return GateRound(tuple(
        GateResult(f"gate{i}", "make check", "passed" if ok else "failed", 0 if ok else 1, 0.1,
                   "exited with status 0" if ok else "exited with status 1", "boom")
        for i, ok in enumerate(passed)
    ))  # fmt: skip


DONE = Report(StageOutcome.DONE, "done")
BLOCKED = Report(StageOutcome.BLOCKED, "cannot")
RED, GREEN = gate_round(True, False), gate_round(True, True)


@pytest.mark.parametrize(
    ("rounds", "fix_turns", "report", "step", "fix_turn"),
    [
        ((), 0, DONE, GateStep.RUN_GATES, 0),  # the report: the gates run first
        ((GREEN,), 0, DONE, GateStep.DONE, 0),  # green at once: no fix turn
        ((RED,), 0, DONE, GateStep.FIX_TURN, 1),  # red: the first fix turn
        ((RED,), 1, DONE, GateStep.RUN_GATES, 0),  # after a fix turn the gates run again
        ((RED, GREEN), 1, DONE, GateStep.DONE, 0),  # fixed
        ((RED, RED), 1, DONE, GateStep.FIX_TURN, 2),  # still red, a second turn is left
        ((RED, RED, RED), 2, DONE, GateStep.DONE, 0),  # both fix turns used: it gives up
        ((RED,), 1, BLOCKED, GateStep.DONE, 0),  # a fix turn said blocked: no more gates
        ((), 0, BLOCKED, GateStep.RUN_GATES, 0),  # only a fix turn's blocked ends it early
    ],
)
def test_after_gates_runs_them_after_each_report_and_fix_turn_until_green_or_used_up(
    rounds: tuple[GateRound, ...], fix_turns: int, report: Report, step: GateStep, fix_turn: int
) -> None:
    after = after_gates(rounds, fix_turns, report, max_fix_turns=2, identifier="A-1")
    assert (after.step, after.fix_turn) == (step, fix_turn)
    if step is GateStep.FIX_TURN:
        assert f"fix turn {fix_turn} of at most 2" in after.prompt
        assert "`gate1` failed" in after.prompt and "boom" in after.prompt


def test_a_stage_without_fix_turns_gives_up_after_the_first_red_round() -> None:
    after = after_gates((RED,), 0, DONE, max_fix_turns=0, identifier="A-1")
    assert after.step is GateStep.DONE

"""The scheduling core around review: verification outcomes, the evidence of a hand-off,
rework rounds, tickets closed after review, outcome records, and the review queue that holds
new work while reviewers are behind. Pure: no I/O, an injected clock."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.config.sandbox import Network, SandboxKind, SandboxSettings
from symphony.config.sections import Settings
from symphony.config.stages import Gate, Report, StageMachine, StageOutcome
from symphony.core.evidence import WorkspaceFacts
from symphony.core.outcomes import CLOSED, GATE, HANDOFF, REWORK, summarize
from symphony.core.verification import GateResult, GateRound, Verification
from tests.factories import WALL, make_issue, make_settings, make_stage

FAILED = GateResult("tests", "pytest -q", "failed", 1, 2.0, "exited with status 1", "E assert")
PASSED = GateResult("tests", "pytest -q", "passed", 0, 1.5, "completed")
FACTS = WorkspaceFacts(
    "symphony/A-1", "c0ffee" * 6 + "abcd", "b" * 40, "where the workspace started",
    ("c0ffee1 Add the feature",), 0, " calc.py | 2 ++\n 1 file changed", 0,
)  # fmt: skip
DONE = Report(StageOutcome.DONE, "Implemented it.", pull_request="https://example.test/pr/7")


def review_settings(max_in_review: int | None = None) -> Settings:
    machine = StageMachine(
        (
            make_stage("plan", ("Todo",), on_success="Plan Review", max_total_turns=10),
            make_stage(
                "implement",
                ("Ready", "Rework"),
                on_success="Human Review",
                max_total_turns=10,
                verify=(Gate("tests", "pytest -q"),),
                on_verify_failed="Broken",
                evidence=True,
            ),
        ),
        "Needs Attention",
    )
    settings = make_settings(active=("Todo", "Ready", "Rework"))
    agent = dataclasses.replace(settings.agent, max_in_review=max_in_review)
    return dataclasses.replace(settings, machine=machine, agent=agent)


def run_to_report(
    state: core.SchedulerState, settings: Settings, issue_state: str, exit: core.WorkerExit
) -> core.PendingTransition:
    issue = make_issue("A-1", state=issue_state)
    (start,) = core.select_dispatches(state, [issue], settings, 0.0, WALL)
    assert isinstance(start, core.StartWorker)
    core.on_agent_event(state, issue.id, AgentEvent("turn_started"), 1.0, WALL)
    usage = TokenUsage(input_tokens=900, output_tokens=100, total_tokens=1000)
    core.on_agent_event(state, issue.id, AgentEvent("token_usage", usage=usage), 2.0, WALL)
    (perform,) = core.on_worker_exit(state, issue.id, exit, settings, 60.0)
    assert isinstance(perform, core.PerformTransition)
    return state.transitions[issue.id]


def test_gates_that_still_fail_after_the_fix_turns_escalate_with_the_last_failure() -> None:
    state = core.SchedulerState()
    verification = Verification((GateRound((FAILED,)), GateRound((FAILED,))))
    exit = core.WorkerExit(True, report=DONE, verification=verification)
    pending = run_to_report(state, review_settings(), "Ready", exit)
    plan = pending.plan
    assert (plan.outcome, plan.target, plan.evidence, plan.hands_off) == (
        StageOutcome.VERIFY_FAILED,
        "Broken",
        None,
        False,
    )
    (comment,) = plan.comments
    assert comment.kind == "verify_failed" and "after 1 fix turn;" in comment.body
    assert "Gate `tests` (`pytest -q`) exited with status 1" in comment.body
    assert "E assert" in comment.body
    # Every gate of every round is an outcome record (the verify pass rate).
    gates = [r for r in state.new_outcomes if r.kind == GATE]
    assert [r.data["passed"] for r in gates] == [False, False]
    assert gates[0].at == WALL + timedelta(seconds=60)


def test_a_verified_hand_off_carries_the_evidence_of_what_the_daemon_saw() -> None:
    state = core.SchedulerState()
    verification = Verification((GateRound((FAILED,)), GateRound((PASSED,))))
    exit = core.WorkerExit(True, report=DONE, verification=verification, facts=FACTS)
    plan = run_to_report(state, review_settings(), "Ready", exit).plan
    assert (plan.outcome, plan.target, plan.hands_off) == (StageOutcome.DONE, "Human Review", True)
    evidence = plan.evidence
    assert evidence is not None
    assert evidence["verification"]["fix_turns"] == 1
    assert evidence["verification"]["results"][0]["exit_code"] == 0
    assert evidence["tokens"] == {"input": 900, "output": 100, "total": 1000}
    assert evidence["hand_off"] == 1 and evidence["turns"] == 1
    assert evidence["pull_request"] == "https://example.test/pr/7"
    (comment,) = plan.comments  # the evidence stands in for the plain "done" comment
    assert comment.kind == "evidence" and comment.single
    assert "| tests | `pytest -q` | passed | 0 | 1.5 s |" in comment.body
    assert "All gates passed after 1 fix turn." in comment.body
    assert "1 commit since `bbbbbbbbbbbb`" in comment.body and "calc.py | 2 ++" in comment.body
    assert evidence["sandbox"] == "none"


def test_the_evidence_names_the_sandbox_the_stage_ran_in() -> None:
    settings = review_settings()
    assert settings.machine is not None
    boxed = SandboxSettings(kind=SandboxKind.BWRAP, network=Network.NONE)
    machine = dataclasses.replace(settings.machine, stages=tuple(
        dataclasses.replace(s, sandbox=boxed) if s.name == "implement" else s
        for s in settings.machine.stages
    ))  # fmt: skip
    settings = dataclasses.replace(settings, machine=machine)
    state = core.SchedulerState()
    exit = core.WorkerExit(True, report=DONE, verification=Verification((GateRound((PASSED,)),)))
    evidence = run_to_report(state, settings, "Ready", exit).plan.evidence
    assert evidence is not None
    assert evidence["sandbox"] == "bwrap, network none, workspace writable"


def test_hand_off_rework_and_acceptance_are_recorded_as_the_ticket_goes_round() -> None:
    settings = review_settings()
    state = core.SchedulerState()
    exit = core.WorkerExit(True, report=DONE, verification=Verification((GateRound((PASSED,)),)))
    run_to_report(state, settings, "Ready", exit)
    later = WALL + timedelta(minutes=5)
    core.on_transition_confirmed(state, "id-A-1", moved=True, wall=later)
    (handoff,) = [r for r in state.new_outcomes if r.kind == HANDOFF]
    assert handoff.data["seconds"] == 300.0 and handoff.data["rework"] is False
    assert state.handed_off["id-A-1"] == ("human review",)
    # A reviewer sends it back: dispatching it into the stage again is a rework round.
    pending = run_to_report(state, settings, "Rework", exit)
    assert [r.kind for r in state.new_outcomes].count(REWORK) == 1
    assert pending.plan.evidence is not None and pending.plan.evidence["hand_off"] == 2
    core.on_transition_confirmed(state, "id-A-1", moved=True, wall=later)
    # Accepted: a person moves it to Done, and the kept workspace is swept.
    done = make_issue("A-1", state="Done")
    effects = core.sweep_kept_workspaces(state, [done], ["id-A-1"], settings, later)
    assert effects == [core.RemoveWorkspace("A-1")]
    (closed,) = [r for r in state.new_outcomes if r.kind == CLOSED]
    # Both runs count: the ticket's tokens over all its attempts.
    assert closed.data == {
        "first_pass": False,
        "handoffs": 2,
        "state": "Done",
        "tokens": 2000,
        "cost_usd": None,  # no model was priced in this test: unknown, not zero
    }
    assert "id-A-1" not in state.handed_off
    summary = summarize(state.new_outcomes)
    assert (summary.handoffs, summary.reworks, summary.closed, summary.first_pass_rate) == (
        2,
        1,
        1,
        0.0,
    )
    assert summary.rework_rate == 0.5 and summary.gates["tests"].rate == 1.0


def test_a_full_review_queue_holds_new_tickets_but_not_reworked_ones() -> None:
    settings = review_settings(max_in_review=2)
    state = core.SchedulerState()
    polled = [
        make_issue("R-1", state="Human Review"),
        make_issue("R-2", state="Plan Review"),
        make_issue("N-1", state="Todo"),
        make_issue("W-1", state="Rework"),
    ]
    assert core.observe_review_queue(state, polled, settings) == 2
    state.handed_off["id-W-1"] = ("human review",)
    candidates = [i for i in polled if settings.tracker.is_active(i.state)]
    reasons = dict(
        (i.identifier, why) for i, why in core.explain_dispatch(state, candidates, settings)
    )
    assert reasons["N-1"] == (
        "waits for reviewers: 2 tickets wait for review (agent.max_in_review: 2)"
    )
    assert reasons["W-1"] is None
    # One look says the same, and counts who waits only for the queue (what a poll shows).
    outlook, held = core.dispatch_outlook(state, candidates, settings)
    assert dict((i.identifier, why) for i, why in outlook) == reasons
    assert held == 1  # N-1
    started = core.select_dispatches(state, candidates, settings, 0.0, WALL)
    assert [e.issue.identifier for e in started if isinstance(e, core.StartWorker)] == ["W-1"]
    # A reviewer moves one on: the queue has room again.
    core.observe_review_queue(state, polled[1:], settings)
    started = core.select_dispatches(state, candidates, settings, 1.0, WALL)
    assert [e.issue.identifier for e in started if isinstance(e, core.StartWorker)] == ["N-1"]

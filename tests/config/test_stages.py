"""The stage machine as WORKFLOW.md declares it, and what each outcome transitions to."""

from __future__ import annotations

from pathlib import Path

import pytest

from symphony.base.errors import SymphonyError
from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.prompt import PromptError, check_prompts
from symphony.config.stages import Report, StageOutcome
from symphony.core.markers import marked, marker_of, unmarked
from symphony.core.stage_outcomes import plan_transition

HEAD = "---\ntracker:\n  kind: local\n  provider:\n    path: board\n"


def workflow(tmp_path: Path, stages: str, extra: str = "", body: str = "Work on it.") -> Path:
    (tmp_path / "board").mkdir(exist_ok=True)
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"{HEAD}{extra}stages:\n{stages}---\n{body}\n")
    return path


TWO_STAGES = """  plan:
    states: [Todo]
    prompt: "Plan {{ issue.identifier }} ({{ stage }})"
    on_success: Plan Review
    thread_sandbox: read-only
  implement:
    states: [Ready, Rework]
    on_success: Human Review
    on_stuck: Stuck
    max_total_turns: 30
    max_turns: 5
"""


def test_stages_define_the_active_states_and_every_outcome_target(tmp_path: Path) -> None:
    settings = load_settings(workflow(tmp_path, TWO_STAGES), {})
    machine = settings.machine
    assert machine is not None
    assert settings.tracker.active_states == ("Todo", "Ready", "Rework")
    plan, implement = machine.stages
    assert machine.stage_for("rework") is implement and machine.stage_for("Plan Review") is None
    assert (plan.on_success, plan.on_blocked, plan.on_stuck) == (
        "Plan Review",
        "Needs Attention",
        "Needs Attention",
    )
    assert implement.on_stuck == "Stuck" and implement.max_total_turns == 30
    assert plan.max_total_turns == 40  # two attempts' worth of agent.max_turns (20)
    assert implement.prompt_template == "Work on it."  # the WORKFLOW.md body by default
    assert plan.thread_sandbox == "read-only" and implement.thread_sandbox is None
    assert machine.checkpoint_states(settings.tracker.terminal_states) == (
        "Plan Review",
        "Needs Attention",
        "Human Review",
        "Stuck",
    )
    check_prompts(settings)


def test_a_prompt_file_is_read_relative_to_the_workflow_and_part_of_its_fingerprint(
    tmp_path: Path,
) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "plan.md").write_text("\n\nPlan {{ issue.identifier }}\n")
    stages = (
        "  plan:\n    states: [Todo]\n    prompt_file: prompts/plan.md\n    on_success: Review\n"
    )
    path = workflow(tmp_path, stages)
    first = load_settings(path, {})
    assert first.machine is not None
    (stage,) = first.machine.stages
    assert stage.prompt_template == "Plan {{ issue.identifier }}"
    assert (stage.prompt_source, stage.prompt_line) == ("prompts/plan.md", 3)
    (tmp_path / "prompts" / "plan.md").write_text("Plan {{ issue.title }}\n")
    assert load_settings(path, {}).fingerprint != first.fingerprint


def test_a_stage_prompt_is_checked_with_the_stage_variables_and_names_its_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "do.md").write_text(
        "{{ plan }}\n{{ comments.first.body }}\n{{ plam }}\n"
    )
    stages = "  do:\n    states: [Todo]\n    prompt_file: prompts/do.md\n    on_success: Review\n"
    settings = load_settings(workflow(tmp_path, stages), {})
    with pytest.raises(PromptError) as err:
        check_prompts(settings)
    assert "stage do: prompt line 3 of prompts/do.md" in err.value.message
    assert "did you mean `plan`?" in err.value.message


def test_spec_mode_prompts_cannot_read_the_stage_variables(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"{HEAD}---\n{{{{ plan }}}}\n")
    with pytest.raises(PromptError) as err:
        check_prompts(load_settings(path, {}))
    assert err.value.category == "template_unknown_variable"


@pytest.mark.parametrize(
    ("stages", "extra", "message"),
    [
        ("  a:\n    states: [Todo]\n", "", "stages.a.on_success is required"),
        (
            "  a:\n    states: [Todo]\n    on_success: X\n  b:\n    states: [todo]\n"
            "    on_success: Y\n",
            "",
            "state 'todo' belongs to both stages.a and stages.b",
        ),
        ("  a:\n    states: [Todo]\n    on_success: todo\n", "", "one of the stage's own states"),
        (
            "  a:\n    states: [Todo]\n    on_success: X\n    on_blocked: Ready\n"
            "  b:\n    states: [Ready]\n    on_success: Y\n",
            "",
            "an escalation must go to a state where a person takes over",
        ),
        (
            "  a:\n    states: [Todo]\n    on_success: X\n",
            "  active_states: [Todo, Doing]\n",
            "tracker.active_states (Todo, Doing) disagrees with the stages' states (Todo)",
        ),
        ("  a:\n    states: [Done]\n    on_success: X\n", "", "is also a terminal state"),
        ("  a:\n    states: []\n    on_success: X\n", "", "stages.a.states must list"),
        (
            "  a:\n    states: [Todo]\n    on_success: X\n    prompt_file: nope.md\n",
            "",
            "stages.a.prompt_file",
        ),
        ("  a:\n    states: [Todo]\n    on_success: X\n    max_total_turns: 0\n", "", "at least 1"),
    ],
)
def test_a_stage_machine_the_daemon_cannot_run_is_a_clear_config_error(
    tmp_path: Path, stages: str, extra: str, message: str
) -> None:
    path = workflow(tmp_path, stages)
    if extra:
        path.write_text(path.read_text().replace("    path: board\n", f"    path: board\n{extra}"))
    with pytest.raises(SymphonyError) as err:
        load_settings(path, {})
    assert err.value.category == "invalid_workflow_config"
    assert message in err.value.message


def test_matching_active_states_are_accepted_and_unknown_stage_keys_warned(
    tmp_path: Path,
) -> None:
    stages = "  a:\n    states: [Todo]\n    on_success: X\n    on_sucess: Y\n"
    path = workflow(tmp_path, stages)
    path.write_text(
        path.read_text().replace("    path: board\n", "    path: board\n  active_states: [todo]\n")
    )
    settings = load_settings(path, {})
    assert settings.tracker.active_states == ("Todo",)
    assert any("stages.a.on_sucess" in w and "`on_success`" in w for w in settings.warnings)


def test_without_stages_the_workflow_stays_in_spec_mode(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"{HEAD}escalation_state: Help\nagent:\n  max_in_review: 2\n---\nbody\n")
    settings = load_settings(path, {})
    assert settings.machine is None
    assert any("escalation_state is used only with stages" in w for w in settings.warnings)
    assert any("agent.max_in_review is used only with stages" in w for w in settings.warnings)
    with pytest.raises(ConfigError):
        path.write_text(f"{HEAD}stages: []\n---\nbody\n")
        load_settings(path, {})


VERIFYING = """  implement:
    states: [Ready]
    on_success: Human Review
    verify:
      - name: tests
        run: pytest -q
        timeout_ms: 900000
      - name: lint
        run: ruff check .
    max_fix_turns: 3
    on_verify_failed: Broken
"""


def test_verification_gates_are_declared_in_order_with_their_limits(tmp_path: Path) -> None:
    settings = load_settings(
        workflow(tmp_path, VERIFYING, extra="agent:\n  max_in_review: 2\n"), {}
    )
    assert settings.machine is not None and settings.agent.max_in_review == 2
    (stage,) = settings.machine.stages
    assert [(g.name, g.run, g.timeout_ms) for g in stage.verify] == [
        ("tests", "pytest -q", 900000),
        ("lint", "ruff check .", None),
    ]
    assert (stage.max_fix_turns, stage.on_verify_failed, stage.verify_output_chars) == (
        3,
        "Broken",
        4000,
    )
    assert stage.evidence  # a stage with gates hands over with evidence by default
    # The escalation of failed verification is a checkpoint, but not a review queue.
    terminal = settings.tracker.terminal_states
    assert "Broken" in settings.machine.checkpoint_states(terminal)
    assert settings.machine.review_states(terminal) == ("Human Review",)


def test_without_gates_a_stage_fails_no_verification_and_posts_no_evidence(
    tmp_path: Path,
) -> None:
    stages = (
        "  a:\n    states: [Todo]\n    on_success: X\n    on_blocked: Help\n"
        "    on_stuck: Help\n    max_fix_turns: 1\n"
    )
    settings = load_settings(workflow(tmp_path, stages), {})
    assert settings.machine is not None
    (stage,) = settings.machine.stages
    assert stage.verify == () and not stage.evidence
    assert "Needs Attention" not in settings.machine.targets()
    assert any("max_fix_turns is used only with stages.a.verify" in w for w in settings.warnings)


@pytest.mark.parametrize(
    ("verify", "message"),
    [
        ("    verify: pytest\n", "stages.a.verify must be a list of gates"),
        ("    verify:\n      - run: pytest\n", "stages.a.verify[0].name must be a short name"),
        ("    verify:\n      - name: t\n", "stages.a.verify[0].run must be a shell command"),
        (
            "    verify:\n      - {name: t, run: a}\n      - {name: t, run: b}\n",
            "two gates named 't'",
        ),
        (
            "    verify:\n      - {name: t, run: a, timeout_ms: 0}\n",
            "stages.a.verify[0].timeout_ms must be an integer of at least 1",
        ),
        (
            "    verify:\n      - {name: t, run: a}\n    max_fix_turns: -1\n",
            "max_fix_turns must be an integer of at least 0",
        ),
        (
            "    verify:\n      - {name: t, run: a}\n    on_verify_failed: Todo\n",
            "one of the stage's own states",
        ),
    ],
)
def test_a_gate_the_daemon_cannot_run_is_a_clear_config_error(
    tmp_path: Path, verify: str, message: str
) -> None:
    stages = f"  a:\n    states: [Todo]\n    on_success: X\n{verify}"
    with pytest.raises(SymphonyError) as err:
        load_settings(workflow(tmp_path, stages), {})
    assert message in err.value.message


# Outcomes


def test_done_with_a_plan_posts_the_plan_and_moves_to_on_success(tmp_path: Path) -> None:
    stage = _stage(tmp_path, "plan")
    plan = plan_transition(
        stage,
        Report(StageOutcome.DONE, "Planned.", "1. a\n2. b"),
        stuck=False,
        turns_used=3,
        last_message=None,
    )
    assert plan is not None and plan.target == "Plan Review" and plan.outcome is StageOutcome.DONE
    assert [c.kind for c in plan.comments] == ["plan", "done"]
    assert plan.comments[0].body == "1. a\n2. b"
    assert "Planned." in plan.comments[1].body


def test_blocked_posts_the_summary_and_questions_and_escalates(tmp_path: Path) -> None:
    stage = _stage(tmp_path, "implement")
    report = Report(StageOutcome.BLOCKED, "Need a decision.", open_questions=("Which API?",))
    plan = plan_transition(stage, report, stuck=False, turns_used=1, last_message=None)
    assert plan is not None and plan.target == "Needs Attention"
    assert "Need a decision." in plan.comments[0].body and "- Which API?" in plan.comments[0].body


def test_stuck_names_the_turns_and_quotes_the_last_message(tmp_path: Path) -> None:
    stage = _stage(tmp_path, "implement")
    plan = plan_transition(stage, None, stuck=True, turns_used=30, last_message="thinking\nmore")
    assert plan is not None and plan.target == "Stuck"
    assert "used 30 turns (max_total_turns 30)" in plan.comments[0].body
    assert "> thinking\n> more" in plan.comments[0].body


def test_no_report_with_turns_left_decides_nothing(tmp_path: Path) -> None:
    assert (
        plan_transition(
            _stage(tmp_path, "plan"), None, stuck=False, turns_used=1, last_message=None
        )
        is None
    )


def test_markers_survive_any_markdown_and_name_kind_and_key() -> None:
    body = marked("The plan.\n", "plan")
    assert marker_of(body) == ("plan", None) and unmarked(body) == "The plan."
    keyed = marked("Done.", "done", "implement-4")
    assert marker_of(keyed) == ("done", "implement-4")
    assert marker_of("A person's comment") is None and unmarked("text") == "text"


def _stage(tmp_path: Path, name: str):  # type: ignore[no-untyped-def]
    settings = load_settings(workflow(tmp_path, TWO_STAGES), {})
    assert settings.machine is not None
    return next(s for s in settings.machine.stages if s.name == name)


def test_a_persons_approval_and_changes_go_where_the_stages_say(tmp_path: Path) -> None:
    settings = load_settings(workflow(tmp_path, TWO_STAGES), {})
    assert settings.machine is not None
    plan, implement = settings.machine.stages
    # By default: approval to the next stage (after the last, done); changes to the stage's
    # last state (its rework state).
    assert (plan.on_approved, plan.on_changes_requested) == ("Ready", "Todo")
    assert (implement.on_approved, implement.on_changes_requested) == ("Done", "Rework")
    named = TWO_STAGES.replace(
        "    on_stuck: Stuck\n", "    on_stuck: Stuck\n    on_approved: Accepted\n"
    )
    settings = load_settings(workflow(tmp_path, named), {})
    assert settings.machine is not None and settings.machine.stages[1].on_approved == "Accepted"
    broken = TWO_STAGES.replace(
        "    on_stuck: Stuck\n", "    on_stuck: Stuck\n    on_approved: 3\n"
    )
    with pytest.raises(ConfigError, match=r"stages\.implement\.on_approved"):
        load_settings(workflow(tmp_path, broken), {})

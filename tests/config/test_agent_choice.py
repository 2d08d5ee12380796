"""Which agent runs a ticket: `agent.kind`, a stage's `agent`, a label when allowed; each
kind's settings block, and its own stall timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from symphony import core
from symphony.config.claude import ClaudeSettings
from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sections import Settings
from tests.factories import WALL, make_issue

STAGES = {
    "plan": {"states": ["Todo"], "prompt": "Plan", "on_success": "Plan Review", "agent": "claude"},
    "implement": {"states": ["Ready"], "prompt": "Build", "on_success": "Human Review"},
}


def load(tmp_path: Path, **sections: object) -> Settings:
    config = {
        "tracker": {"kind": "local", "provider": {"path": "board"}},
        "workspace": {"root": "ws"},
        **sections,
    }
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\nDo it.\n")
    return load_settings(path, {"HOME": "/nowhere"})


def kind_of(settings: Settings, state: str, labels: tuple[str, ...] = ()) -> str:
    issue = make_issue("A-1", state=state, labels=labels)
    stage = settings.machine.stage_for(state) if settings.machine is not None else None
    return core.agent_kind_for(issue, stage, settings)


def test_a_stage_names_its_agent_and_the_others_run_the_default(tmp_path: Path) -> None:
    settings = load(tmp_path, stages=STAGES, claude={"model": "claude-sonnet-4-5"})
    assert kind_of(settings, "Todo") == "claude" and kind_of(settings, "Ready") == "codex"
    block = settings.session_settings("claude")
    assert isinstance(block, ClaudeSettings) and block.model == "claude-sonnet-4-5"


def test_a_label_chooses_the_agent_only_when_the_workflow_allows_it(tmp_path: Path) -> None:
    closed = load(tmp_path, stages=STAGES)
    assert kind_of(closed, "Ready", ("agent:claude",)) == "codex"
    opened = load(tmp_path, stages=STAGES, agent={"label_override": True})
    assert kind_of(opened, "Ready", ("agent:claude",)) == "claude"
    assert kind_of(opened, "Todo", ("agent:codex",)) == "codex"  # over the stage's own
    assert kind_of(opened, "Ready", ("agent:nonesuch",)) == "codex"  # unknown: not obeyed


def test_a_run_is_stalled_by_its_own_agents_timeout(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        stages=STAGES,
        codex={"stall_timeout_ms": 60_000},
        claude={"stall_timeout_ms": 5_000},
    )
    state = core.SchedulerState()
    issues = [make_issue("A-1", state="Todo"), make_issue("B-1", state="Ready")]
    starts = core.select_dispatches(state, issues, settings, 0.0, WALL)
    assert {s.issue.identifier: s.agent_kind for s in starts} == {"A-1": "claude", "B-1": "codex"}
    (stop,) = core.detect_stalls(state, settings, 6.0)
    assert stop.identifier == "A-1" and stop.reason is core.StopReason.STALLED
    assert core.next_wakeup(state, 100.0, settings) == pytest.approx(60.0)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"stages": {**STAGES, "plan": {**STAGES["plan"], "agent": "gpt"}}},
            r"stages\.plan\.agent is 'gpt'",
        ),
        ({"claude": {"approve": "maybe"}}, r"claude\.approve must be one of allow, deny"),
        (
            {"claude": {"allowed_tools": "Bash"}, "agent": {"label_override": "yes"}},
            r"label_override",
        ),
        ({"claude": {"stall_timeout_ms": "soon"}}, r"claude\.stall_timeout_ms must be an integer"),
        ({"claude": {"extra_args": [1]}}, r"claude\.extra_args must be a list of strings"),
        ({"acp": {"approve": "sometimes"}}, r"acp\.approve must be one of allow, deny"),
        ({"agent": {"kind": "gemini"}}, r"known: codex, claude, acp"),
    ],
)
def test_bad_agent_settings_are_clear_config_errors(
    tmp_path: Path, sections: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, **sections)


def test_unknown_keys_of_an_agents_block_are_reported(tmp_path: Path) -> None:
    settings = load(tmp_path, claude={"modle": "x"})
    assert any("claude.modle" in w and "`model`" in w for w in settings.warnings)


def test_a_stage_may_change_its_agents_block_over_the_workflows(tmp_path: Path) -> None:
    plan = {**STAGES["plan"], "claude": {"model": "claude-haiku-4-5", "stall_timeout_ms": 2_000}}
    settings = load(
        tmp_path,
        stages={**STAGES, "plan": plan},
        claude={"model": "claude-sonnet-4-5", "permission_mode": "acceptEdits"},
    )
    assert settings.machine is not None
    block = settings.machine.stages[0].sessions["claude"]
    assert isinstance(block, ClaudeSettings)
    assert (block.model, block.permission_mode) == ("claude-haiku-4-5", "acceptEdits")
    state = core.SchedulerState()
    core.select_dispatches(state, [make_issue("A-1", state="Todo")], settings, 0.0, WALL)
    assert core.detect_stalls(state, settings, 1.5) == []
    assert core.detect_stalls(state, settings, 2.5) != []  # the stage's own stall timeout


def test_a_bad_stage_block_names_the_stage(tmp_path: Path) -> None:
    plan = {**STAGES["plan"], "claude": {"approve": "often"}}
    with pytest.raises(ConfigError, match=r"stages\.plan: claude\.approve must be one of"):
        load(tmp_path, stages={**STAGES, "plan": plan})


def test_a_fallback_agent_must_be_known_and_stays_out_of_sandboxed_stages(tmp_path: Path) -> None:
    implement = {**STAGES["implement"], "fallback_agent": "claude"}
    settings = load(tmp_path, stages={**STAGES, "implement": implement})
    assert settings.machine is not None
    assert settings.machine.stages[1].fallback_agent == "claude"
    unknown = {**STAGES["implement"], "fallback_agent": "gpt"}
    with pytest.raises(ConfigError, match=r"stages\.implement\.fallback_agent is 'gpt'"):
        load(tmp_path, stages={**STAGES, "implement": unknown})
    boxed = {**implement, "sandbox": {"kind": "bwrap"}}
    with pytest.raises(ConfigError, match=r"fallback_agent: the stage runs in a bwrap sandbox"):
        load(tmp_path, stages={**STAGES, "implement": boxed})

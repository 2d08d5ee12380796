"""Each settings section parses itself, from its own block, without the rest of the workflow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from symphony.config.agents import parse_agent
from symphony.config.fields import ConfigError, env_patterns
from symphony.config.sections import parse_budget
from symphony.config.tracker import parse_tracker
from symphony.config.worker import parse_worker
from symphony.config.workspace import parse_workspace, parse_worktrees


@dataclass(frozen=True)
class Defaults:
    default_active_states: tuple[str, ...] | None = None
    default_terminal_states: tuple[str, ...] | None = ("Done",)
    states_from_tracker: bool = False


def test_the_tracker_section_takes_its_defaults_from_the_kind_it_is_given() -> None:
    given = parse_tracker({"active_states": ["Todo"]}, "fake", Defaults())
    assert (given.active_states, given.terminal_states) == (("Todo",), ("Done",))

    with pytest.raises(ConfigError) as err:
        parse_tracker({}, "fake", Defaults())
    assert err.value.message == "tracker.active_states is required: the fake tracker has no default"

    asked = parse_tracker({}, "fake", Defaults(states_from_tracker=True))
    assert asked.active_states == ()


def test_the_workspace_root_and_its_strategy_are_read_apart(tmp_path: Path) -> None:
    raw = {"root": "ws", "strategy": "worktree", "repository": "https://example.com/r.git"}
    workspace = parse_workspace(raw, tmp_path, {})
    assert (workspace.root, workspace.worktrees) == (tmp_path / "ws", None)
    worktrees = parse_worktrees(raw, tmp_path, {})
    assert worktrees is not None and worktrees.repository == "https://example.com/r.git"


def test_variable_name_lists_report_each_setting_in_its_own_words(tmp_path: Path) -> None:
    assert env_patterns(["GOPATH", "NPM_*"], "unused") == ("GOPATH", "NPM_*")
    with pytest.raises(ConfigError) as err:
        parse_worker({"ssh": {"pass_env": ["1X"]}}, tmp_path, {})
    assert err.value.message == (
        "worker.ssh.pass_env must be a list of variable names or prefixes ending in *"
    )


def test_sections_that_need_another_section_take_it_as_an_argument() -> None:
    tracker = parse_tracker({"active_states": ["Todo"]}, "fake", Defaults())
    assert parse_budget({}, "Needs Attention", tracker).on_exceeded == "Needs Attention"
    with pytest.raises(ConfigError) as err:
        parse_budget({"on_exceeded": "Todo"}, None, tracker)
    assert "an active state" in err.value.message


def test_rate_limit_headroom_is_a_percentage_or_off() -> None:
    assert parse_agent({}, {}).rate_limit_headroom is None
    assert parse_agent({"rate_limit_headroom": 95}, {}).rate_limit_headroom == 95
    with pytest.raises(ConfigError, match=r"agent.rate_limit_headroom is a percentage \(1-100\)"):
        parse_agent({"rate_limit_headroom": 150}, {})
    with pytest.raises(ConfigError, match=r"agent\.rate_limit_headroom must be at least 1"):
        parse_agent({"rate_limit_headroom": 0}, {})

"""`tracker.provider` validation for the gitlab kind, the state <-> label mapping, secrets, and
the shipped example workflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from symphony.config.load import load_settings
from symphony.config.sections import TrackerSettings
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    MISSING_TRACKER_SECRET,
    TrackerContext,
    TrackerError,
)
from symphony_adapters.gitlab import DEFAULT_ACTIVE_STATES, DEFAULT_TERMINAL_STATES, create_tracker
from symphony_adapters.gitlab.config import default_label, parse_config
from symphony_adapters.gitlab.tracker import GitLabTracker
from tests.adapters.gitlab.helpers import ENV, TOKEN

ACTIVE = ("Todo", "In Progress")
TERMINAL = ("Done",)
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gitlab" / "WORKFLOW.md"


def parse(provider: dict[str, Any], environ: dict[str, str] = ENV) -> Any:
    return parse_config({"project": "acme/widgets", **provider}, environ, ACTIVE, TERMINAL)


def test_defaults_are_gitlab_com_the_gitlab_token_and_scoped_workflow_labels() -> None:
    config = parse({})
    assert config.base_url == "https://gitlab.com"
    assert config.api_url == "https://gitlab.com/api/v4"
    assert config.token.value == TOKEN and config.token.env_name == "GITLAB_TOKEN"
    assert config.label_states.closed_state == "Done"
    assert config.label_states.labels.label_for("Todo") == "workflow::todo"
    assert config.label_states.labels.label_for("In Progress") == "workflow::in progress"
    assert DEFAULT_ACTIVE_STATES == ("Todo", "In Progress")
    assert DEFAULT_TERMINAL_STATES == ("Done",)


def test_default_label_lower_cases_and_collapses_blanks() -> None:
    assert default_label("  Human   Review ") == "workflow::human review"
    assert default_label("Todo", "status/") == "status/todo"


def test_project_path_is_url_encoded_and_a_numeric_id_is_kept() -> None:
    assert parse({"project": "group/sub/project"}).project_ref == "group%2Fsub%2Fproject"
    assert parse({"project": 1234}).project_ref == "1234"
    assert parse({"project": "/acme/widgets/"}).project == "acme/widgets"


@pytest.mark.parametrize(
    ("provider", "key"),
    [
        ({"project": None}, "project"),
        ({"project": "widgets"}, "project"),
        ({"project": "acme/wid gets"}, "project"),
        ({"project": 0}, "project"),
        ({"base_url": "gitlab.com"}, "base_url"),
        ({"base_url": "https://gitlab.example.com/api/v4"}, "base_url"),
        ({"state_labels": ["workflow::todo"]}, "state_labels"),
        ({"state_labels": {"Todo": "a,b"}}, "state_labels"),
        ({"state_labels": {"Todo": "x", "In Progress": "X"}}, "state_labels"),
        ({"state_label_prefix": 3}, "state_label_prefix"),
        ({"priority_labels": {"p1": "high"}}, "priority_labels"),
        ({"closed_page_limit": 0}, "closed_page_limit"),
        ({"blockers": "yes"}, "blockers"),
        ({"token": 42}, "token"),
    ],
)
def test_invalid_provider_keys_are_rejected_by_name(provider: dict[str, Any], key: str) -> None:
    merged = {"project": "acme/widgets", **provider}
    if provider.get("project", "") is None:
        merged.pop("project")
    with pytest.raises(TrackerError) as info:
        parse_config(merged, ENV, ACTIVE, TERMINAL)
    assert info.value.category == INVALID_TRACKER_CONFIG
    assert key in info.value.message


def test_missing_token_names_the_variable_and_never_a_value() -> None:
    with pytest.raises(TrackerError) as info:
        parse({"token": "$MY_GITLAB_TOKEN"}, {"GITLAB_TOKEN": TOKEN})
    assert info.value.category == MISSING_TRACKER_SECRET
    assert "MY_GITLAB_TOKEN" in info.value.message and TOKEN not in info.value.message


def test_configured_labels_resolve_both_ways_and_terminal_wins() -> None:
    config = parse_config(
        {"project": "acme/widgets", "state_labels": {"Todo": "Ready", "Human Review": "review"}},
        ENV,
        ACTIVE,
        ("Done", "Cancelled"),
    )
    labels = config.label_states.labels
    assert labels.label_for("todo") == "Ready"
    assert labels.state_of(["bug", "ready"]) == "Todo"
    assert labels.state_of(["review"]) == "Human Review"
    assert labels.state_of(["workflow::in progress"]) == "In Progress"
    assert labels.state_of(["workflow::todo", "workflow::cancelled"]) == "Cancelled"
    assert labels.state_of(["workflow::human review"]) == "workflow::human review"
    assert labels.state_of(["bug"]) is None


def test_secret_env_names_is_the_token_variable_or_nothing_for_a_literal() -> None:
    assert GitLabTracker(parse({})).secret_env_names() == ["GITLAB_TOKEN"]
    literal = GitLabTracker(parse({"token": "glpat-literal"}))
    assert literal.secret_env_names() == []


def test_create_tracker_uses_the_workflow_states() -> None:
    settings = TrackerSettings(
        kind="gitlab",
        provider={"project": "acme/widgets"},
        active_states=("Ready",),
        terminal_states=("Shipped",),
    )
    tracker = create_tracker(settings, TrackerContext(Path("."), ENV))
    assert isinstance(tracker, GitLabTracker)
    assert tracker.config.label_states.labels.label_for("Ready") == "workflow::ready"
    assert "shipped" in tracker.config.terminal_states


def test_the_example_workflow_loads() -> None:
    settings = load_settings(EXAMPLE, ENV)
    assert settings.tracker.kind == "gitlab"
    tracker = create_tracker(settings.tracker, TrackerContext(EXAMPLE.parent, ENV))
    assert isinstance(tracker, GitLabTracker)
    assert tracker.config.label_states.labels.label_for("Human Review") == "workflow::human review"

"""`tracker.provider` validation for both GitHub scopes, and the state <-> label mapping."""

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
from symphony_adapters.github import DEFAULT_ACTIVE_STATES, DEFAULT_TERMINAL_STATES, create_tracker
from symphony_adapters.github.config import default_label, graphql_url_for, parse_config
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.github.helpers import ENV, TOKEN

ACTIVE = ("Todo", "In Progress")
TERMINAL = ("Done",)
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "github" / "WORKFLOW.md"


def parse(provider: dict[str, Any], environ: dict[str, str] = ENV) -> Any:
    return parse_config(provider, environ, ACTIVE, TERMINAL)


def test_default_labels_are_prefixed_kebab_case_state_names() -> None:
    assert default_label("In Progress") == "status:in-progress"
    assert default_label("  Human   Review ") == "status:human-review"
    config = parse({"repository": "acme/widgets"})
    assert config.label_states.labels.label_for("Todo") == "status:todo"
    assert config.label_states.labels.label_for("in progress") == "status:in-progress"


def test_configured_state_labels_override_the_default_and_resolve_both_ways() -> None:
    config = parse(
        {"repository": "acme/widgets", "state_labels": {"Todo": "ready", "Human Review": "review"}}
    )
    labels = config.label_states.labels
    assert labels.label_for("todo") == "ready"
    assert labels.state_of(["bug", "Ready"]) == "Todo"
    assert labels.state_of(["review"]) == "Human Review"
    assert labels.state_of(["status:in-progress"]) == "In Progress"
    assert labels.state_of(["bug"]) is None


def test_an_unconfigured_prefixed_label_is_its_own_state() -> None:
    labels = parse({"repository": "acme/widgets"}).label_states.labels
    assert labels.state_of(["status:human-review"]) == "status:human-review"


def test_terminal_label_wins_over_an_active_one() -> None:
    config = parse_config({"repository": "acme/widgets"}, ENV, ACTIVE, ("Done", "Cancelled"))
    assert config.label_states.labels.state_of(["status:todo", "status:cancelled"]) == "Cancelled"


def test_closed_state_has_no_label_unless_configured() -> None:
    config = parse({"repository": "acme/widgets"})
    assert "done" not in config.label_states.labels.by_state
    assert config.label_states.closed_state == "Done"
    custom = parse({"repository": "acme/widgets", "closed_state": "Closed"})
    assert custom.label_states.closed_state == "Closed"


def test_two_states_on_one_label_are_refused() -> None:
    with pytest.raises(TrackerError) as info:
        parse({"repository": "acme/widgets", "state_labels": {"Todo": "x", "In Progress": "X"}})
    assert info.value.category == INVALID_TRACKER_CONFIG


@pytest.mark.parametrize(
    ("provider", "fragment"),
    [
        ({}, "exactly one scope"),
        (
            {"repository": "a/b", "project": {"owner": "acme", "number": 1}},
            "exactly one scope",
        ),
        ({"repository": "not-a-repo"}, "owner/name"),
        ({"repository": "a/b", "api_url": "ftp://x"}, "api_url"),
        ({"repository": "a/b", "state_labels": ["x"]}, "state_labels"),
        ({"repository": "a/b", "state_labels": {"Todo": "a,b"}}, "without commas"),
        ({"repository": "a/b", "priority_labels": {"p1": "high"}}, "priority_labels"),
        ({"repository": "a/b", "closed_page_limit": 0}, "closed_page_limit"),
        ({"project": "acme/1"}, "project must be a map"),
        ({"project": {"owner": "", "number": 1}}, "project.owner"),
        ({"project": {"owner": "acme", "number": 0}}, "project.number"),
        ({"project": {"owner": "acme", "number": 1, "owner_type": "team"}}, "owner_type"),
        ({"repository": "a/b", "token": 42}, "tracker.provider.token"),
    ],
)
def test_invalid_provider_config_names_the_key(provider: dict[str, Any], fragment: str) -> None:
    with pytest.raises(TrackerError) as info:
        parse(provider)
    assert info.value.category == INVALID_TRACKER_CONFIG
    assert fragment in info.value.message


def test_missing_token_names_the_variable_not_a_value() -> None:
    with pytest.raises(TrackerError) as info:
        parse({"repository": "a/b"}, environ={})
    assert info.value.category == MISSING_TRACKER_SECRET
    assert "$GITHUB_TOKEN" in info.value.message


def test_project_scope_accepts_user_projects_and_textual_numbers() -> None:
    config = parse({"project": {"owner": "octocat", "number": "7", "owner_type": "user"}})
    assert config.project is not None
    assert (config.project.owner, config.project.number, config.project.owner_type) == (
        "octocat",
        7,
        "user",
    )
    assert config.repository is None


def test_graphql_url_follows_the_enterprise_server_rule() -> None:
    assert graphql_url_for("https://api.github.com") == "https://api.github.com/graphql"
    assert graphql_url_for("https://ghe.example/api/v3/") == "https://ghe.example/api/graphql"
    config = parse({"repository": "a/b", "api_url": "https://ghe.example/api/v3"})
    assert config.graphql_url == "https://ghe.example/api/graphql"
    assert config.web_host == "ghe.example"
    assert parse({"repository": "a/b"}).web_host == "github.com"


def test_token_variable_is_declared_secret_and_kept_out_of_repr() -> None:
    settings = TrackerSettings(
        kind="github",
        provider={"repository": "acme/widgets", "token": "$MY_TOKEN"},
        active_states=DEFAULT_ACTIVE_STATES,
        terminal_states=DEFAULT_TERMINAL_STATES,
    )
    tracker = create_tracker(settings, TrackerContext(Path("."), {"MY_TOKEN": TOKEN}))
    assert isinstance(tracker, GitHubTracker)
    assert tracker.secret_env_names() == ["MY_TOKEN"]
    assert TOKEN not in repr(tracker.config.label_states.labels)


def test_example_workflow_is_accepted(tmp_path: Path) -> None:
    settings = load_settings(EXAMPLE, {**ENV, "HOME": str(tmp_path)})
    assert settings.tracker.kind == "github"
    tracker = create_tracker(settings.tracker, TrackerContext(EXAMPLE.parent, ENV))
    assert isinstance(tracker, GitHubTracker)
    assert tracker.config.repository is not None

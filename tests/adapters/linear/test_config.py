"""`tracker.provider` validation, secrets, defaults, and the example workflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import respx

import symphony_adapters.linear as linear
from symphony.config.load import load_settings
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    MISSING_TRACKER_SECRET,
    TrackerContext,
    TrackerError,
)
from symphony_adapters.linear import LinearTracker, create_tracker
from tests.adapters.linear.conftest import environ, settings
from tests.adapters.linear.fake_linear import API_KEY

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "linear" / "WORKFLOW.md"


def build(env: dict[str, str] | None = None, **provider: Any) -> LinearTracker:
    tracker = create_tracker(
        settings(**provider), TrackerContext(Path("."), environ() if env is None else env)
    )
    assert isinstance(tracker, LinearTracker)
    return tracker


@pytest.mark.parametrize(
    "provider",
    [
        {"team_key": None},  # neither scope
        {"project_slug": "abc123"},  # both scopes (team_key is in the base settings)
        {"team_key": ""},
        {"team_key": ["ENG"]},
    ],
)
def test_exactly_one_scope_is_required(provider: dict[str, Any]) -> None:
    with pytest.raises(TrackerError) as err:
        build(**provider)
    assert err.value.category == INVALID_TRACKER_CONFIG
    assert "team_key" in err.value.message


@pytest.mark.parametrize("endpoint", ["api.linear.app/graphql", "ftp://linear.app/graphql", ""])
def test_endpoint_must_be_an_http_url(endpoint: str) -> None:
    with pytest.raises(TrackerError) as err:
        build(endpoint=endpoint)
    assert err.value.category == INVALID_TRACKER_CONFIG
    assert "endpoint" in err.value.message


def test_project_scope_and_defaults_are_accepted() -> None:
    tracker = build(team_key=None, project_slug="8a2b3c4d5e6f", endpoint=None)
    assert tracker.config.endpoint == "https://api.linear.app/graphql"
    assert tracker.config.project_slug == "8a2b3c4d5e6f" and tracker.config.team_key is None
    assert tracker.config.assignee is None


def test_assignee_me_is_recognized_in_any_case() -> None:
    assert build(assignee="ME").config.assignee == "me"
    assert build(assignee="user-42").config.assignee == "user-42"


def test_unset_key_variable_is_a_missing_secret_named_by_variable() -> None:
    with pytest.raises(TrackerError) as err:
        build(env={})
    assert err.value.category == MISSING_TRACKER_SECRET
    assert "$LINEAR_API_KEY" in err.value.message


def test_secret_env_names_is_the_variable_actually_used() -> None:
    assert build().secret_env_names() == ["LINEAR_API_KEY"]
    custom = build(env={"TEAM_LINEAR_KEY": API_KEY}, api_key="$TEAM_LINEAR_KEY")
    assert custom.secret_env_names() == ["TEAM_LINEAR_KEY"]
    # A literal key has no variable to withhold from the agent (and is discouraged).
    assert build(env={}, api_key=API_KEY).secret_env_names() == []


@respx.mock(assert_all_mocked=True)
def test_creating_a_tracker_makes_no_request() -> None:
    build()  # respx would fail on any request that was not mocked


def test_default_states_are_linears_default_team_workflow() -> None:
    assert linear.DEFAULT_ACTIVE_STATES == ("Todo", "In Progress")
    assert linear.DEFAULT_TERMINAL_STATES == ("Done", "Canceled", "Duplicate")


def test_example_workflow_passes_config_validation() -> None:
    environ = {"LINEAR_API_KEY": API_KEY, "GITHUB_TOKEN": "ghp_example_token_000", "HOME": "/tmp"}
    loaded = load_settings(EXAMPLE, environ)
    assert loaded.tracker.kind == "linear"
    tracker = create_tracker(
        loaded.tracker, TrackerContext(loaded.workflow_dir, {"LINEAR_API_KEY": API_KEY})
    )
    assert tracker.secret_env_names() == ["LINEAR_API_KEY"]
    # The agent reports; the daemon moves the issue and opens the pull request.
    assert "report_outcome" in loaded.prompt_template
    assert "linear_move_issue" not in loaded.prompt_template

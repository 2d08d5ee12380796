"""`tracker.provider` validation for the kaiten adapter, the module's state contract, and the
example workflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import symphony_adapters.kaiten as kaiten
from symphony.config.load import load_settings
from symphony.config.sections import TrackerSettings
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    MISSING_TRACKER_SECRET,
    TrackerContext,
    TrackerError,
)
from symphony_adapters.kaiten.config import parse_config
from symphony_adapters.kaiten.tracker import KaitenTracker
from tests.adapters.kaiten.helpers import ENV, TOKEN

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "kaiten" / "WORKFLOW.md"


def parse(provider: dict[str, Any], environ: dict[str, str] = ENV) -> Any:
    return parse_config(provider, environ)


def test_a_domain_becomes_the_cloud_api_root_and_web_host() -> None:
    config = parse({"domain": "acme", "board_id": 12})
    assert config.api_url == "https://acme.kaiten.ru/api/latest"
    assert config.web_url == "https://acme.kaiten.ru"
    assert config.board_id == 12 and config.space_id is None and config.lane_id is None
    assert config.token.value == TOKEN and config.token.env_name == "KAITEN_TOKEN"


def test_a_full_host_name_is_accepted_as_domain() -> None:
    assert parse({"domain": "Acme.kaiten.ru", "board_id": 1}).api_url == (
        "https://acme.kaiten.ru/api/latest"
    )


def test_an_on_premise_base_url_is_used_as_given() -> None:
    config = parse({"base_url": "https://kaiten.example.com/api/latest/", "board_id": "7"})
    assert config.api_url == "https://kaiten.example.com/api/latest"
    assert config.web_url == "https://kaiten.example.com"
    assert config.board_id == 7


def test_optional_space_and_lane_are_integers() -> None:
    config = parse({"domain": "acme", "board_id": 1, "space_id": 5, "lane_id": "9"})
    assert (config.space_id, config.lane_id) == (5, 9)


@pytest.mark.parametrize(
    ("provider", "words"),
    [
        ({"board_id": 1}, "exactly one of `domain`"),
        ({"domain": "acme", "base_url": "https://k.example.com/api/latest", "board_id": 1}, "one"),
        ({"domain": "ac me", "board_id": 1}, "subdomain"),
        ({"domain": "acme.example.com", "board_id": 1}, "subdomain"),
        ({"base_url": "ftp://k.example.com", "board_id": 1}, "http(s) URL"),
        ({"domain": "acme"}, "board_id is required"),
        ({"domain": "acme", "board_id": "ten"}, "positive integer"),
        ({"domain": "acme", "board_id": 0}, "positive integer"),
        ({"domain": "acme", "board_id": True}, "board_id"),
        ({"domain": "acme", "board_id": 1, "lane_id": -3}, "lane_id must be a positive"),
        ({"domain": "acme", "board_id": 1, "token": 5}, "token must be a string"),
    ],
)
def test_invalid_provider_blocks_are_rejected_naming_the_key(
    provider: dict[str, Any], words: str
) -> None:
    with pytest.raises(TrackerError) as caught:
        parse(provider)
    assert caught.value.category == INVALID_TRACKER_CONFIG
    assert words in caught.value.message


def test_a_missing_token_variable_is_reported_by_name_only() -> None:
    with pytest.raises(TrackerError) as caught:
        parse({"domain": "acme", "board_id": 1, "token": "$MY_KAITEN"}, {})
    assert caught.value.category == MISSING_TRACKER_SECRET
    assert "$MY_KAITEN" in caught.value.message


def test_a_broken_scope_is_reported_before_a_missing_token() -> None:
    with pytest.raises(TrackerError) as caught:
        parse({"board_id": 1}, {})
    assert caught.value.category == INVALID_TRACKER_CONFIG


def test_secret_env_names_name_the_token_variable_only_when_one_is_used() -> None:
    tracker = KaitenTracker(parse({"domain": "acme", "board_id": 1}))
    assert tracker.secret_env_names() == ["KAITEN_TOKEN"]
    literal = KaitenTracker(parse({"domain": "acme", "board_id": 1, "token": "literal-tok"}))
    assert literal.secret_env_names() == []


def test_the_module_leaves_states_to_the_board() -> None:
    assert kaiten.STATES_FROM_TRACKER is True
    assert kaiten.DEFAULT_ACTIVE_STATES is None
    assert kaiten.DEFAULT_TERMINAL_STATES is None


def test_create_tracker_validates_and_makes_no_request(tmp_path: Path) -> None:
    settings = TrackerSettings(
        kind="kaiten",
        provider={"domain": "acme", "board_id": 3},
        active_states=("Queue",),
        terminal_states=("Done",),
    )
    tracker = kaiten.create_tracker(settings, TrackerContext(tmp_path, ENV))
    assert isinstance(tracker, KaitenTracker)
    assert tracker.http.quota.requests == 0
    assert tracker.http.limiter is tracker.limiter
    assert (tracker.limiter.limit, tracker.limiter.window_s) == (5, 1.0)
    # A tracker rebuilt for the same token (a reload) draws on the same budget.
    again = kaiten.create_tracker(settings, TrackerContext(tmp_path, ENV))
    assert isinstance(again, KaitenTracker) and again.limiter is tracker.limiter


def test_the_example_workflow_loads() -> None:
    # The daemon publishes the pull request on GitHub with its own token.
    settings = load_settings(EXAMPLE, {**ENV, "GITHUB_TOKEN": "ghp_example_token_000"})
    assert settings.tracker.kind == "kaiten"
    assert settings.tracker.active_states == ("Queue", "In Progress")
    assert settings.tracker.terminal_states == ("Done",)
    parse_config(settings.tracker.provider, ENV)

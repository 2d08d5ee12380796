"""`telemetry:` in WORKFLOW.md: parsed with clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.telemetry import TelemetrySettings, parse_telemetry
from tests.harness import Board


def test_an_endpoint_and_text_capture_are_read() -> None:
    parsed = parse_telemetry({"endpoint": "http://collector:4318/v1/traces", "capture_text": True})
    assert parsed == TelemetrySettings("http://collector:4318/v1/traces", True)
    assert parse_telemetry({}) == TelemetrySettings(None, False)


def test_the_agent_exports_by_default_and_gets_the_headers_only_when_asked() -> None:
    assert parse_telemetry({}).agents and not parse_telemetry({}).agent_headers
    parsed = parse_telemetry({"agents": False, "agent_headers": True})
    assert (parsed.agents, parsed.agent_headers) == (False, True)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"endpoint": "collector:4318"}, "telemetry.endpoint must be an http(s) URL"),
        ({"endpoint": 4318}, "telemetry.endpoint must be an http(s) URL"),
        ({"capture_text": "yes"}, "telemetry.capture_text must be true or false"),
        ({"agents": "no"}, "telemetry.agents must be true or false"),
        ({"agent_headers": 1}, "telemetry.agent_headers must be true or false"),
    ],
)
def test_a_wrong_value_is_named(raw: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_telemetry(raw)


def test_a_workflow_with_telemetry_loads_without_a_warning(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.write_workflow(telemetry={"endpoint": "http://collector:4318/v1/traces", "agents": False})
    settings = load_settings(board.workflow, {})
    assert settings.telemetry.endpoint == "http://collector:4318/v1/traces"
    assert not settings.telemetry.agents
    assert settings.warnings == ()

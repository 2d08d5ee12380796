"""`telemetry:` in WORKFLOW.md: parsed with clear errors."""

from __future__ import annotations

import re

import pytest

from symphony.config.fields import ConfigError
from symphony.config.telemetry import TelemetrySettings, parse_telemetry


def test_an_endpoint_and_text_capture_are_read() -> None:
    parsed = parse_telemetry({"endpoint": "http://collector:4318/v1/traces", "capture_text": True})
    assert parsed == TelemetrySettings("http://collector:4318/v1/traces", True)
    assert parse_telemetry({}) == TelemetrySettings(None, False)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"endpoint": "collector:4318"}, "telemetry.endpoint must be an http(s) URL"),
        ({"endpoint": 4318}, "telemetry.endpoint must be an http(s) URL"),
        ({"capture_text": "yes"}, "telemetry.capture_text must be true or false"),
    ],
)
def test_a_wrong_value_is_named(raw: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_telemetry(raw)

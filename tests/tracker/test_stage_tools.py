"""The tools stage mode gives agents: what `report_outcome` and `create_follow_up` accept."""

from __future__ import annotations

from typing import Any

import pytest

from symphony.base.tools import ToolResult
from symphony.config.stages import Report, StageOutcome
from symphony.tracker.stage_tools import parse_follow_up, parse_report, stage_tool_specs

STATES = ("Todo", "Ready")


def test_a_valid_report_is_recorded_with_its_plan_and_questions() -> None:
    report = parse_report(
        {"outcome": "blocked", "summary": " Stuck. ", "open_questions": ["Which API?"]}
    )
    assert report == Report(StageOutcome.BLOCKED, "Stuck.", None, ("Which API?",))
    done = parse_report('{"outcome": "done", "summary": "ok", "plan": "1. x"}')
    assert isinstance(done, Report) and done.plan == "1. x"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"outcome": "finished", "summary": "x"}, "'outcome' must be"),
        ({"outcome": "done"}, "missing required argument 'summary'"),
        ({"outcome": "done", "summary": "x", "extra": 1}, "unexpected argument(s) extra"),
        ({"outcome": "done", "summary": "x", "open_questions": [""]}, "each open question"),
        ({"outcome": "done", "summary": "x" * 5000}, "longer than 4000"),
        ("not json", "takes an object"),
    ],
)
def test_a_bad_report_gets_a_structured_failure(arguments: Any, message: str) -> None:
    result = parse_report(arguments)
    assert isinstance(result, ToolResult) and not result.success
    assert result.output["error"] == "invalid_arguments" and message in result.output["message"]


def test_a_follow_up_starts_where_work_starts_unless_told_and_keeps_blockers_once() -> None:
    parsed = parse_follow_up(
        {"title": "Part 2", "description": "Rest", "blocked_by": ["A-1", "A-1 "]}, STATES
    )
    assert parsed == ("Part 2", "Rest", ("A-1",), "Todo")
    assert parse_follow_up({"title": "T", "description": "D", "state": "ready"}, STATES) == (
        "T",
        "D",
        (),
        "Ready",
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"title": "two\nlines", "description": "D"}, "'title' must be one line"),
        (
            {"title": "T", "description": "D", "state": "Done"},
            "'state' must be one of: Todo, Ready",
        ),
        ({"title": "T"}, "missing required argument 'description'"),
        ({"title": "T", "description": "D", "blocked_by": "A-1"}, "'blocked_by' must be a list"),
    ],
)
def test_a_bad_follow_up_gets_a_structured_failure(arguments: Any, message: str) -> None:
    result = parse_follow_up(arguments, STATES)
    assert isinstance(result, ToolResult) and message in result.output["message"]


def test_both_tools_have_closed_schemas_and_neither_moves_the_ticket() -> None:
    specs = {spec.name: spec for spec in stage_tool_specs("plan", STATES)}
    assert sorted(specs) == ["create_follow_up", "report_outcome"]
    for spec in specs.values():
        assert spec.input_schema["additionalProperties"] is False and not spec.moves_ticket
    assert specs["report_outcome"].input_schema["required"] == ["outcome", "summary"]

"""Agent tools declared once (`symphony.tracker.tools`): the schema an agent sees and the check
the daemon runs come from the same declaration."""

from __future__ import annotations

from typing import Any

import pytest

from symphony.base.tools import ToolResult
from symphony.tracker.tools import (
    AddComment,
    AddLink,
    Arg,
    MoveIssue,
    ObjectArg,
    Tool,
    Toolbox,
    comment_tool,
    http_link,
    link_tool,
    move_tool,
)

BOX = Toolbox(
    "Example",
    (
        move_tool("ex_move", "Move it.", state_help="The state."),
        comment_tool("ex_comment", "Comment on it.", max_chars=20),
        link_tool(
            "ex_link",
            "Link it.",
            url_help="An http(s) URL.",
            label=Arg("title", 10, "Its title.", required=False, one_line=True),
            make=lambda values: http_link(values, "title"),
        ),
        Tool(
            "ex_query",
            "Ask.",
            (Arg("query", 50, "A query.", strip=False),),
            lambda values: (values["query"], values.get("variables")),
            objects=(ObjectArg("variables", "Variables."),),
        ),
    ),
)


def failure(result: Any) -> str:
    assert isinstance(result, ToolResult) and not result.success
    return f"{result.output['error']}: {result.output['message']}"


def test_the_schema_an_agent_sees_is_built_from_the_declaration() -> None:
    move, comment, link, query = BOX.specs()
    assert move.moves_ticket and not comment.moves_ticket
    assert move.input_schema == {
        "type": "object",
        "properties": {
            "state": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
                "description": "The state.",
            }
        },
        "required": ["state"],
        "additionalProperties": False,
    }
    assert comment.input_schema["properties"]["body"]["maxLength"] == 20
    assert link.input_schema["required"] == ["url"]
    assert link.input_schema["properties"]["url"]["format"] == "uri"
    assert query.input_schema["properties"]["variables"] == {
        "type": "object",
        "description": "Variables.",
    }


def test_checked_arguments_become_the_typed_call() -> None:
    assert BOX.parse("ex_move", {"state": "  Human Review "}) == MoveIssue("Human Review")
    # A comment keeps its blanks; arguments may come as a JSON string.
    assert BOX.parse("ex_comment", '{"body": " hi\\n"}') == AddComment(" hi\n")
    assert BOX.parse("ex_link", {"url": "https://x.test/pr/1", "title": "PR"}) == AddLink(
        "https://x.test/pr/1", "PR"
    )
    assert BOX.parse("ex_link", {"url": "https://x.test/pr/1"}) == AddLink("https://x.test/pr/1")
    assert BOX.parse("ex_query", {"query": "{ a }", "variables": {"n": 1}}) == ("{ a }", {"n": 1})


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("ex_nope", {}, "unknown_tool: 'ex_nope' is not a Example tool; use one of ex_move, "),
        ("ex_move", ["Done"], "invalid_arguments: ex_move takes a JSON object of arguments"),
        ("ex_move", "not json", "invalid_arguments: ex_move takes a JSON object"),
        ("ex_move", {"state": "Done", "id": 1}, "unexpected argument(s) id; ex_move takes 'state'"),
        ("ex_move", {}, "missing required argument 'state'"),
        ("ex_move", {"state": 3}, "'state' must be a string, got int"),
        ("ex_move", {"state": "  "}, "'state' must not be empty"),
        ("ex_move", {"state": "x" * 101}, "'state' is longer than 100 characters"),
        ("ex_move", {"state": "a\u2028b"}, "'state' must be one line"),
        ("ex_comment", {"body": "x" * 21}, "'body' is longer than 20 characters"),
        ("ex_link", {"url": "javascript:alert(1)"}, "'url' must be an http(s) URL"),
        ("ex_link", {"url": "https://x.test", "title": "a\nb"}, "'title' must be one line"),
        ("ex_query", {"query": "{ a }", "variables": [1]}, "'variables' must be an object"),
    ],
)
def test_every_broken_call_fails_with_a_message_naming_what_is_wrong(
    name: str, arguments: Any, expected: str
) -> None:
    assert expected in failure(BOX.parse(name, arguments))


def test_a_move_tool_names_the_argument_that_holds_its_target() -> None:
    spec = move_tool("move_issue", "Move it.", state_help="A state.").spec
    assert spec.moves_ticket and spec.target_argument == "state"
    assert spec.target_of({"state": "Done"}) == "Done"
    assert spec.target_of({"state": 3}) is None and spec.target_of("Done") is None

"""The agent tools of the `kaiten` adapter: their declarations, and the checks Kaiten adds.

Each tool acts only on the card of the session that calls it; executing them is
`adapters.kaiten.writes`'s business (through the tracker's HTTP client and the board's
columns), where the move, the comment and the link run the same code as the daemon's own
`move_issue`, `add_comment` and `link_pull_request`. The move tool is marked `moves_ticket`, so
stage mode can withhold it.
"""

from __future__ import annotations

from typing import Any

from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker import tools as generic

MOVE_CARD = "kaiten_move_card"
ADD_COMMENT = "kaiten_add_comment"
ADD_LINK = "kaiten_add_link"
NAMES = (MOVE_CARD, ADD_COMMENT, ADD_LINK)

UNKNOWN_STATE = "unknown_state"
NOT_IN_SCOPE = "not_in_scope"

MAX_COMMENT_CHARS = 65_536
MAX_DESCRIPTION_CHARS = 250

ToolCall = generic.MoveIssue | generic.AddComment | generic.AddLink


def toolbox(columns_note: str) -> generic.Toolbox:
    return generic.Toolbox(
        "Kaiten",
        (
            generic.move_tool(
                MOVE_CARD,
                "Move the Kaiten card you are working on to another column of its board, by "
                f"column title (case-insensitive). {columns_note} An unknown title fails and "
                "lists the board's columns.",
                state_help="The target column's title, e.g. 'Review'.",
            ),
            generic.comment_tool(
                ADD_COMMENT,
                "Add a Markdown comment to the Kaiten card you are working on.",
                max_chars=MAX_COMMENT_CHARS,
            ),
            generic.link_tool(
                ADD_LINK,
                "Attach an external link (for example your pull request) to the Kaiten card "
                "you are working on. A URL the card already has is not added again.",
                url_help="An http(s) URL.",
                label=generic.Arg(
                    "description",
                    MAX_DESCRIPTION_CHARS,
                    "The link's text on the card (optional).",
                    required=False,
                    one_line=True,
                ),
                make=lambda values: generic.http_link(values, "description"),
            ),
        ),
    )


def tool_specs(columns_note: str) -> list[ToolSpec]:
    return toolbox(columns_note).specs()


def parse_call(name: str, arguments: Any) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    call: ToolCall | ToolResult = toolbox("").parse(name, arguments)
    return call

"""The agent tools of the `kaiten` adapter: their specs, and turning a raw call into a
validated request or a failure the agent can act on.

Each tool acts only on the card of the session that calls it; executing them is
`adapters.kaiten.tracker`'s business (it owns the HTTP client and the board's columns), where
the move and the comment run the same code as the daemon's own `move_issue` and `add_comment`.
The move tool is marked `moves_ticket`, so stage mode can withhold it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symphony.base.tools import INVALID_ARGUMENTS as INVALID_ARGUMENTS
from symphony.base.tools import (
    ToolResult,
    ToolSpec,
    invalid_arguments,
    is_inline,
    object_schema,
    string_schema,
)

MOVE_CARD = "kaiten_move_card"
ADD_COMMENT = "kaiten_add_comment"
ADD_LINK = "kaiten_add_link"
NAMES = (MOVE_CARD, ADD_COMMENT, ADD_LINK)

UNKNOWN_TOOL = "unknown_tool"
UNKNOWN_STATE = "unknown_state"
NOT_IN_SCOPE = "not_in_scope"

MAX_STATE_CHARS = 100
MAX_COMMENT_CHARS = 65_536
MAX_URL_CHARS = 2_048
MAX_DESCRIPTION_CHARS = 250


@dataclass(frozen=True, slots=True)
class MoveCard:
    state: str


@dataclass(frozen=True, slots=True)
class AddComment:
    body: str


@dataclass(frozen=True, slots=True)
class AddLink:
    url: str
    description: str | None


ToolCall = MoveCard | AddComment | AddLink


def tool_specs(columns_note: str) -> list[ToolSpec]:
    return [
        ToolSpec(
            name=MOVE_CARD,
            description=(
                "Move the Kaiten card you are working on to another column of its board, by "
                f"column title (case-insensitive). {columns_note} An unknown title fails and "
                "lists the board's columns."
            ),
            input_schema=object_schema(
                {
                    "state": string_schema(
                        MAX_STATE_CHARS, "The target column's title, e.g. 'Review'."
                    )
                },
                ["state"],
            ),
            moves_ticket=True,
        ),
        ToolSpec(
            name=ADD_COMMENT,
            description="Add a Markdown comment to the Kaiten card you are working on.",
            input_schema=object_schema(
                {"body": string_schema(MAX_COMMENT_CHARS, "The comment text, in Markdown.")},
                ["body"],
            ),
        ),
        ToolSpec(
            name=ADD_LINK,
            description=(
                "Attach an external link (for example your pull request) to the Kaiten card "
                "you are working on."
            ),
            input_schema=object_schema(
                {
                    "url": {**string_schema(MAX_URL_CHARS, "An http(s) URL."), "format": "uri"},
                    "description": string_schema(
                        MAX_DESCRIPTION_CHARS, "The link's text on the card (optional)."
                    ),
                },
                ["url"],
            ),
        ),
    ]


_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    MOVE_CARD: ({"state"}, {"state"}),
    ADD_COMMENT: ({"body"}, {"body"}),
    ADD_LINK: ({"url"}, {"url", "description"}),
}


def parse_call(name: str, arguments: Any) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    if name not in _FIELDS:
        return ToolResult.failure(
            UNKNOWN_TOOL, f"{name!r} is not a Kaiten tool; use one of {', '.join(NAMES)}"
        )
    # Some agent protocols deliver arguments as a JSON string rather than an object.
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    required, allowed = _FIELDS[name]
    if not isinstance(arguments, Mapping):
        return invalid_arguments(f"{name} takes an object with {', '.join(sorted(allowed))}")
    extra = sorted(str(key) for key in arguments if key not in allowed)
    if extra:
        return invalid_arguments(f"unexpected argument(s) {', '.join(extra)} for {name}")
    for key in sorted(allowed):
        value = arguments.get(key)
        if (key in required or value is not None) and (
            not isinstance(value, str) or not value.strip()
        ):
            return invalid_arguments(f"{key!r} must be a non-empty string")
    if name == MOVE_CARD:
        state = str(arguments["state"]).strip()
        if not _one_line(state, MAX_STATE_CHARS):
            return invalid_arguments(
                f"'state' must be one line of at most {MAX_STATE_CHARS} characters"
            )
        return MoveCard(state)
    if name == ADD_COMMENT:
        body = str(arguments["body"])
        if len(body) > MAX_COMMENT_CHARS:
            return invalid_arguments(f"'body' is longer than {MAX_COMMENT_CHARS} characters")
        return AddComment(body)
    url = str(arguments["url"]).strip()
    parts = urlsplit(url)
    if len(url) > MAX_URL_CHARS or parts.scheme not in ("http", "https") or not parts.netloc:
        return invalid_arguments(
            f"'url' must be an http(s) URL of at most {MAX_URL_CHARS} characters"
        )
    description = arguments.get("description")
    if description is not None:
        description = str(description).strip()
        if not _one_line(description, MAX_DESCRIPTION_CHARS):
            return invalid_arguments(
                f"'description' must be one line of at most {MAX_DESCRIPTION_CHARS} characters"
            )
    return AddLink(url, description)


def _one_line(text: str, max_chars: int) -> bool:
    return len(text) <= max_chars and bool(is_inline(text))

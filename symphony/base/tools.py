"""Client-side tools offered to an agent: their specs and results.

Neutral ground between trackers (which implement tools) and agent sessions (which advertise
them and relay calls), so neither has to know the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

INVALID_ARGUMENTS = "invalid_arguments"
"""The failure code of a call whose arguments break the tool's schema or rules."""

_NOT_INLINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""Control and surrogate characters, and the line and paragraph separators some parsers (YAML)
break lines at: none of them belongs in a one-line value such as a state name. These are
Unicode's categories Cc, Cs, Zl and Zp, which no Unicode version changes; a character class
finds them without loading the Unicode database."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A client-side tool advertised to the agent; `input_schema` is a JSON schema object."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    moves_ticket: bool = False
    """The tool changes the ticket's state: withheld from agents in stage mode, where
    transitions are the daemon's."""
    target_argument: str | None = None
    """For a tool that moves the ticket to a state it is given: the argument naming it (each
    tracker's move tool declares its own; a raw query that may move it names none)."""

    def target_of(self, arguments: Any) -> str | None:
        """The state a call of this tool moves the ticket to, when it names one."""
        if self.target_argument is None or not isinstance(arguments, Mapping):
            return None
        target = arguments.get(self.target_argument)
        return target if isinstance(target, str) else None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """Outcome of a host-side tool call: success or failure, with JSON-safe output."""

    success: bool
    output: Any = field(default=None)

    @classmethod
    def failure(cls, error: str, message: str) -> ToolResult:
        return cls(False, {"error": error, "message": message})


def invalid_arguments(message: str) -> ToolResult:
    return ToolResult.failure(INVALID_ARGUMENTS, message)


def is_inline(text: str) -> bool:
    """Whether `text` can stand on one line: no control characters or line separators."""
    return _NOT_INLINE.search(text) is None


def string_schema(max_chars: int, description: str) -> dict[str, Any]:
    """JSON schema of a non-empty string argument of at most `max_chars` characters."""
    return {"type": "string", "minLength": 1, "maxLength": max_chars, "description": description}


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """JSON schema of a tool's arguments object; unknown arguments are refused."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }

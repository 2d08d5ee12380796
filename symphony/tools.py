"""Client-side tools offered to an agent: their specs and results.

Neutral ground between trackers (which implement tools) and agent sessions (which advertise
them and relay calls), so neither has to know the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A client-side tool advertised to the agent; `input_schema` is a JSON schema object."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """Outcome of a host-side tool call: success or failure, with JSON-safe output."""

    success: bool
    output: Any = field(default=None)

    @classmethod
    def failure(cls, error: str, message: str) -> ToolResult:
        return cls(False, {"error": error, "message": message})

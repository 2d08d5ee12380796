"""Agent tools declared once: each tool's schema and the check of its arguments come from one
declaration, so what an agent is told and what the daemon accepts cannot drift apart.

Every tracker offers a move, a comment and a link tool over its typed writes; the declarations
here (`move_tool`, `comment_tool`, `link_tool`) give them one shape and one set of rules, and an
adapter names them and adds only what its provider needs (a URL pattern, GraphQL). A call
is checked in the same order everywhere: arguments sent as a JSON string are decoded, then the
object, unknown arguments, missing ones, types, blank values, lengths and one-line values, each
failing as `invalid_arguments` with a message that names the argument.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from symphony.base.tools import ToolResult, ToolSpec, invalid_arguments, is_inline

UNKNOWN_TOOL = "unknown_tool"

MAX_STATE_CHARS = 100
MAX_URL_CHARS = 2_048


@dataclass(frozen=True, slots=True)
class MoveIssue:
    """A checked call of a move tool: the state the agent names."""

    state: str


@dataclass(frozen=True, slots=True)
class AddComment:
    """A checked call of a comment tool."""

    body: str


@dataclass(frozen=True, slots=True)
class AddLink:
    """A checked call of a link tool: the URL and, where the tracker shows one, its label."""

    url: str
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Arg:
    """One string argument of a tool."""

    name: str
    max_chars: int
    description: str
    required: bool = True
    one_line: bool = False
    """A value such as a state name or a title: no line breaks or control characters."""
    strip: bool = True
    """Surrounding blanks are dropped (a comment body keeps them)."""
    schema: Mapping[str, Any] = field(default_factory=dict)
    """Added to the argument's JSON schema (`{"format": "uri"}`)."""

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "string",
            "minLength": 1,
            "maxLength": self.max_chars,
            "description": self.description,
            **self.schema,
        }


@dataclass(frozen=True, slots=True)
class ObjectArg:
    """An argument that takes a JSON object (GraphQL variables)."""

    name: str
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class GraphqlQuery:
    """A checked call of a tracker's GraphQL tool: the document and its variables."""

    query: str
    variables: Mapping[str, Any]


Make = Callable[[dict[str, Any]], Any]
"""What a tool's checked arguments become: the call its tracker performs, or a `ToolResult`
refusing them on a rule of the provider's (a URL of another host)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool an agent is offered: its spec and the check of its arguments, from one list of
    arguments; `make` turns checked arguments into the call."""

    name: str
    description: str
    args: tuple[Arg, ...]
    make: Make
    moves_ticket: bool = False
    objects: tuple[ObjectArg, ...] = ()
    target_argument: str | None = None
    """The argument naming the state the tool moves the ticket to (`ToolSpec.target_of`)."""

    @property
    def spec(self) -> ToolSpec:
        properties = {arg.name: arg.json_schema() for arg in self.args}
        for obj in self.objects:
            properties[obj.name] = {"type": "object", "description": obj.description}
        required = [arg.name for arg in self.args if arg.required]
        required += [arg.name for arg in self.objects if arg.required]
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            moves_ticket=self.moves_ticket,
            target_argument=self.target_argument,
        )

    def parse(self, arguments: Any) -> dict[str, Any] | ToolResult:
        """The call's arguments, checked (strings stripped where the argument says so), or
        the failure to hand back to the agent. An optional argument left out is absent."""
        # Some agent protocols deliver arguments as a JSON string rather than an object.
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        if not isinstance(arguments, Mapping):
            return invalid_arguments(f"{self.name} takes a JSON object of arguments")
        known = [arg.name for arg in self.args] + [arg.name for arg in self.objects]
        extra = sorted(str(key) for key in arguments if key not in known)
        if extra:
            takes = ", ".join(repr(name) for name in known)
            return invalid_arguments(
                f"unexpected argument(s) {', '.join(extra)}; {self.name} takes {takes}"
            )
        values: dict[str, Any] = {}
        for arg in self.args:
            value = arguments.get(arg.name)
            if value is None:
                if arg.required:
                    return invalid_arguments(f"missing required argument {arg.name!r}")
                continue
            if not isinstance(value, str):
                return invalid_arguments(
                    f"{arg.name!r} must be a string, got {type(value).__name__}"
                )
            if not value.strip():
                return invalid_arguments(f"{arg.name!r} must not be empty")
            text = value.strip() if arg.strip else value
            if len(text) > arg.max_chars:
                return invalid_arguments(f"{arg.name!r} is longer than {arg.max_chars} characters")
            # YAML also breaks lines at U+2028/U+2029, so those would split a `state:` line.
            if arg.one_line and not is_inline(text):
                return invalid_arguments(
                    f"{arg.name!r} must be one line of text without control characters"
                )
            values[arg.name] = text
        for obj in self.objects:
            found = arguments.get(obj.name)
            if found is None:
                if obj.required:
                    return invalid_arguments(f"missing required argument {obj.name!r}")
                continue
            if not isinstance(found, Mapping):
                return invalid_arguments(
                    f"{obj.name!r} must be an object, got {type(found).__name__}"
                )
            values[obj.name] = dict(found)
        return values


@dataclass(frozen=True, slots=True)
class Toolbox:
    """The tools one tracker offers, found by name."""

    provider: str
    """How the tracker is named to agents (`GitHub`, `local board`)."""
    tools: tuple[Tool, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self.tools]

    def parse(self, name: str, arguments: Any) -> Any:
        """The call a tool call becomes (see `Tool.make`), or the `ToolResult` failure to hand
        back to the agent."""
        tool = next((t for t in self.tools if t.name == name), None)
        if tool is None:
            return ToolResult.failure(
                UNKNOWN_TOOL,
                f"{name!r} is not a {self.provider} tool; use one of {', '.join(self.names)}",
            )
        values = tool.parse(arguments)
        return values if isinstance(values, ToolResult) else tool.make(values)


def _move(values: dict[str, Any]) -> MoveIssue:
    return MoveIssue(values["state"])


def _comment(values: dict[str, Any]) -> AddComment:
    return AddComment(values["body"])


def move_tool(name: str, description: str, *, state_help: str, make: Make = _move) -> Tool:
    """Move the session's own ticket to a state, by name (the tracker's `move_issue`)."""
    state = Arg("state", MAX_STATE_CHARS, state_help, one_line=True)
    return Tool(name, description, (state,), make, moves_ticket=True, target_argument=state.name)


def comment_tool(name: str, description: str, *, max_chars: int, make: Make = _comment) -> Tool:
    """Add a Markdown comment to the session's own ticket (the tracker's `add_comment`)."""
    body = Arg("body", max_chars, "The comment text, in Markdown.", strip=False)
    return Tool(name, description, (body,), make)


def link_tool(
    name: str, description: str, *, url_help: str, make: Make, label: Arg | None = None
) -> Tool:
    """Link a pull request or any URL to the session's own ticket; `label` is the link's
    optional text where the tracker shows one. `make` checks the URL by the provider's rule."""
    url = Arg("url", MAX_URL_CHARS, url_help, schema={"format": "uri"})
    return Tool(name, description, (url,) if label is None else (url, label), make)


def http_link(values: dict[str, Any], label: str | None = None) -> AddLink | ToolResult:
    """A link to any http(s) URL, with the value of argument `label` as its text."""
    url = values["url"]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return invalid_arguments(f"'url' must be an http(s) URL, got {url[:100]!r}")
    return AddLink(url, values.get(label) if label is not None else None)

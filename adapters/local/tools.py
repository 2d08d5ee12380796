"""The agent tools of the local board: what they accept, and the edit each makes to a file.

`parse_call` turns a raw tool call into a validated `MoveIssue` or `AddComment`, or into a
failure result the agent can act on; the daemon's own edits (`EditComment`, `LinkPullRequest`)
are calls of the same kind. Each call's `apply` is a pure bytes-to-bytes edit of one ticket file
that first checks the file still belongs to the issue the session works on; the board runs it
through the atomic rewriter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from symphony.base.tools import ToolResult, ToolSpec, invalid_arguments
from symphony.tracker import tools as generic

from .comments import split_comments
from .edit import append_comment, format_timestamp, replace_comment, set_fields
from .ticket import (
    Document,
    decode,
    identifier_of,
    load_front_matter,
    split_document,
    ticket_id,
)

MOVE_ISSUE = "local_move_issue"
ADD_COMMENT = "local_add_comment"

MAX_COMMENT_CHARS = 64 * 1024

PULL_REQUEST = "pull_request"
"""The front matter field naming the pull request the daemon opened for the ticket."""


class NotThisTicket(Exception):
    """The file at the expected place now holds a different ticket."""


@dataclass(frozen=True, slots=True)
class MoveIssue:
    """Put the ticket in `state`, stamping `updated_at`; a ticket already there is left as it is."""

    state: str

    def apply(
        self, raw: bytes, *, file_name: str, issue_id: str, now: datetime
    ) -> tuple[bytes, dict[str, Any]]:
        document, front = _open(raw, file_name, issue_id)
        previous = front.get("state")
        output: dict[str, Any] = {
            "identifier": identifier_of(file_name),
            "path": file_name,
            "state": self.state,
            "previous_state": previous if isinstance(previous, str) else None,
        }
        if previous == self.state:
            return raw, {**output, "changed": False}
        text = set_fields(document, front, {"state": self.state, "updated_at": now})
        return text.encode("utf-8"), {
            **output,
            "changed": True,
            "updated_at": format_timestamp(now),
        }


@dataclass(frozen=True, slots=True)
class AddComment:
    """Append a comment signed `author` to the ticket, stamping `updated_at`."""

    body: str
    author: str = "agent"

    def apply(
        self, raw: bytes, *, file_name: str, issue_id: str, now: datetime
    ) -> tuple[bytes, dict[str, Any]]:
        document, front = _open(raw, file_name, issue_id)
        commented = append_comment(document, self.body, now, self.author)
        text = set_fields(commented, front, {"updated_at": now})
        _, comments = split_comments(split_document(text).body)
        return text.encode("utf-8"), {
            "identifier": identifier_of(file_name),
            "path": file_name,
            "commented": True,
            "comment_id": str(len(comments)),
            "updated_at": format_timestamp(now),
        }


@dataclass(frozen=True, slots=True)
class EditComment:
    """Replace the text of comment `number` (the daemon edits only what it signed)."""

    number: int
    body: str
    author: str = "symphony"

    def apply(
        self, raw: bytes, *, file_name: str, issue_id: str, now: datetime
    ) -> tuple[bytes, dict[str, Any]]:
        document, front = _open(raw, file_name, issue_id)
        _, comments = split_comments(document.body)
        if not 1 <= self.number <= len(comments) or comments[self.number - 1].author != (
            self.author
        ):
            raise NoSuchComment(f"{file_name} has no comment {self.number} by {self.author}")
        edited = replace_comment(document, self.number, self.body)
        assert edited is not None
        text = set_fields(edited, front, {"updated_at": now})
        return text.encode("utf-8"), {"path": file_name, "comment_id": str(self.number)}


class NoSuchComment(Exception):
    """The comment to edit is not there (any more), or someone else wrote it."""


@dataclass(frozen=True, slots=True)
class LinkPullRequest:
    """Name the ticket's pull request in its front matter (`pull_request: <url>`), replacing an
    earlier one. Only that line is written: `updated_at` stays, since the ticket's own content
    did not change, and the same URL again leaves the file untouched."""

    url: str

    def apply(
        self, raw: bytes, *, file_name: str, issue_id: str, now: datetime
    ) -> tuple[bytes, dict[str, Any]]:
        document, front = _open(raw, file_name, issue_id)
        output: dict[str, Any] = {
            "identifier": identifier_of(file_name),
            "path": file_name,
            PULL_REQUEST: self.url,
        }
        if front.get(PULL_REQUEST) == self.url:
            return raw, {**output, "changed": False}
        text = set_fields(document, front, {PULL_REQUEST: self.url})
        return text.encode("utf-8"), {**output, "changed": True}


ToolCall = MoveIssue | AddComment
Edit = ToolCall | EditComment | LinkPullRequest
"""Every edit the board makes to a ticket file, for an agent's tool call or for the daemon."""


def toolbox(known_states: str) -> generic.Toolbox:
    return generic.Toolbox(
        "local board",
        (
            generic.move_tool(
                MOVE_ISSUE,
                "Move the ticket you are working on to another state by rewriting the `state` "
                f"field of its file on the local board. States the workflow knows: {known_states}. "
                "Other names (for example a hand-off state such as 'Human Review') are written "
                "as given.",
                state_help="The new state name, on one line.",
                make=lambda values: MoveIssue(values["state"]),
            ),
            generic.comment_tool(
                ADD_COMMENT,
                "Add a Markdown comment to the ticket you are working on. It is appended, with "
                "a timestamp, under the '## Comments' heading of the ticket file.",
                max_chars=MAX_COMMENT_CHARS,
                make=_comment,
            ),
        ),
    )


def tool_specs(active_states: Sequence[str], terminal_states: Sequence[str]) -> list[ToolSpec]:
    return toolbox(", ".join([*active_states, *terminal_states]) or "none configured").specs()


def parse_call(name: str, arguments: Any) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    call: ToolCall | ToolResult = toolbox("").parse(name, arguments)
    return call


def _comment(values: dict[str, Any]) -> AddComment | ToolResult:
    if "\x00" in values["body"]:
        return invalid_arguments("'body' must not contain NUL characters")
    return AddComment(values["body"])


def _open(raw: bytes, file_name: str, issue_id: str) -> tuple[Document, dict[str, Any]]:
    document = split_document(decode(raw))
    front = load_front_matter(document.front)
    if ticket_id(front, identifier_of(file_name)) != issue_id:
        raise NotThisTicket(file_name)
    return document, front

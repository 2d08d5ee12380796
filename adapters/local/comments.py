"""Comments on a local ticket: the `## Comments` section at the end of the file's body.

A comment is a `### <UTC timestamp> (<author>)` heading followed by its text, up to the next such
heading or the end of the file. People write them by hand (`### 2026-12-01T10:00:00Z (ana)`),
agents' tool calls sign `(agent)` and the daemon signs `(symphony)`. Everything before the
section heading is the ticket's description. A `###` line that is not a comment heading is part
of the text around it, so nothing a person wrote is ever dropped.

Pure text functions: the board reads and edits files through `adapters.local.atomic`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

COMMENTS_HEADING = "## Comments"

_HEADING = re.compile(r"^### (?P<stamp>\S+) \((?P<author>[^()\r\n]+)\)[ \t]*$")


@dataclass(frozen=True, slots=True)
class LocalComment:
    """One comment; `number` counts from 1 in file order and is the comment's id."""

    number: int
    author: str
    written_at: datetime | None
    text: str


def escape_headings(text: str) -> str:
    """`text` as written into a ticket by a program (an agent's comment, a ticket it creates,
    the daemon's own): a line that would read as the comments' section or as a comment's
    heading is escaped (`\\### ...`, shown as written), so nobody can write a comment that
    the board shows as another person's."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        bare = line.rstrip("\r\n")
        if bare.rstrip() == COMMENTS_HEADING or _HEADING.match(bare):
            lines[index] = "\\" + line
    return "".join(lines)


def split_comments(body: str) -> tuple[str, tuple[LocalComment, ...]]:
    """The description (the body before `## Comments`) and the comments after it."""
    lines = body.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == COMMENTS_HEADING), None)
    if start is None:
        return body, ()
    comments: list[LocalComment] = []
    heading: re.Match[str] | None = None
    text: list[str] = []

    def close() -> None:
        if heading is not None:
            comments.append(
                LocalComment(
                    len(comments) + 1,
                    heading["author"].strip(),
                    _timestamp(heading["stamp"]),
                    "".join(text).strip(),
                )
            )

    for line in lines[start + 1 :]:
        match = _HEADING.match(line.rstrip("\r\n"))
        if match is not None:
            close()
            heading, text = match, []
        else:
            text.append(line)
    close()
    return "".join(lines[:start]), tuple(comments)


def comment_span(body: str, number: int) -> tuple[int, int] | None:
    """Where comment `number`'s text lies in `body` (after its heading line), or None."""
    lines = body.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == COMMENTS_HEADING), None)
    if start is None:
        return None
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    seen = 0
    text_start: int | None = None
    for index in range(start + 1, len(lines)):
        if _HEADING.match(lines[index].rstrip("\r\n")) is not None:
            if text_start is not None:
                return text_start, offsets[index]
            seen += 1
            if seen == number:
                text_start = offsets[index + 1]
    return (text_start, len(body)) if text_start is not None else None


def format_heading(when: datetime, author: str) -> str:
    return f"### {when.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')} ({author})"


def _timestamp(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)

"""Parse one ticket file of the local board: YAML front matter for the fields, the body as text.

A ticket file is `<IDENTIFIER>.md`: a `---` line, YAML front matter (a map), a closing `---`
line, then Markdown. Parsing is pure (bytes in, `Ticket` or `MalformedTicket` out) so the board can
cache results by content and the writers can reuse the same splitting rules.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import yaml

from symphony.base.issue import normalize_labels

from .comments import LocalComment, split_comments

TICKET_SUFFIX = ".md"
FENCE = "---"
_BOM = "\ufeff"

# libyaml parses several times faster; the pure-Python loader gives identical results.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class FrontMatterError(Exception):
    """The file has no usable front matter; `reason` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Document:
    """A ticket file cut at its fences; joining the parts gives back the exact text."""

    bom: str
    opening: str
    front_lines: tuple[str, ...]
    closing: str
    body: str

    @property
    def front(self) -> str:
        return "".join(self.front_lines)

    @property
    def newline(self) -> str:
        """The file's line ending, so inserted lines match the human's."""
        return "\r\n" if self.opening.endswith("\r\n") else "\n"

    def text(self) -> str:
        return self.bom + self.opening + self.front + self.closing + self.body


@dataclass(frozen=True, slots=True)
class Ticket:
    """The fields of a well-formed ticket file, before board-wide facts (blockers) are added."""

    file_name: str
    identifier: str
    id: str
    title: str
    state: str
    description: str | None
    priority: int | None
    labels: tuple[str, ...]
    blocked_by: tuple[str, ...]
    created_at: datetime | None
    updated_at: datetime | None
    branch_name: str | None
    assignee: str | None
    comments: tuple[LocalComment, ...] = ()
    author: str | None = None


@dataclass(frozen=True, slots=True)
class MalformedTicket:
    """A ticket file that cannot become an Issue.

    `id` is the dispatch id the file claims when that much could be read, else None: a refresh
    must not mistake such a file for a ticket that left the board.
    """

    file_name: str
    identifier: str
    id: str | None
    reason: str


def is_ticket_name(name: str) -> bool:
    # Hidden files are editor swap files and our own temp files, never tickets.
    return name.endswith(TICKET_SUFFIX) and len(name) > len(TICKET_SUFFIX) and name[0] != "."


def identifier_of(file_name: str) -> str:
    return file_name[: -len(TICKET_SUFFIX)]


def decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FrontMatterError("the file is not UTF-8 text") from None


def split_document(text: str) -> Document:
    bom = _BOM if text.startswith(_BOM) else ""
    lines = text[len(bom) :].splitlines(keepends=True)
    if not lines or not _is_fence(lines[0]):
        raise FrontMatterError("no front matter: the file must start with a '---' line")
    for index in range(1, len(lines)):
        if _is_fence(lines[index]):
            return Document(
                bom=bom,
                opening=lines[0],
                front_lines=tuple(lines[1:index]),
                closing=lines[index],
                body="".join(lines[index + 1 :]),
            )
    raise FrontMatterError("front matter starts with '---' but has no closing '---' line")


def load_front_matter(source: str) -> dict[str, Any]:
    try:
        data = yaml.load(source, Loader=_Loader)  # safe: plain data only
    except yaml.YAMLError as exc:
        raise FrontMatterError(f"front matter is not valid YAML ({_yaml_reason(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FrontMatterError(f"front matter must be a map of fields, got a {type(data).__name__}")
    return data


def ticket_id(front: Mapping[str, Any], identifier: str) -> str | None:
    """The dispatch id a front matter names, the identifier when it names none, else None."""
    value = front.get("id")
    if value is None or (isinstance(value, str) and not value.strip()):
        return identifier
    return front_text(value)


def parse_ticket(file_name: str, raw: bytes) -> Ticket | MalformedTicket:
    identifier = identifier_of(file_name)
    try:
        document = split_document(decode(raw))
        front = load_front_matter(document.front)
    except FrontMatterError as exc:
        return MalformedTicket(file_name, identifier, None, exc.reason)

    id_ = ticket_id(front, identifier)
    if id_ is None:
        return MalformedTicket(file_name, identifier, None, "id must be a non-empty string")
    title = front_text(front.get("title"))
    if title is None:
        return MalformedTicket(file_name, identifier, id_, "title is missing or empty")
    state = front_text(front.get("state"))
    if state is None:
        return MalformedTicket(file_name, identifier, id_, "state is missing or empty")
    state = sys.intern(state)  # a board's thousands of tickets share a few states

    priority = front.get("priority")
    # Comments reach prompts on their own (`comments`), not as part of the description.
    description, comments = split_comments(document.body)
    description = description.strip()
    return Ticket(
        file_name=file_name,
        identifier=identifier,
        id=id_,
        title=title,
        state=state,
        description=description or None,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        labels=normalize_labels(front.get("labels")),
        blocked_by=_identifiers(front.get("blocked_by")),
        created_at=parse_timestamp(front.get("created_at")),
        updated_at=parse_timestamp(front.get("updated_at")),
        branch_name=front_text(front.get("branch_name")),
        assignee=front_text(front.get("assignee")),
        comments=comments,
        author=front_text(front.get("author")),
    )


def parse_timestamp(value: object) -> datetime | None:
    """An aware UTC datetime from a YAML timestamp, a YAML date or an RFC 3339 string."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    else:
        return None
    # A time without an offset is taken as UTC rather than the daemon's local zone, so the same
    # board reads the same on every machine.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def front_text(value: object) -> str | None:
    """A front matter value as the text a person meant, or None (absent, blank, a yes/no, a
    list or map). YAML turns `title: 1984` into a number; a human meant the text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        value = str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _identifiers(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    seen: dict[str, None] = {}
    for item in value:
        text = front_text(item)
        if text is not None:
            seen.setdefault(text, None)
    return tuple(seen)


def _is_fence(line: str) -> bool:
    return line.rstrip() == FENCE


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or type(exc).__name__
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return str(problem)
    # +2: the mark counts from 0 inside the front matter, which starts on the file's line 2.
    return f"{problem}, line {mark.line + 2}"

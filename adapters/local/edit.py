"""Pure text edits of a ticket file that keep everything a human wrote.

Front matter keys are changed line by line: when the `key:` line holds a one-line scalar, only
that line is rewritten (its trailing comment kept); an absent key gets a new line. Every textual
edit is checked by parsing the result: when it does not read back as exactly the old map plus the
new values, or the line is not simple (a multi-line value, a quoted key, duplicate keys), the
front matter is re-dumped from the parsed map instead, which is correct but drops YAML comments
and formatting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml

from .comments import COMMENTS_HEADING, comment_span, escape_headings, format_heading
from .ticket import Document, FrontMatterError, load_front_matter

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _ReadableDumper(_Dumper):  # type: ignore[misc]
    """Writes a text of several lines as a literal block (`|`), as a person would."""


def _represent_text(dumper: Any, text: str) -> Any:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    )


_ReadableDumper.add_representer(str, _represent_text)


def set_fields(document: Document, front: Mapping[str, Any], updates: Mapping[str, Any]) -> str:
    """The file text with top-level front matter `updates` applied; `front` is its parsed map."""
    expected = {**front, **updates}
    lines = list(document.front_lines)
    textual = True
    for key, value in updates.items():
        pattern = re.compile(rf"^{re.escape(key)}[ \t]*:(?=[ \t\r\n]|$)")
        matches = [i for i, line in enumerate(lines) if pattern.match(line)]
        if not _is_scalar(value):
            # A list or map: its block replaces the key's lines (the key line and the indented
            # or `- ` lines under it), or is added at the end.
            block = dump_front_matter({key: value}).replace("\n", document.newline)
            if len(matches) == 1:
                end = matches[0] + 1
                while end < len(lines) and lines[end][:1] in (" ", "\t", "-"):
                    end += 1
                lines[matches[0] : end] = block.splitlines(keepends=True)
            elif not matches and key not in front:
                if lines and not lines[-1].endswith("\n"):
                    lines[-1] += document.newline
                lines.extend(block.splitlines(keepends=True))
            else:
                textual = False
                break
            continue
        rendered = render_scalar(value)
        replaced = _replace_value(lines[matches[0]], key, rendered) if len(matches) == 1 else None
        if replaced is not None:
            lines[matches[0]] = replaced
        elif not matches and key not in front:
            lines.append(f"{key}: {rendered}{document.newline}")
        else:
            textual = False
            break
    if textual:
        candidate = _with_front(document, lines)
        if _reads_as(candidate, expected):
            return candidate.text()
    return _redumped(document, expected).text()


def append_comment(
    document: Document, body: str, when: datetime, author: str = "agent"
) -> Document:
    """The document with a timestamped entry at the end, under one `## Comments` heading."""
    newline = document.newline
    text = newline.join(escape_headings(body.strip()).splitlines())
    existing = document.body.rstrip()
    blocks = [existing] if existing else [""]
    if not any(line.rstrip() == COMMENTS_HEADING for line in existing.splitlines()):
        blocks.append(COMMENTS_HEADING)
    blocks.append(format_heading(when, author))
    blocks.append(text)
    new_body = (newline * 2).join(blocks) + newline
    if not existing:
        # No description: a single blank line after the fence rather than two.
        new_body = new_body[len(newline) :]
    closing = document.closing if document.closing.endswith("\n") else document.closing + newline
    return Document(document.bom, document.opening, document.front_lines, closing, new_body)


def replace_comment(document: Document, number: int, body: str) -> Document | None:
    """The document with comment `number`'s text replaced (heading kept); None if it has none."""
    span = comment_span(document.body, number)
    if span is None:
        return None
    start, end = span
    newline = document.newline
    text = newline + newline.join(escape_headings(body.strip()).splitlines()) + newline
    following = document.body[end:]
    new_body = document.body[:start] + text + (newline if following else "") + following
    return Document(
        document.bom, document.opening, document.front_lines, document.closing, new_body
    )


def render_scalar(value: Any) -> str:
    """A one-line YAML scalar that reads back as `value`."""
    if isinstance(value, datetime):
        return format_timestamp(value)
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, str):
        # Plain style when YAML reads it back unchanged (most state names); otherwise a JSON
        # string, which is a valid YAML double-quoted scalar.
        if value == value.strip() and _reads_as_plain(value):
            return value
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot render {type(value).__name__} as a front matter value")


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool | int | datetime)


def format_timestamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _replace_value(line: str, key: str, rendered: str) -> str | None:
    """The `key:` line with a new value and the old trailing comment; None if it is not simple."""
    ending = line[len(line.rstrip("\r\n")) :]
    content = line[: len(line) - len(ending)]
    comment = _trailing_comment(content[content.index(":") + 1 :])
    if comment is None:
        return None
    return f"{key}: {rendered}{comment}{ending}"


def _trailing_comment(value: str) -> str | None:
    """The ` # comment` after a one-line scalar ('' if none); None for anything more complex."""
    stripped = value.lstrip(" \t")
    if not stripped:
        return ""
    first = stripped[0]
    if first == "#":
        return " " + stripped
    if first in "[{|>&*!%@`" or (first in "-?:" and stripped[1:2] in ("", " ", "\t")):
        return None  # a collection, block scalar, anchor, alias or tag: not a one-line scalar
    if first in "\"'":
        end = _closing_quote(stripped)
        if end is None:
            return None  # the quoted value continues on the next line
        rest = stripped[end + 1 :]
        if not rest.strip():
            return ""
        return rest if re.fullmatch(r"[ \t]+#.*", rest) else None
    # In a plain scalar, whitespace followed by `#` is where the comment starts.
    found = re.search(r"[ \t]+#", stripped)
    return stripped[found.start() :] if found else ""


def _closing_quote(value: str) -> int | None:
    quote = value[0]
    index = 1
    while index < len(value):
        char = value[index]
        if quote == '"' and char == "\\":
            index += 2
            continue
        if char == quote:
            if quote == "'" and value[index + 1 : index + 2] == "'":
                index += 2  # '' is an escaped quote inside single quotes
                continue
            return index
        index += 1
    return None


def _with_front(document: Document, lines: list[str]) -> Document:
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += document.newline
    return Document(document.bom, document.opening, tuple(lines), document.closing, document.body)


def _reads_as(document: Document, expected: Mapping[str, Any]) -> bool:
    try:
        return load_front_matter(document.front) == expected
    except FrontMatterError:
        return False


def _reads_as_plain(value: str) -> bool:
    if not value or "\n" in value or "\r" in value:
        return False
    try:
        return bool(yaml.safe_load(f"k: {value}") == {"k": value})
    except yaml.YAMLError:
        return False


def dump_front_matter(front: Mapping[str, Any]) -> str:
    """YAML for a front matter map, keys in the given order, one line per scalar."""
    text: str = yaml.dump(
        dict(front),
        Dumper=_ReadableDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1_000_000,
    )
    return text


def _redumped(document: Document, front: Mapping[str, Any]) -> Document:
    dumped = dump_front_matter(front)
    if document.newline != "\n":
        dumped = dumped.replace("\n", document.newline)
    return Document(
        document.bom,
        document.opening,
        tuple(dumped.splitlines(keepends=True)),
        document.closing,
        document.body,
    )

"""Turning provider values into the normalized Issue's field types."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from .errors import Malformed


def parse_timestamp(value: Any) -> datetime | None:
    """An aware instant from an RFC 3339 string (or a datetime/date); None when unusable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def as_int(value: Any) -> int | None:
    """An integer, or None (booleans and non-integral floats are not integers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def numbered_record(item: Any, number_key: str, flags: tuple[str, str]) -> tuple[int, str, str]:
    """(number, title, flag) of an issue record that is numbered within its repository or
    project, or `Malformed`: an object with a positive `number_key`, a title, and a `state`
    that is one of `flags` (open, closed)."""
    if not isinstance(item, Mapping):
        raise Malformed("issue record is not an object")
    number = as_int(item.get(number_key))
    if number is None or number < 1:
        raise Malformed(f"issue has no {number_key}")
    title = item.get("title")
    if not isinstance(title, str) or not title.strip():
        raise Malformed(f"issue #{number} has no title")
    flag = item.get("state")
    if flag not in flags:
        raise Malformed(f"issue #{number} has no {'/'.join(flags)} state")
    return number, title, flag

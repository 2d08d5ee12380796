"""A person's review as GitLab takes it: the overall note (`POST .../merge_requests/:iid/notes`),
then one diff discussion per line comment (`POST .../discussions` with a text `position` on the
merge request's `diff_refs`: `new_line` for the head's side, `old_line` for a removed line).
A range is placed on its last line and spans from its first with `line_range` (`start`, `end`:
each a `line_code`, `type` `new` or `old` and the line on that side)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from symphony.codehost.contract import (
    CODE_HOST_RESPONSE,
    CodeHostError,
    DiffSide,
    LineComment,
)

from .._support.normalize import text_or_none

MAX_NOTE_CHARS = 1_000_000


def diff_refs(record: Mapping[str, Any], number: int) -> dict[str, str]:
    refs = record.get("diff_refs")
    found = {
        key: text_or_none(refs.get(key)) if isinstance(refs, Mapping) else None
        for key in ("base_sha", "start_sha", "head_sha")
    }
    if any(value is None for value in found.values()):
        raise CodeHostError(CODE_HOST_RESPONSE, f"GitLab's !{number} has no diff_refs")
    return {key: str(value) for key, value in found.items()}


def discussion_request(comment: LineComment, refs: Mapping[str, str]) -> dict[str, Any]:
    line = "old_line" if comment.side is DiffSide.LEFT else "new_line"
    position: dict[str, Any] = {
        "position_type": "text",
        **refs,
        "old_path": comment.path,
        "new_path": comment.path,
        line: comment.line,
    }
    if comment.start_line is not None and comment.start_line < comment.line:
        position["line_range"] = {
            "start": _range_end(comment, comment.start_line),
            "end": _range_end(comment, comment.line),
        }
    return {"body": comment.body[:MAX_NOTE_CHARS], "position": position}


def _range_end(comment: LineComment, number: int) -> dict[str, Any]:
    """One end of a range as GitLab takes it: `line_code` is `<sha1 of the path>_<old>_<new>`,
    `type` the side whose number counts. The other side's number is only in the diff, which
    the review does not carry; the same number stands for it (GitLab places the range by
    `type` and the line on that side)."""
    old = comment.side is DiffSide.LEFT
    return {
        "line_code": f"{hashlib.sha1(comment.path.encode()).hexdigest()}_{number}_{number}",
        "type": "old" if old else "new",
        "old_line" if old else "new_line": number,
    }


def discussion_id(answer: Any) -> str:
    found = text_or_none(answer.get("id")) if isinstance(answer, Mapping) else None
    if found is None:
        raise CodeHostError(CODE_HOST_RESPONSE, "GitLab's discussion has no id")
    return found

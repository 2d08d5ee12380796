"""A person's review as GitLab takes it: the overall note (`POST .../merge_requests/:iid/notes`),
then one diff discussion per line comment (`POST .../discussions` with a text `position` on the
merge request's `diff_refs`: `new_line` for the head's side, `old_line` for a removed line).
A range is placed on its last line and says its first one in words."""

from __future__ import annotations

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
    position = {
        "position_type": "text",
        **refs,
        "old_path": comment.path,
        "new_path": comment.path,
        line: comment.line,
    }
    body = comment.body
    if comment.start_line is not None and comment.start_line < comment.line:
        body = f"Lines {comment.start_line} to {comment.line}: {body}"
    return {"body": body[:MAX_NOTE_CHARS], "position": position}


def discussion_id(answer: Any) -> str:
    found = text_or_none(answer.get("id")) if isinstance(answer, Mapping) else None
    if found is None:
        raise CodeHostError(CODE_HOST_RESPONSE, "GitLab's discussion has no id")
    return found

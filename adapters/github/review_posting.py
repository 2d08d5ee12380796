"""A person's review as GitHub's REST API takes it: `POST /repos/{o}/{r}/pulls/{n}/reviews`
with the overall note, the verdict and every line comment at once (`comments[]` with `path`,
`line`, `side` and, for a range, `start_line` and `start_side`), then the review's comments
(`GET .../reviews/{id}/comments`) for their ids, which `POST .../comments/{id}/replies` takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony.codehost.contract import (
    CODE_HOST_RESPONSE,
    CodeHostError,
    LineComment,
    ReviewDraft,
    ReviewVerdict,
)

from .._support.normalize import as_int

MAX_BODY_CHARS = 65_536
EVENTS = {ReviewVerdict.REQUEST_CHANGES: "REQUEST_CHANGES", ReviewVerdict.COMMENT: "COMMENT"}


def review_request(review: ReviewDraft, event: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "body": review.body[:MAX_BODY_CHARS],
        "event": event,
        "comments": [_comment(c) for c in review.comments],
    }
    if review.head_sha:
        body["commit_id"] = review.head_sha
    return body


def _comment(comment: LineComment) -> dict[str, Any]:
    side = comment.side.value.upper()
    found: dict[str, Any] = {
        "path": comment.path,
        "body": comment.body[:MAX_BODY_CHARS],
        "line": comment.line,
        "side": side,
    }
    if comment.start_line is not None and comment.start_line < comment.line:
        found |= {"start_line": comment.start_line, "start_side": side}
    return found


def review_id(answer: Any) -> int:
    review = as_int(answer.get("id")) if isinstance(answer, Mapping) else None
    if review is None:
        raise CodeHostError(CODE_HOST_RESPONSE, "GitHub's review has no id")
    return review


def thread_ids(comments: Sequence[LineComment], posted: Any) -> tuple[str, ...]:
    """Each comment's REST id, matched to what was sent by path and line (GitHub lists a
    review's comments in the order they were given; a comment it did not list is an error)."""
    listed = [c for c in posted if isinstance(c, Mapping)] if isinstance(posted, list) else []
    found: list[str] = []
    for comment in comments:
        match = next(
            (
                item
                for item in listed
                if item.get("path") == comment.path
                and as_int(item.get("line") or item.get("original_line")) == comment.line
            ),
            None,
        )
        number = as_int(match.get("id")) if match is not None else None
        if match is None or number is None:
            raise CodeHostError(
                CODE_HOST_RESPONSE,
                f"GitHub's review lacks the comment on {comment.path} line {comment.line}",
            )
        listed.remove(match)
        found.append(str(number))
    return tuple(found)

"""A person's line comments from the review page: checked, and written for the rework run.

`line_comments` reads what the page sends (`[{path, line, side, start_line, body}]`) into
`LineComment`s, or refuses it. `review_text` is what the next run of the ticket gets as
`{{ review }}`: the person's note, then each comment with its file, its line (or range) and the
code round it, numbered, the commented lines marked. Pure: the code is read by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from symphony.base.pulls import DiffSide, LineComment
from symphony.core.review_actions import MAX_COMMENT_CHARS, Refusal

MAX_LINE_COMMENTS = 50
MAX_REVIEW_TEXT_CHARS = 60_000


def line_comments(raw: object) -> tuple[LineComment, ...] | Refusal:
    """The comments `raw` names (None or an empty list: none), or why they cannot be taken."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_LINE_COMMENTS:
        return Refusal("comments_invalid", f"comments is a list of at most {MAX_LINE_COMMENTS}")
    found = []
    for index, entry in enumerate(raw, 1):
        comment = _comment(entry)
        if comment is None:
            return Refusal(
                "comments_invalid",
                f"comment {index} needs a path, a line (and a start_line not after it), "
                "a side (left or right) and words",
            )
        found.append(comment)
    return tuple(found)


def _comment(entry: object) -> LineComment | None:
    if not isinstance(entry, Mapping):
        return None
    path, line, body = entry.get("path"), entry.get("line"), entry.get("body")
    start, side = entry.get("start_line"), entry.get("side", "right")
    if not isinstance(path, str) or not path.strip() or "\n" in path or len(path) > 1000:
        return None
    if not isinstance(line, int) or not _number(line):
        return None
    if start is not None and not (isinstance(start, int) and _number(start) and start <= line):
        return None
    if not isinstance(body, str) or not body.strip() or len(body) > MAX_COMMENT_CHARS:
        return None
    if side not in ("left", "right"):
        return None
    first = start if isinstance(start, int) and start < line else None
    return LineComment(path, line, body.strip(), DiffSide(side), first)


def _number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10_000_000


def where(comment: LineComment) -> str:
    """`app.py, line 12`, `app.py, lines 10 to 12`, `(removed)` for the base's side."""
    lines = (
        f"lines {comment.start_line} to {comment.line}"
        if comment.start_line is not None
        else f"line {comment.line}"
    )
    removed = " (removed lines, numbered as in the base)" if comment.side is DiffSide.LEFT else ""
    return f"{comment.path}, {lines}{removed}"


def review_text(
    by: str, note: str, comments: Sequence[LineComment], code: Sequence[str], url: str | None
) -> str:
    """The request as a run reads it; `code[i]` is the code round `comments[i]` (may be "")."""
    head = f"{by} requested changes"
    lines = [head + (f" on pull request {url}:" if url else ":")]
    if note.strip():
        lines += ["", note.strip()]
    for number, (comment, around) in enumerate(zip(comments, code, strict=True), 1):
        lines += ["", f"Comment {number}: {where(comment)}"]
        if around:
            lines += ["```", around, "```"]
        lines.append(comment.body)
    lines += [
        "",
        "Address each comment in the branch and commit, then report done with a summary that "
        "says what you changed for each: the daemon pushes and answers every comment's thread "
        "with that summary.",
    ]
    text = "\n".join(lines)
    return text if len(text) <= MAX_REVIEW_TEXT_CHARS else text[: MAX_REVIEW_TEXT_CHARS - 1] + "…"

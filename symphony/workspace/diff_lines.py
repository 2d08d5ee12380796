"""A file's unified diff as a reviewer reads it: numbered rows, git's header lines left out.

`diff_rows` turns one file's patch (as `branch_diff` reads it) into rows `{"k", "o", "n", "t"}`:
the kind (`hunk`, `ctx`, `add`, `del`, `note` for git's "\\ No newline at end of file"), the
line's number in the base (`o`) and in the head (`n`), None where it has none, and its text
without the leading marker. `diff --git`, `index`, mode, rename, `---` and `+++` lines are the
file's header: its path and status are shown apart, so they are dropped.

`code_around` is the few lines round a commented line or range, numbered, the commented ones
marked: what a rework run is given with each of a person's line comments.
"""

from __future__ import annotations

import re
from typing import Any

HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
AROUND = 3
"""Lines of code given before and after a comment's lines."""


def diff_rows(patch: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    old = new = 0
    in_hunk = False
    for line in patch.split("\n"):
        found = HUNK.match(line)
        if found is not None:
            in_hunk = True
            old, new = int(found.group(1)), int(found.group(2))
            rows.append({"k": "hunk", "o": None, "n": None, "t": line})
        elif not in_hunk:
            continue  # the file's header
        elif line.startswith("+"):
            rows.append({"k": "add", "o": None, "n": new, "t": line[1:]})
            new += 1
        elif line.startswith("-"):
            rows.append({"k": "del", "o": old, "n": None, "t": line[1:]})
            old += 1
        elif line.startswith("\\"):
            rows.append({"k": "note", "o": None, "n": None, "t": line[2:]})
        elif line.startswith(" "):  # git marks an empty line of context with its space
            rows.append({"k": "ctx", "o": old, "n": new, "t": line[1:]})
            old, new = old + 1, new + 1
    return rows


def code_around(
    patch: str, line: int, *, left: bool = False, start: int | None = None, around: int = AROUND
) -> str:
    """The rows round lines `start`..`line` of one side (the head's; the base's when `left`),
    each `  12 | code`, the commented ones `> 12 | code`; empty when the patch lacks them."""
    first = start if start is not None and start <= line else line
    key = "o" if left else "n"
    rows = [r for r in diff_rows(patch) if r[key] is not None]  # that side's lines only
    at = [i for i, r in enumerate(rows) if first <= r[key] <= line]
    if not at:
        return ""
    shown = rows[max(at[0] - around, 0) : at[-1] + around + 1]
    width = len(str(shown[-1][key]))
    out = []
    for row in shown:
        mark = ">" if first <= row[key] <= line else " "
        sign = {"add": "+", "del": "-"}.get(row["k"], " ")
        out.append(f"{mark} {row[key]:>{width}} {sign}| {row['t']}")
    return "\n".join(out)

"""A file's patch as numbered rows, git's header gone; and the code round a commented line."""

from __future__ import annotations

from symphony.workspace.diff_lines import code_around, diff_rows

PATCH = (
    """diff --git a/app/calc.py b/app/calc.py
index 3b18e51..a9c2f00 100644
--- a/app/calc.py
+++ b/app/calc.py
@@ -1,4 +1,5 @@
 def add(a, b):
-    return a+b
+    return a + b
+
"""
    + " "  # an empty line of context: git's space alone
    + """
 def sub(a, b):
@@ -10,2 +11,3 @@ def mul(a, b):
     x = 1
+    y = 2
     return x
\\ No newline at end of file
"""
)


def test_rows_are_numbered_on_both_sides_and_the_header_is_dropped() -> None:
    rows = diff_rows(PATCH)
    texts = [r["t"] for r in rows]
    assert not any(t.startswith(("diff --git", "index ", "--- a/", "+++ b/")) for t in texts)
    assert [(r["k"], r["o"], r["n"]) for r in rows] == [
        ("hunk", None, None),
        ("ctx", 1, 1),
        ("del", 2, None),
        ("add", None, 2),
        ("add", None, 3),
        ("ctx", 3, 4),  # an empty line of context keeps its numbers
        ("ctx", 4, 5),
        ("hunk", None, None),
        ("ctx", 10, 11),
        ("add", None, 12),
        ("ctx", 11, 13),
        ("note", None, None),
    ]
    assert rows[3]["t"] == "    return a + b" and rows[5]["t"] == ""
    assert rows[-1]["t"] == "No newline at end of file"


def test_a_file_header_alone_has_no_rows() -> None:
    assert diff_rows("diff --git a/x b/x\nnew file mode 100644\nindex 0000000..e69de29\n") == []


def test_the_code_round_a_commented_range_is_numbered_with_the_lines_marked() -> None:
    around = code_around(PATCH, 3, start=2, around=1)
    assert around.splitlines() == [
        "  1  | def add(a, b):",
        "> 2 +|     return a + b",
        "> 3 +| ",
        "  4  | ",
    ]
    left = code_around(PATCH, 2, left=True, around=0)
    assert left.splitlines() == ["> 2 -|     return a+b"]
    assert code_around(PATCH, 40) == ""

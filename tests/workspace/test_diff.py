"""A branch's changes file by file for the review page (`symphony.workspace.diff`), read from a
real git repository."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from symphony.workspace.diff import MAX_PATCH_LINES, branch_diff

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(path), *args], check=True, env=ENV, capture_output=True)


def repository(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "old_name.py").write_text("x = 1\n")
    (path / "gone.txt").write_text("bye\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    git(path, "checkout", "-q", "-b", "symphony/A-1")
    return path


async def test_each_file_has_its_status_counts_and_patch(tmp_path: Path) -> None:
    path = repository(tmp_path)
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                  "    return a - b\n")  # fmt: skip
    (path / "new.py").write_text("print('hi')\n")
    (path / "gone.txt").unlink()
    git(path, "mv", "old_name.py", "new_name.py")
    (path / "package-lock.json").write_text('{"lockfileVersion": 3}\n')
    (path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    (path / "big.txt").write_text("".join(f"line {n}\n" for n in range(MAX_PATCH_LINES + 10)))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "work")
    diff = await branch_diff(path, "main", ENV)
    assert diff is not None
    files = {f.path: f for f in diff.files}
    calc = files["calc.py"]
    assert (calc.status, calc.added, calc.removed) == ("modified", 4, 0)
    assert calc.patch is not None and "+def sub(a, b):" in calc.patch
    assert calc.patch.startswith("diff --git a/calc.py b/calc.py")
    assert files["new.py"].status == "added" and files["gone.txt"].status == "deleted"
    renamed = files["new_name.py"]
    assert renamed.status == "renamed" and renamed.old_path == "old_name.py"
    assert files["package-lock.json"].collapsed == "generated"
    assert files["package-lock.json"].patch is None
    assert files["logo.png"].collapsed == "binary" and files["logo.png"].added is None
    assert files["big.txt"].collapsed == "large" and files["big.txt"].added == MAX_PATCH_LINES + 10
    body = diff.to_json()
    assert body["added"] == sum(f.added or 0 for f in diff.files) and body["more_files"] == 0


async def test_no_diff_outside_a_work_tree_or_for_an_unknown_base(tmp_path: Path) -> None:
    path = repository(tmp_path)
    assert await branch_diff(path, "no-such-branch", ENV) is None
    assert await branch_diff(tmp_path, "main", ENV) is None
    empty = await branch_diff(path, "main", ENV)
    assert empty is not None and empty.files == ()

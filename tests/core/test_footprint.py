"""The files a ticket touches: named in its text, changed in its git workspace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from symphony.core.footprint import files_named, normalize_path, overlap
from symphony.workspace.facts import changed_files


def test_plans_name_files_but_not_urls_versions_folders_or_paths_outside() -> None:
    plan = (
        "1. Change `src/app.py` and README.md (see https://example.com/docs/setup.py).\n"
        "2. Bump to 1.2.3, e.g. in scripts/test and ./lib//util.ts; keep notes in NOTES/.\n"
        "3. Never touch ../secrets.env or /etc/hosts.py. Also .github/workflows/ci.yml."
    )
    assert files_named(plan) == {
        "src/app.py",
        "README.md",
        "scripts/test",
        "lib/util.ts",
        ".github/workflows/ci.yml",
    }
    assert files_named(None) == frozenset() and files_named("") == frozenset()


def test_paths_are_normalized_and_a_folder_overlaps_the_files_in_it() -> None:
    assert normalize_path("./a//b.py") == "a/b.py"
    assert normalize_path("../x.py") == "" and normalize_path("/abs.py") == ""
    assert overlap({"src/app.py", "a.md"}, {"src"}) == {"src/app.py"}
    assert overlap({"src"}, {"src/app.py"}) == {"src/app.py"}
    assert overlap({"a.py"}, {"b.py"}) == frozenset()
    assert overlap({"srcx/app.py"}, {"src"}) == frozenset()


async def test_a_workspace_s_changes_are_its_commits_since_the_base_and_what_is_uncommitted(
    tmp_path: Path,
) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@x", *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    for name in ("a.py", "b.py", "old.py"):
        (tmp_path / name).write_text("x\n")
    git("add", "-A")
    git("commit", "-q", "-m", "start")
    base = git("rev-parse", "HEAD")
    (tmp_path / "a.py").write_text("y\n")
    git("commit", "-q", "-am", "change a")
    (tmp_path / "b.py").write_text("y\n")  # changed, not committed
    git("mv", "old.py", "new.py")  # renamed: the new name counts
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "c.py").write_text("new\n")  # untracked
    (tmp_path / ".symphony").mkdir()
    (tmp_path / ".symphony" / "evidence.json").write_text("{}")  # the daemon's own
    env = dict(os.environ)
    assert await changed_files(tmp_path, base, env) == {"a.py", "b.py", "new.py", "dir/c.py"}
    assert await changed_files(tmp_path, None, env) == {"b.py", "new.py", "dir/c.py"}
    # A folder inside the repository (a workspace of the `empty` strategy under a project's
    # checkout) is not that repository: it has no changes of its own.
    plain = tmp_path / "workspaces" / "A-1"
    plain.mkdir(parents=True)
    (plain / "notes.txt").write_text("x\n")
    assert await changed_files(plain, base, env) == frozenset()
    assert await changed_files(tmp_path / "missing", base, env) == frozenset()

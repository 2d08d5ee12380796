"""What the workspace tests share: a small real git repository to cut worktrees from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workspace.test_worktrees import git


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    return repo

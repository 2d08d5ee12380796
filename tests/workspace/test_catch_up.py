"""A run starts from the target branch as it is now, on real git repositories: a worktree with
no commits of its own moves to the freshly fetched target, one with commits gets the target
merged in, a conflicting merge is undone and described with both sides, uncommitted work is
never touched, and the evidence then starts from the target commit."""

from __future__ import annotations

from pathlib import Path

from symphony.workspace.local import WorkspaceManager
from tests.workspace.test_worktrees import git, manager


def advance(repository: Path, text: str, name: str = "app.py") -> str:
    """Someone merges onto main meanwhile: the target moves."""
    (repository / name).write_text(text)
    git(repository, "commit", "-q", "-am", f"main: {text.strip()}")
    return git(repository, "rev-parse", "HEAD")


async def prepared(workspaces: WorkspaceManager, identifier: str = "ABC-1") -> Path:
    return (await workspaces.prepare(identifier)).path


async def test_a_worktree_without_own_commits_starts_again_from_the_current_target(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    path = await prepared(workspaces)  # planned (read-only): no commits of its own
    target = advance(repository, "x = 2\n")
    again = await workspaces.prepare("ABC-1")
    assert git(path, "rev-parse", "HEAD") == target == again.base
    assert (path / "app.py").read_text() == "x = 2\n"
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "symphony/ABC-1"
    assert again.note is None


async def test_a_worktree_with_commits_gets_the_target_merged_in(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    path = await prepared(workspaces)
    (path / "other.py").write_text("y = 1\n")
    git(path, "add", "other.py")
    git(path, "commit", "-q", "-m", "own work")
    own = git(path, "rev-parse", "HEAD")
    target = advance(repository, "x = 2\n")
    again = await workspaces.prepare("ABC-1")
    assert again.base == target and again.note is None
    parents = git(path, "rev-list", "--parents", "-n", "1", "HEAD").split()[1:]
    assert parents == [own, target]  # a merge commit: nothing of the agent's is rewritten
    assert (path / "app.py").read_text() == "x = 2\n" and (path / "other.py").exists()
    # The evidence's diff from the base holds the ticket's own change only.
    assert git(path, "diff", "--name-only", f"{again.base}..HEAD") == "other.py"


async def test_a_conflict_with_the_target_is_undone_and_told_to_the_run(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    path = await prepared(workspaces)
    (path / "app.py").write_text("x = 'mine'\n")
    git(path, "commit", "-q", "-am", "own work")
    own = git(path, "rev-parse", "HEAD")
    advance(repository, "x = 'theirs'\n")
    again = await workspaces.prepare("ABC-1")
    assert git(path, "rev-parse", "HEAD") == own  # nothing half-merged is left
    assert git(path, "status", "--porcelain") == ""
    note = again.note
    assert note is not None
    assert "no longer merges onto `origin/main`: `app.py` conflict" in note
    assert "x = 'mine'" in note and "x = 'theirs'" in note


async def test_uncommitted_work_is_left_alone(tmp_path: Path, repository: Path) -> None:
    workspaces = manager(tmp_path, repository)
    path = await prepared(workspaces)
    start = git(path, "rev-parse", "HEAD")
    (path / "app.py").write_text("x = 'in progress'\n")
    advance(repository, "x = 2\n")
    again = await workspaces.prepare("ABC-1")
    assert git(path, "rev-parse", "HEAD") == start == again.base
    assert (path / "app.py").read_text() == "x = 'in progress'\n"


def commit(path: Path, name: str, text: str, message: str) -> str:
    """The agent writes `name` in its worktree and commits it; the new head."""
    (path / name).write_text(text)
    git(path, "add", name)
    git(path, "commit", "-q", "-m", message)
    return git(path, "rev-parse", "HEAD")


def publish(path: Path, repository: Path) -> str:
    """The daemon's push of the worktree's branch to the repository."""
    git(path, "push", "-q", str(repository), "HEAD:refs/heads/symphony/ABC-1")
    return git(path, "rev-parse", "HEAD")


def a_person_pushes(tmp_path: Path, repository: Path, name: str, text: str) -> str:
    clone = tmp_path / "person"
    if not clone.exists():
        git(tmp_path, "clone", "-q", str(repository), str(clone))
    git(clone, "fetch", "-q", "origin")
    git(clone, "checkout", "-q", "-B", "symphony/ABC-1", "origin/symphony/ABC-1")
    theirs = commit(clone, name, text, f"person: {name}")
    git(clone, "push", "-q", "origin", "symphony/ABC-1")
    return theirs


async def test_a_persons_push_is_where_the_next_run_starts(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    path = await prepared(workspaces)
    commit(path, "app.py", "x = 'agent'\n", "agent's work")
    publish(path, repository)
    theirs = a_person_pushes(tmp_path, repository, "person.py", "p = 1\n")
    again = await workspaces.prepare("ABC-1")
    assert git(path, "rev-parse", "HEAD") == theirs
    assert again.note is not None
    assert again.note.startswith("Someone pushed to `symphony/ABC-1`: this run starts from")
    assert theirs[:7] in again.note and "person: person.py" in again.note


async def test_unpublished_commits_are_replayed_on_a_persons_push_or_the_conflict_is_told(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    path = await prepared(workspaces)
    commit(path, "app.py", "x = 'agent'\n", "agent's work")
    publish(path, repository)
    commit(path, "agent.py", "a = 1\n", "agent: not pushed yet")
    theirs = a_person_pushes(tmp_path, repository, "person.py", "p = 1\n")
    again = await workspaces.prepare("ABC-1")
    assert git(path, "rev-parse", "HEAD~1") == theirs  # ours on top of theirs, nothing lost
    assert (path / "agent.py").exists() and (path / "person.py").exists()
    assert again.note is not None and "were replayed on top of it" in again.note
    # Now ours and theirs change the same line: nothing is rewritten, the run is told.
    ours = commit(path, "app.py", "x = 'agent again'\n", "agent: the same line")
    a_person_pushes(tmp_path, repository, "app.py", "x = 'person'\n")
    conflicted = await workspaces.prepare("ABC-1")
    assert git(path, "rev-parse", "HEAD") == ours and git(path, "status", "--porcelain") == ""
    assert conflicted.note is not None
    assert "conflict with it: merge `origin/symphony/ABC-1` into the branch" in conflicted.note

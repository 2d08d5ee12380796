"""`workspace.strategy: worktree` on real git repositories: a worktree and branch per ticket
from one mirror, made concurrently without hooks, removed with the branch kept, a half-made one
made again (also after a real `kill -9` of the daemon mid-checkout), branch names from the
tracker or the template, and the settings' errors."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sections import HooksSettings, WorktreeSettings
from symphony.workspace.git import slugify
from symphony.workspace.local import WorkspaceManager
from symphony.workspace.worktrees import MIRROR_NAME
from tests.cli_runner import Cli


def git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def manager(tmp_path: Path, repository: Path, **settings: str) -> WorkspaceManager:
    return WorkspaceManager(
        tmp_path / "ws",
        HooksSettings(),
        env={"PATH": "/usr/bin:/bin"},
        worktrees=WorktreeSettings(str(repository), **settings),  # type: ignore[arg-type]
    )


async def test_tickets_get_worktrees_on_their_own_branches_concurrently(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    first, second = await asyncio.gather(workspaces.prepare("ABC-1"), workspaces.prepare("ABC 2/x"))
    start = git(repository, "rev-parse", "HEAD")
    for workspace, branch in ((first, "symphony/ABC-1"), (second, "symphony/ABC-2-x")):
        assert workspace.created_now and (workspace.path / "app.py").read_text() == "x = 1\n"
        assert git(workspace.path, "rev-parse", "--abbrev-ref", "HEAD") == branch
        assert git(workspace.path, "rev-parse", "HEAD") == start == workspace.base
    again = await workspaces.prepare("ABC-1")
    assert not again.created_now and again.base == start


async def test_a_removed_worktree_keeps_its_branch_and_a_rework_continues_it(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    workspace = await workspaces.prepare("ABC-1")
    (workspace.path / "app.py").write_text("x = 2\n")
    git(workspace.path, "commit", "-q", "-am", "work")
    work = git(workspace.path, "rev-parse", "HEAD")
    assert await workspaces.remove("ABC-1")
    assert not workspace.path.exists()
    mirror = tmp_path / "ws" / MIRROR_NAME
    assert git(mirror, "rev-parse", "refs/heads/symphony/ABC-1") == work  # the branch stays
    assert "ABC-1" not in git(mirror, "worktree", "list")
    back = await workspaces.prepare("ABC-1")
    assert (back.path / "app.py").read_text() == "x = 2\n"  # checked out as it was left


async def test_a_half_made_worktree_is_removed_and_made_again(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    path = workspaces.path_for("ABC-1")
    (tmp_path / "ws").mkdir()
    assert workspaces._claim("ABC-1", path)  # created and marked; then git was cut short
    mirror = tmp_path / "ws" / MIRROR_NAME
    (path / ".git").write_text(f"gitdir: {mirror}/worktrees/ABC-1\n")
    (path / "partial").write_text("cut short")
    workspace = await workspaces.prepare("ABC-1")
    assert workspace.created_now and (workspace.path / "app.py").exists()
    assert not (workspace.path / "partial").exists()
    assert git(workspace.path, "rev-parse", "--abbrev-ref", "HEAD") == "symphony/ABC-1"


async def test_a_workspace_made_before_worktrees_were_switched_on_is_kept(
    tmp_path: Path, repository: Path
) -> None:
    before = WorkspaceManager(tmp_path / "ws", HooksSettings(), env={"PATH": "/usr/bin:/bin"})
    old = await before.prepare("ABC-1")
    (old.path / "work.txt").write_text("an agent's work")
    workspace = await manager(tmp_path, repository).prepare("ABC-1")
    assert not workspace.created_now
    assert (workspace.path / "work.txt").read_text() == "an agent's work"


async def test_the_trackers_branch_name_wins_and_a_bad_one_falls_back(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository, branch="feature/{{ issue.identifier | slugify }}")
    named = await workspaces.prepare("ABC-1", branch="eng-1-add-subtract")
    assert git(named.path, "rev-parse", "--abbrev-ref", "HEAD") == "eng-1-add-subtract"
    templated = await workspaces.prepare("ABC-2")
    assert git(templated.path, "rev-parse", "--abbrev-ref", "HEAD") == "feature/ABC-2"
    odd = await workspaces.prepare("ABC-3", branch="bad..name")
    assert git(odd.path, "rev-parse", "--abbrev-ref", "HEAD") == "symphony/ABC-3"


async def test_a_workspace_someone_else_made_is_never_turned_into_a_worktree(
    tmp_path: Path, repository: Path
) -> None:
    workspaces = manager(tmp_path, repository)
    mine = tmp_path / "ws" / "ABC-1"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match=r"workspace_not_owned|not create"):
        await workspaces.prepare("ABC-1")
    assert (mine / "notes.txt").read_text() == "mine"


def test_slugify_keeps_what_a_branch_name_may_hold() -> None:
    assert slugify("owner/name#12") == "owner-name-12"
    assert slugify("ABC-1") == "ABC-1" and slugify("...") == "ticket"


def write(tmp_path: Path, workspace: dict[str, object]) -> Path:
    config = {
        "tracker": {"kind": "local", "provider": {"path": "board"}},
        "workspace": {"root": "ws", **workspace},
    }
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(config)}---\nDo it.\n")
    return path


def test_worktree_settings_resolve_the_repository_and_name_their_errors(tmp_path: Path) -> None:
    settings = load_settings(
        write(tmp_path, {"strategy": "worktree", "repository": "repo", "base": "origin/main"}),
        {"HOME": "/nowhere"},
    )
    worktrees = settings.workspace.worktrees
    assert worktrees.repository == str(tmp_path / "repo") and worktrees.base == "origin/main"
    url = load_settings(
        write(tmp_path, {"strategy": "worktree", "repository": "git@example.com:o/r.git"}),
        {"HOME": "/nowhere"},
    )
    assert url.workspace.worktrees.repository == "git@example.com:o/r.git"
    for workspace, message in (
        ({"strategy": "worktree"}, r"needs workspace\.repository"),
        ({"strategy": "clone"}, r"workspace\.strategy must be"),
        ({"repository": "repo"}, r"workspace\.repository needs workspace\.strategy: worktree"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_settings(write(tmp_path, workspace), {"HOME": "/nowhere"})


def test_check_warns_when_the_repository_is_missing(tmp_path: Path) -> None:
    from symphony.cli.preflight import preflight_warnings

    settings = load_settings(
        write(tmp_path, {"strategy": "worktree", "repository": "nowhere"}), {"HOME": "/nowhere"}
    )
    assert any("workspace.repository" in w for w in preflight_warnings(settings))


def test_check_shows_the_worktree_settings(
    tmp_path: Path, repository: Path, symphony_cli: Cli
) -> None:
    write(tmp_path, {"strategy": "worktree", "repository": str(repository), "base": "main"})
    (tmp_path / "board").mkdir()
    result = symphony_cli("check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    line = (
        f"worktrees     of {repository} from main, on symphony/{{{{ issue.identifier | slugify }}}}"
    )
    assert line in result.stdout


async def test_the_daemon_gives_each_ticket_a_worktree_and_removes_it_when_done(
    tmp_path: Path, repository: Path
) -> None:
    from tests.harness import Board, scenario_env, start

    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.ticket("ABC-2")
    board.write_workflow(
        workspace={"root": "workspaces", "strategy": "worktree", "repository": str(repository)},
        agent={"max_turns": 1},  # one turn per run: the worktrees are what is tested here
        polling_ms=200,
    )
    run = start(board, scenario_env("complete"), watch=False)
    try:
        await run.until(lambda: {"ABC-1", "ABC-2"} <= run.dispatched, timeout=20)
        await run.until(lambda: not run.orchestrator.state.running, timeout=20)
        for identifier in ("ABC-1", "ABC-2"):
            path = board.workspaces / identifier
            assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == f"symphony/{identifier}"
        board.ticket("ABC-1", state="Done")
        await run.until(lambda: not (board.workspaces / "ABC-1").exists(), timeout=20)
    finally:
        await run.stop()
    mirror = board.workspaces / MIRROR_NAME
    assert git(mirror, "rev-parse", "--verify", "refs/heads/symphony/ABC-1")  # branch kept
    assert (board.workspaces / "ABC-2" / "app.py").exists()


@pytest.mark.slow
def test_a_worktree_cut_short_by_kill_9_is_made_again_when_the_daemon_restarts(
    tmp_path: Path, repository: Path
) -> None:
    from tests.harness import FAKE_AGENT, Board, Daemon, wait_until

    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(
        workspace={"root": "workspaces", "strategy": "worktree", "repository": str(repository)},
        codex={"command": f"{sys.executable} {FAKE_AGENT}"},
        polling_ms=200,
    )
    # A git that, while `hang` exists, leaves `worktree add` half done: files checked out, then
    # it stops for good, as if the machine died mid-checkout.
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    tools = tmp_path / "bin"
    tools.mkdir()
    hang, pid_file = tmp_path / "hang", tmp_path / "git.pid"
    (tools / "git").write_text(
        f"""#!/bin/sh
case " $* " in
  *" worktree add "*)
    if [ -e {hang} ]; then
      {real_git} "$@" || exit $?
      echo $$ > {pid_file}
      touch {board.workspaces}/ABC-1/partial
      exec sleep 600
    fi;;
esac
exec {real_git} "$@"
"""
    )
    (tools / "git").chmod(0o755)
    hang.touch()
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "FAKE_AGENT_SCENARIO": "complete"}
    workspace = board.workspaces / "ABC-1"
    first = Daemon(board, env)
    try:
        assert wait_until(lambda: (workspace / "partial").exists(), 30), "".join(first.lines)
        first.kill9()
    finally:
        first.stop()
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    hang.unlink()
    second = Daemon(board, env)
    try:
        second.wait_for("removing a half-made worktree", timeout=30)
        second.wait_for("turn completed", timeout=30)
    finally:
        assert second.stop() == 0
    assert not (workspace / "partial").exists()  # the half-made one was discarded
    assert (workspace / "app.py").read_text() == "x = 1\n"
    assert git(workspace, "rev-parse", "--abbrev-ref", "HEAD") == "symphony/ABC-1"
    assert "ABC-1" in git(board.workspaces / MIRROR_NAME, "worktree", "list")

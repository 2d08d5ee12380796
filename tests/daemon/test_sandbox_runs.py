"""Where a sandboxed run's folder (its private home, its sockets) lives, and what the daemon
removes of it: beside the workflow's store, never under the system's temporary folder, and
nothing it did not make."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from symphony.config.load import load_settings
from symphony.daemon.sandbox import RUNS_FOLDER, attempt_sandbox, runs_root
from symphony.hosts.sandbox.host import sweep_stale
from tests.harness import Board


def test_a_workflows_runs_live_beside_its_store(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.write_workflow()
    settings = load_settings(board.workflow, {"HOME": str(tmp_path)})
    assert runs_root(settings) == tmp_path / ".symphony" / RUNS_FOLDER

    board.write_workflow(state={"path": "/srv/symphony/state.db"})
    settings = load_settings(board.workflow, {"HOME": str(tmp_path)})
    assert runs_root(settings) == Path("/srv/symphony") / RUNS_FOLDER


def test_an_attempts_home_is_made_in_the_runs_root_and_removed_with_its_folder(
    tmp_path: Path,
) -> None:
    root = tmp_path / ".symphony" / RUNS_FOLDER
    (tmp_path / "home" / ".codex").mkdir(parents=True)
    (tmp_path / "home" / ".codex" / "auth.json").write_text("{}")
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}

    async def main() -> tuple[Path, dict[str, str]]:
        run = attempt_sandbox(
            kind="codex", env=env, protected=(), on_refused=lambda h, p: None, root=root
        )
        async with run:
            assert run.paths is not None
            assert (run.paths.home / ".codex" / "auth.json").read_text() == "{}"
            return run.paths.home, dict(run.home_env)

    home, home_env = asyncio.run(main())
    assert home.parent.parent == root
    assert home_env == {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    assert not home.parent.exists()
    assert list(root.iterdir()) == []  # the root stays, empty


def gone_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_the_sweep_removes_only_run_folders_of_daemons_that_are_gone(tmp_path: Path) -> None:
    dead = gone_pid()
    stale = tmp_path / f"{dead}-0123abcd"
    (stale / "home").mkdir(parents=True)
    live = tmp_path / f"{os.getpid()}-0123abcd"
    live.mkdir()
    others = [
        tmp_path / f"{dead}-notes",  # not a name the daemon gives
        tmp_path / f"{dead}-0123abcd.txt",
        tmp_path / "rootfs",
    ]
    for other in others:
        other.mkdir()
    planted = tmp_path / f"{dead}-89abcdef"  # a link to a folder the daemon never made
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    planted.symlink_to(target)

    sweep_stale(tmp_path)

    assert not stale.exists()
    assert live.is_dir() and all(other.is_dir() for other in others)
    assert planted.is_symlink() and (target / "keep.txt").read_text() == "keep"

"""`symphony open ID`: a ticket's workspace in the person's editor, or its path and branch."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from symphony.config.sections import HooksSettings
from symphony.workspace.local import WorkspaceManager
from tests.cli_runner import Cli, CliResult
from tests.harness import Board


def workspace_of(board: Board, identifier: str) -> Path:
    """A workspace symphony made, holding a git work tree on the ticket's branch."""
    manager = WorkspaceManager(board.workspaces, HooksSettings(), env=dict(os.environ))
    path = asyncio.run(manager.prepare(identifier)).path
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q", "-b", f"symphony/{identifier}"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    return path


@pytest.fixture
def symphony_open(board: Board, symphony_cli: Cli) -> Callable[..., CliResult]:
    """`symphony open ARGS` in the board's folder, with only the editor variables given."""

    def run(*args: str, **env: str) -> CliResult:
        return symphony_cli("open", *args, cwd=board.root, env=env, unset=("VISUAL", "EDITOR"))

    return run


@pytest.fixture
def board(tmp_path: Path) -> Board:
    board = Board(tmp_path)
    board.write_workflow()
    return board


def test_the_workspace_opens_in_the_editor_the_environment_names(
    board: Board, symphony_open: Callable[..., CliResult]
) -> None:
    path = workspace_of(board, "ABC-1")
    record = board.root / "opened.txt"
    editor = board.root / "editor.sh"
    editor.write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    editor.chmod(0o755)
    result = symphony_open("ABC-1", EDITOR="/nonexistent-editor", VISUAL=str(editor))
    assert result.returncode == 0, result.stderr
    assert record.read_text().strip() == str(path)  # VISUAL wins over EDITOR


def test_editor_command_in_the_workflow_wins_over_the_environment(
    board: Board, symphony_open: Callable[..., CliResult]
) -> None:
    path = workspace_of(board, "ABC-1")
    record = board.root / "opened.txt"
    board.write_workflow(editor={"command": f"sh -c 'echo \"$0\" > {record}'"})
    result = symphony_open("ABC-1", VISUAL="/nonexistent-editor")
    assert result.returncode == 0, result.stderr
    assert record.read_text().strip() == str(path)


def test_without_an_editor_the_path_and_branch_are_printed(
    board: Board, symphony_open: Callable[..., CliResult]
) -> None:
    path = workspace_of(board, "ABC-1")
    result = symphony_open("ABC-1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(path), "branch symphony/ABC-1"]


def test_a_ticket_without_a_workspace_is_a_clear_error(
    board: Board, symphony_open: Callable[..., CliResult]
) -> None:
    (board.workspaces / "ABC-9").mkdir(parents=True)  # someone's folder, not symphony's
    for wanted in ("ABC-2", "ABC-9"):
        result = symphony_open(wanted)
        assert result.returncode == 1 and "no workspace for" in result.stderr
        assert "Traceback" not in result.stderr

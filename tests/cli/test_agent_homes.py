"""`symphony check` warns where codex would keep its home under the temporary folder on a machine
with bubblewrap, where its own sandbox cannot start a command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from symphony.cli.agent_homes import temp_home_warnings
from symphony.config.load import load_settings
from tests.cli_runner import Cli
from tests.harness import Board


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


@pytest.fixture
def with_bwrap(tmp_path: Path) -> str:
    """A PATH on which `bwrap` is installed (a stand-in: only its presence is read)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "bwrap").chmod(0o755)
    return str(bin_dir)


def warnings_for(board: Board, environ: dict[str, str], **workflow: Any) -> list[str]:
    board.write_workflow(**workflow)
    return temp_home_warnings(load_settings(board.workflow, environ), environ)


def test_a_home_under_the_temporary_folder_with_bubblewrap_installed_is_warned_of(
    board: Board, with_bwrap: str
) -> None:
    environ = {"PATH": with_bwrap, "HOME": "/tmp/agent-home"}
    (warning,) = warnings_for(board, environ)
    assert warning.startswith(
        "codex's home /tmp/agent-home/.codex (from HOME) is under the temporary folder /tmp"
    )
    assert "bwrap: execvp codex-linux-sandbox" in warning
    assert "set CODEX_HOME in agent.env or the daemon's environment to a folder outside /tmp" in (
        warning
    )


def test_codex_home_set_in_agent_env_is_the_one_looked_at(board: Board, with_bwrap: str) -> None:
    outside = {"PATH": with_bwrap, "HOME": "/tmp/agent-home", "CODEX_HOME": "/srv/codex"}
    assert warnings_for(board, outside) == []
    environ = {"PATH": with_bwrap, "HOME": "/srv/home", "TMPDIR": "/srv/scratch"}
    (warning,) = warnings_for(board, environ, agent={"env": {"CODEX_HOME": "/srv/scratch/c"}})
    assert warning.startswith(
        "codex's home /srv/scratch/c (from CODEX_HOME) is under the temporary folder /srv/scratch"
    )


def test_no_warning_where_codex_runs_no_sandbox_of_its_own_or_bubblewrap_is_absent(
    board: Board, with_bwrap: str, tmp_path: Path
) -> None:
    environ = {"PATH": with_bwrap, "HOME": "/tmp/agent-home"}
    assert warnings_for(board, {**environ, "PATH": str(tmp_path)}) == []
    # In symphony's sandbox the home is a private one, made beside the store.
    assert warnings_for(board, environ, sandbox={"kind": "bwrap", "network": "none"}) == []
    assert warnings_for(board, environ, codex={"thread_sandbox": "danger-full-access"}) == []


def test_check_prints_the_warning(board: Board, with_bwrap: str, symphony_cli: Cli) -> None:
    board.write_workflow()
    home = "/tmp/agent-home-of-check"
    env = {"PATH": with_bwrap, "HOME": home, "CODEX_HOME": ""}
    result = symphony_cli("check", cwd=board.root, env=env)
    assert f"warning: codex's home {home}/.codex (from HOME) is under the temporary" in (
        result.stdout
    )

"""`symphony init`: a working starter WORKFLOW.md per tracker, never overwriting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from symphony.cli.init import TRACKERS, InitError, init_workflow
from tests.cli_runner import Cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("tracker", sorted(TRACKERS))
def test_init_writes_the_trackers_documented_example(tracker: str, tmp_path: Path) -> None:
    written = init_workflow(tmp_path / "project", tracker)
    assert written.workflow == tmp_path / "project" / "WORKFLOW.md"
    assert written.workflow.read_bytes() == (EXAMPLES / tracker / "WORKFLOW.md").read_bytes()


def test_init_for_the_local_board_brings_a_sample_ticket(tmp_path: Path) -> None:
    written = init_workflow(tmp_path, "local")
    assert [p.name for p in written.others] == ["TASK-1.md"]
    assert (tmp_path / "board" / "TASK-1.md").read_text().startswith("---\ntitle:")


def test_init_refuses_to_overwrite_a_workflow_and_keeps_an_existing_ticket(
    tmp_path: Path,
) -> None:
    (tmp_path / "WORKFLOW.md").write_text("mine")
    with pytest.raises(InitError) as err:
        init_workflow(tmp_path, "local")
    assert "already exists" in err.value.message
    assert (tmp_path / "WORKFLOW.md").read_text() == "mine"
    assert not (tmp_path / "board").exists()
    (tmp_path / "WORKFLOW.md").unlink()
    (tmp_path / "board").mkdir()
    (tmp_path / "board" / "TASK-1.md").write_text("my ticket")
    written = init_workflow(tmp_path, "local")
    assert written.kept == (tmp_path / "board" / "TASK-1.md",)
    assert (tmp_path / "board" / "TASK-1.md").read_text() == "my ticket"


def test_init_accepts_a_file_path_and_makes_its_folder(tmp_path: Path) -> None:
    written = init_workflow(tmp_path / "ops" / "agents.md", "github")
    assert written.workflow == tmp_path / "ops" / "agents.md" and written.workflow.is_file()


def test_init_then_check_works_from_an_empty_folder_and_says_what_to_run(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    missing = symphony_cli(cwd=tmp_path)
    assert missing.returncode == 1 and "symphony init" in missing.stderr
    result = symphony_cli("init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote WORKFLOW.md (local tracker)" in result.stdout
    assert "symphony check WORKFLOW.md" in result.stdout
    check = symphony_cli("check", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "TASK-1" in check.stdout and "would dispatch" in check.stdout
    again = symphony_cli("init", cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr


def test_init_for_a_saas_tracker_names_what_to_set_next(tmp_path: Path, symphony_cli: Cli) -> None:
    result = symphony_cli("init", "--tracker", "github-projects", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "set tracker.provider.project and export GITHUB_TOKEN" in result.stdout
    unknown = symphony_cli("init", "--tracker", "jira", cwd=tmp_path)
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr

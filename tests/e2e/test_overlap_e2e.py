"""Conflict forecasting end to end, on a real git repository with worktrees and the demo agent:
two tickets whose plans name the same file are not implemented side by side under
`agent.overlap: serialize`, the held one says why on the board, and starts, once the other is
merged, from the main that holds it: its hand-off merges cleanly."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from symphony import core
from symphony.core.footprint import Footprint
from symphony.store import Store
from symphony.workspace.worktrees import MIRROR_NAME
from tests.stage_flow import PLAN_PROMPT, StageBoard, settle, start
from tests.workspace.test_worktrees import git

pytestmark = pytest.mark.slow


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "README.md").write_text("A calculator.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    return repo


def board_reason(run: object, identifier: str) -> str | None:
    rows = run.orchestrator.snapshot()["board"]["rows"]  # type: ignore[attr-defined]
    return next((r["reason"] for r in rows if r["issue_identifier"] == identifier), None)


async def test_tickets_planning_the_same_file_are_implemented_one_after_the_other(
    tmp_path: Path, repository: Path
) -> None:
    board = StageBoard(tmp_path)
    board.ticket("A-1", priority=1, body="Add subtract to `calc.py`.")
    board.ticket("B-1", priority=2, body="Make divide safe in `calc.py`.")
    board.ticket("C-1", priority=3, body="Explain the project in `README.md`.")
    board.write_workflow(
        plan={"prompt": PLAN_PROMPT + "{{ issue.description }}\n"},
        implement={"evidence": True},
        overlap="serialize",
    )
    config = yaml.safe_load(board.workflow.read_text().split("---")[1])
    config["workspace"] = {"root": "workspaces", "strategy": "worktree", "repository": "repo"}
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")
    run = start(board)
    try:
        for identifier in ("A-1", "B-1", "C-1"):
            await settle(run, board, identifier, "Plan Review")  # planning holds no files
        assert "`calc.py`" in board.text("A-1") and "`calc.py`" in board.text("B-1")
        for identifier in ("A-1", "B-1", "C-1"):
            board.set_state(identifier, "Ready")  # a person approves all three plans
        await settle(run, board, "A-1", "Human Review")
        await settle(run, board, "C-1", "Human Review")  # another file: it ran alongside
        # B-1 waited while A-1 ran, and waits now that A-1's changes wait for review.
        assert board.state_of("B-1") == "Ready" and len(run.dispatches("B-1")) == 1
        held = "waits for A-1 (waiting for a person) on `calc.py` (agent.overlap)"
        assert board_reason(run, "B-1") == held
        detail = run.orchestrator.view.issue_snapshot("B-1")
        assert detail is not None and detail["reason"] == held
        assert detail["files"] == {"planned": ["calc.py"], "changed": []}
        # The reviewer merges A-1 into main and closes it; then B-1 runs.
        mirror = board.root / "workspaces" / MIRROR_NAME
        git(repository, "fetch", "-q", str(mirror), "symphony/A-1")
        git(repository, "merge", "-q", "--ff-only", "FETCH_HEAD")
        board.set_state("A-1", "Done")
        await settle(run, board, "B-1", "Human Review")
    finally:
        await run.stop()
    assert len(run.dispatches("B-1")) == 2  # plan and implement: never beside A-1's
    # B-1's worktree was cut (for its plan) before A-1 was merged; it started implementing
    # from the main that holds A-1, so its branch merges cleanly although both changed
    # the same lines.
    merges = "Merges cleanly onto `origin/main` as it is now (git merge-tree)."
    assert merges in board.text("B-1") and merges in board.text("A-1")
    on_main = git(repository, "rev-parse", "main")
    git(mirror, "merge-base", "--is-ancestor", on_main, "refs/heads/symphony/B-1")  # in it


def test_check_explains_the_hold_from_the_daemon_s_store(tmp_path: Path) -> None:
    board = StageBoard(tmp_path)
    board.ticket("A-1", state="Human Review")
    board.ticket("B-1", state="Ready", body="Make divide safe in `calc.py`.")
    board.write_workflow(overlap="serialize")
    store, _ = Store.open(tmp_path / ".symphony" / "state.db")
    state = core.SchedulerState()
    state.kept_workspaces["A-1"] = "A-1"  # handed to review, its branch changed calc.py
    state.footprints["A-1"] = Footprint("A-1", frozenset({"calc.py"}), frozenset({"calc.py"}))
    state.footprints["B-1"] = Footprint("B-1", frozenset({"calc.py"}))
    store.save(state, 0.0, datetime.now(UTC))
    store.close()
    result = subprocess.run(
        [sys.executable, "-m", "symphony", "check"],
        cwd=board.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "overlap       serialize (agent.overlap)" in result.stdout
    [verdict] = [line for line in result.stdout.splitlines() if line.startswith("  B-1 ")]
    assert verdict.endswith(
        "waits: waits for A-1 (waiting for a person) on `calc.py` (agent.overlap)  Ticket B-1"
    )

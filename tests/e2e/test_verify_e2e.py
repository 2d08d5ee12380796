"""Verification end to end on the local board with the demonstration agent (real processes, real
git worktrees): gates the daemon runs after a `done`, fix turns on the same thread, the evidence
comment and file, rework rounds that edit the comment, escalation when fixes run out, a hanging
gate, and the review queue that holds new work."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.base.secrets import SecretMasker
from symphony.config.sections import MemorySettings
from symphony.memory import Memory
from symphony.workspace.facts import read_evidence_file
from tests.stage_flow import GIT_WORKSPACE, StageBoard, StageRun, comments_of, settle

pytestmark = pytest.mark.slow

COMMITTED = {
    "name": "committed",
    "run": 'git status --short && test -z "$(git status --porcelain)"',
}
FORGETS = "the agent forgets to commit on its first try"


class CountingRun(StageRun):
    """Also counts the agent sessions (each one thread) opened per ticket."""

    def __init__(self, board: StageBoard, **kw: Any) -> None:
        self.sessions: dict[str, int] = {}
        super().__init__(board.workflow, {}, timeout=40, **kw)

    def _session(self, launch: AgentLaunch) -> AgentSession:
        identifier = launch.env["SYMPHONY_ISSUE_IDENTIFIER"]
        self.sessions[identifier] = self.sessions.get(identifier, 0) + 1
        return open_session(launch)


@pytest.fixture
def board(tmp_path: Path) -> StageBoard:
    return StageBoard(tmp_path)


def git(workspace: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(workspace), *args], check=True, capture_output=True, text=True
    ).stdout


async def test_a_failed_gate_gets_a_fix_turn_and_the_hand_off_carries_true_evidence(
    board: StageBoard,
) -> None:
    board.ticket("DEMO-1", state="Ready", title=f"Add a feature ({FORGETS})")
    board.write_workflow(
        implement={"verify": [{"name": "tests", "run": "python3 -B -c 'import app'"}, COMMITTED]},
        hooks=GIT_WORKSPACE,
    )
    run = CountingRun(board)
    try:
        await settle(run, board, "DEMO-1", "Human Review")
        # Rework: a reviewer asks for more, and the next hand-off edits the same comment.
        (first,) = comments_of(board, "DEMO-1", "evidence")
        board.comment("DEMO-1", "reviewer", "Also note the edge cases.")
        board.set_state("DEMO-1", "Rework")
        await settle(run, board, "DEMO-1", "Human Review")
        snapshot = run.orchestrator.view.issue_snapshot("DEMO-1")
    finally:
        await run.stop()
    # The first round found the notes uncommitted; the fix turn was a turn of the same thread,
    # and its prompt carried the gate's output (the agent quotes its first line).
    assert first.count("| committed |") == 1 and "All gates passed after 1 fix turn." in first
    assert "Verification said '?? NOTES/'; committed NOTES/DEMO-1.md." in first
    assert run.sessions["DEMO-1"] == 2  # one per implementing run, fix turns included
    (evidence_comment,) = comments_of(board, "DEMO-1", "evidence")
    assert "(hand-off 2)" in evidence_comment and evidence_comment != first
    # What the comment says is what really ran and what git really shows.
    workspace = run.orchestrator.view.workspace_path("DEMO-1")
    evidence = read_evidence_file(workspace)
    assert evidence is not None and snapshot is not None and snapshot["evidence"] == evidence
    codes = [r["exit_code"] for r in evidence["verification"]["results"]]
    assert codes == [0, 0] and "| tests | `python3 -B -c 'import app'` | passed | 0 |" in (
        evidence_comment
    )
    start = git(workspace, "rev-list", "--max-parents=0", "HEAD").strip()
    stat = git(workspace, "diff", "--stat", f"{start}...HEAD").rstrip()
    assert evidence["workspace"]["diff_stat"].rstrip() == stat and stat in evidence_comment
    assert evidence["workspace"]["branch"] == "main" and evidence["hand_off"] == 2
    assert git(workspace, "status", "--porcelain") == ""  # the evidence file stays out of git
    # The daemon noted what it saw for later tickets: which gate failed and how the fix went
    # (once: the rework round's same failure adds no copy).
    notes = Memory(MemorySettings(board.root / ".symphony" / "memory"), SecretMasker()).notes()
    (lesson,) = [note for note in notes if note.source == "daemon"]
    assert (lesson.topic, lesson.ticket) == ("gate committed", "DEMO-1")
    assert lesson.text.endswith("exited with status 1; it passed after 1 fix turn.")
    (learned,) = [note for note in notes if note.source == "agent"]  # through record_learning
    assert learned.topic == "commit before reporting" and learned.ticket == "DEMO-1"
    # Without a store nothing keeps outcome records: none pile up in memory.
    assert run.orchestrator.state.new_outcomes == []


async def test_fix_turns_that_do_not_fix_it_escalate_with_the_last_failure(
    board: StageBoard,
) -> None:
    board.ticket("DEMO-1", state="Ready")
    board.write_workflow(
        implement={
            "verify": [{"name": "lint", "run": "echo 'app.py:1: E999 nope'; exit 2"}],
            "max_fix_turns": 1,
        },
        hooks=GIT_WORKSPACE,
    )
    run = CountingRun(board)
    try:
        await settle(run, board, "DEMO-1", "Needs Attention")
    finally:
        await run.stop()
    (comment,) = comments_of(board, "DEMO-1", "verify_failed")
    assert "still failed after 1 fix turn; moving the ticket to Needs Attention" in comment
    assert "Gate `lint` (`echo 'app.py:1: E999 nope'; exit 2`) exited with status 2" in comment
    assert "app.py:1: E999 nope" in comment
    assert comments_of(board, "DEMO-1", "evidence") == []


async def test_a_hanging_gate_is_killed_at_its_timeout_while_the_daemon_works_on(
    board: StageBoard,
) -> None:
    board.ticket("DEMO-1", state="Ready")
    board.write_workflow(
        implement={
            "verify": [{"name": "hangs", "run": "sleep 600 & sleep 600", "timeout_ms": 4000}],
            "max_fix_turns": 0,
        },
        hooks=GIT_WORKSPACE,
    )
    run = CountingRun(board)
    try:
        await run.until(lambda: "sleep 600" in _processes_in(run, "DEMO-1"))
        started = time.monotonic()
        # While the gate hangs, another ticket is dispatched, planned and moved.
        board.ticket("DEMO-2")
        run.orchestrator.request_refresh()
        await run.until(lambda: board.state_of("DEMO-2") == "Plan Review")
        assert time.monotonic() - started < 4, "the daemon waited for the gate"
        assert "DEMO-1" in run.orchestrator.state.running  # still in its gate
        await settle(run, board, "DEMO-1", "Needs Attention")
    finally:
        await run.stop()
    (comment,) = comments_of(board, "DEMO-1", "verify_failed")
    assert "Gate `hangs` (`sleep 600 & sleep 600`) timed out after 4000 ms" in comment
    assert "sleep 600" not in _processes_in(run, "DEMO-1")


async def test_a_full_review_queue_holds_new_tickets_until_a_reviewer_moves_one(
    board: StageBoard,
) -> None:
    board.ticket("DEMO-1", state="Human Review")
    board.ticket("DEMO-2", state="Human Review")
    board.ticket("DEMO-3", state="Ready")
    board.write_workflow(max_in_review=2)
    run = CountingRun(board)
    try:
        run.orchestrator.request_refresh()
        await run.until(lambda: _board_reason(run, "DEMO-3") is not None)
        reason = _board_reason(run, "DEMO-3")
        assert reason == "waits for reviewers: 2 tickets wait for review (agent.max_in_review: 2)"
        assert "DEMO-3" not in run.dispatched
        board.set_state("DEMO-1", "Done")  # a reviewer accepts one
        await settle(run, board, "DEMO-3", "Human Review")
    finally:
        await run.stop()


def _board_reason(run: StageRun, identifier: str) -> str | None:
    rows = run.orchestrator.snapshot()["board"]["rows"]
    return next((r["reason"] for r in rows if r["issue_identifier"] == identifier), None)


def _processes_in(run: StageRun, identifier: str) -> str:
    """The command lines of live processes whose working folder is the ticket's workspace."""
    workspace = str(run.orchestrator.view.workspace_path(identifier))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str((entry / "cwd").resolve()) != workspace:
                continue
            found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return "\n".join(found)

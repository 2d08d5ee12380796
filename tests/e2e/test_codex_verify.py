"""Verification with the real `codex app-server` against the fake model: the daemon's gates
after codex reports done, a fix turn on the same thread carrying the gate's output, evidence
that matches what ran, a rework round that edits the evidence, and fix turns that run out."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from symphony.workspace.facts import read_evidence_file
from tests.e2e.conftest import codex_command
from tests.e2e.fake_model import CallTool, FakeModel, ModelRequest, Say, Shell, Step
from tests.stage_flow import GIT_WORKSPACE, StageBoard, StageRun, comments_of, settle

pytestmark = pytest.mark.slow

FIX_TURN = "the daemon ran this stage's verification"
COMMIT = "git add -A && git -c user.name=codex -c user.email=codex@localhost commit -q -m"
GATE = {"name": "imports", "run": "python3 -B -c 'import app'"}


def ticket_of(request: ModelRequest) -> str:
    for text in request.user_texts:
        match = re.search(r"ticket ([A-Z]+-\d+)", text)
        if match:
            return match.group(1)
    raise LookupError(request.prompt)


def script(request: ModelRequest) -> list[Step]:
    """ABC-1 breaks app.py, then fixes it in the fix turn; ABC-2 never fixes it; a rework turn
    (its prompt carries the reviewer's comment) adds a line."""
    identifier, prompt = ticket_of(request), request.prompt
    done = CallTool("report_outcome", {"outcome": "done", "summary": f"{identifier} is ready."})
    if FIX_TURN in prompt:
        if identifier == "ABC-1":
            fix = f"printf 'x = 1\\n' > app.py && {COMMIT} 'Fix app.py'"
            return [Shell(fix), done, Say("Fixed.")]
        return [Shell("true"), done, Say("Could not fix it.")]
    if "Please add y" in prompt:
        return [Shell(f"printf 'x = 1\\ny = 2\\n' > app.py && {COMMIT} 'Add y'"), done, Say("ok")]
    return [Shell(f"printf 'x = (\\n' > app.py && {COMMIT} 'Change app.py'"), done, Say("Done.")]


def codex_settings(model: FakeModel) -> dict[str, object]:
    return {
        "command": codex_command(model.base_url),
        "approval_policy": "never",
        "thread_sandbox": "danger-full-access",
        "read_timeout_ms": 30_000,
        "turn_timeout_ms": 60_000,
    }


def git(workspace: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(workspace), *args], check=True, capture_output=True, text=True
    ).stdout


async def test_codex_fixes_what_the_gate_found_on_its_thread_and_hands_over_with_evidence(
    tmp_path: Path, codex_env: dict[str, str]
) -> None:
    board = StageBoard(tmp_path)
    board.ticket("ABC-1", state="Ready")
    board.ticket("ABC-2", state="Ready")
    with FakeModel(script) as model:
        board.write_workflow(
            implement={"verify": [GATE], "max_fix_turns": 1},
            hooks=GIT_WORKSPACE,
            codex=codex_settings(model),
        )
        run = StageRun(board.workflow, codex_env, timeout=90)
        try:
            await settle(run, board, "ABC-1", "Human Review")
            await settle(run, board, "ABC-2", "Needs Attention")
            (first,) = comments_of(board, "ABC-1", "evidence")
            board.comment("ABC-1", "reviewer", "Please add y.")
            board.set_state("ABC-1", "Rework")
            await settle(run, board, "ABC-1", "Human Review")
        finally:
            await run.stop()

    assert model.script_errors == [] and model.unexpected_requests == []
    # The fix turn went to the same thread: its request carries the first prompt too, and its
    # own prompt carries the end of the gate's output.
    (fix,) = [
        r
        for r in model.requests
        if ticket_of(r) == "ABC-1" and FIX_TURN in r.prompt and r.step == 0
    ]
    assert "SyntaxError" in fix.prompt and "Gate `imports`" in fix.prompt
    assert any("You are working on ticket ABC-1" in text for text in fix.user_texts[:-1])
    assert "All gates passed after 1 fix turn." in first
    # One evidence comment, edited by the rework round; its figures are what really ran.
    (evidence_comment,) = comments_of(board, "ABC-1", "evidence")
    assert "(hand-off 2)" in evidence_comment and "All gates passed at once." in evidence_comment
    workspace = run.orchestrator.view.workspace_path("ABC-1")
    evidence = read_evidence_file(workspace)
    assert evidence is not None
    assert [r["exit_code"] for r in evidence["verification"]["results"]] == [0]
    start = git(workspace, "rev-list", "--max-parents=0", "HEAD").strip()
    stat = git(workspace, "diff", "--stat", f"{start}...HEAD").rstrip()
    assert evidence["workspace"]["diff_stat"].rstrip() == stat and stat in evidence_comment
    assert len(evidence["workspace"]["commits"]) == 3  # change, fix, and the rework's
    # ABC-2's fix turn changed nothing: it escalates with the last failure.
    (failed,) = comments_of(board, "ABC-2", "verify_failed")
    assert "still failed after 1 fix turn" in failed and "SyntaxError" in failed

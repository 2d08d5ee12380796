"""The evidence of a hand-off, read from a real git workspace, and its file in the workspace."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from symphony.core.evidence import MergeCheck, WorkspaceFacts, render_evidence
from symphony.workspace.facts import (
    merge_check,
    merge_checks,
    read_evidence_file,
    workspace_facts,
    write_evidence_file,
)

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@localhost"]


def git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(path), *IDENTITY, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def repository(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "ws"
    path.mkdir()
    git(path, "init", "-q", "--initial-branch=main")
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "Sample")
    start = git(path, "rev-parse", "HEAD")
    git(path, "switch", "-q", "-c", "symphony/A-1")
    (path / "calc.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    pass\n"
    )
    git(path, "commit", "-q", "-am", "Add sub")
    (path / "test_calc.py").write_text("from calc import sub\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "Test sub")
    (path / "scratch.txt").write_text("left behind\n")
    return path, start


async def test_facts_name_the_branch_commits_diff_stat_and_what_is_not_committed(
    tmp_path: Path,
) -> None:
    path, start = repository(tmp_path)
    env = dict(os.environ)
    facts = await workspace_facts(path, base_ref=None, start_commit=start, env=env)
    assert facts is not None
    assert facts.branch == "symphony/A-1" and facts.head == git(path, "rev-parse", "HEAD")
    assert (facts.base, facts.base_source) == (start, "where the workspace started")
    assert [c.split(" ", 1)[1] for c in facts.commits] == ["Test sub", "Add sub"]
    assert "calc.py" in facts.diff_stat and "2 files changed" in facts.diff_stat
    assert facts.uncommitted == 1
    # A configured base is used when it resolves, and said to be missing when it does not.
    by_ref = await workspace_facts(path, base_ref="main", start_commit=None, env=env)
    assert by_ref is not None and by_ref.base == "main" and len(by_ref.commits) == 2
    missing = await workspace_facts(path, base_ref="origin/trunk", start_commit=start, env=env)
    assert missing is not None and missing.base is None
    assert missing.base_source == "workspace.base_ref 'origin/trunk' not found"
    # Not a git work tree: no facts at all.
    (tmp_path / "plain").mkdir()
    assert (
        await workspace_facts(tmp_path / "plain", base_ref=None, start_commit=None, env=env) is None
    )


async def test_the_evidence_file_lives_in_the_workspace_but_never_in_its_commits(
    tmp_path: Path,
) -> None:
    path, _ = repository(tmp_path)
    (path / "scratch.txt").unlink()
    evidence = {"ticket": "A-1", "tokens": {"total": 5}}
    written = write_evidence_file(path, evidence)
    assert written == path / ".symphony" / "evidence.json"
    assert json.loads(written.read_text()) == evidence == read_evidence_file(path)
    assert git(path, "status", "--porcelain", "--untracked-files=all") == ""
    assert write_evidence_file(tmp_path / "gone", evidence) is None


def test_the_comment_reads_as_a_report_and_escapes_table_cells() -> None:
    evidence = {
        "ticket": "A-1",
        "stage": "implement",
        "handed_to": "Human Review",
        "hand_off": 2,
        "verification": {
            "passed": True,
            "rounds": 1,
            "fix_turns": 0,
            "results": [
                {
                    "name": "lint",
                    "run": "ruff check . | tee lint.txt",
                    "outcome": "passed",
                    "exit_code": 0,
                    "duration_s": 0.4,
                    "detail": "completed",
                },
            ],
        },
        "workspace": None,
        "pull_request": None,
        "turns": 3,
        "tokens": {"input": 1200, "output": 34, "total": 1234},
        "agent_seconds": 125.0,
        "summary": "Added sub().",
        "open_questions": ["Should sub accept floats?"],
    }
    text = render_evidence(evidence)
    assert "(hand-off 2)" in text
    assert "| lint | `ruff check . \\| tee lint.txt` | passed | 0 | 0.4 s |" in text
    assert "All gates passed at once." in text
    assert (
        "Tokens for the ticket so far: 1,234 (1,200 in, 34 out), costing unknown. Agent time: "
        "2 min." in text
    )
    assert "costing $0.42." in render_evidence({**evidence, "cost_usd": 0.4213})
    assert text.endswith("- Should sub accept floats?")
    assert "sandbox" not in text
    boxed = render_evidence({**evidence, "sandbox": "bwrap, network none, workspace writable"})
    assert (
        "All gates passed at once. The agent and the gates ran in a sandbox: bwrap, network "
        "none, workspace writable." in boxed
    )


async def test_merge_checks_say_whether_the_branch_merges_and_which_branches_conflict(
    tmp_path: Path,
) -> None:
    path, start = repository(tmp_path)
    env = dict(os.environ)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "Scratch")
    # Another ticket's worktree of the same repository, changing the same lines.
    other = tmp_path / "other"
    git(path, "worktree", "add", "-q", "-b", "symphony/B-1", str(other), start)
    (other / "calc.py").write_text("def add(a, b):\n    return b + a\n\n\ndef sub(a, b):\n    1\n")
    git(other, "commit", "-q", "-am", "B-1's take")
    quiet = tmp_path / "quiet"  # a third one that touched nothing of ours
    git(path, "worktree", "add", "-q", "-b", "symphony/C-1", str(quiet), start)
    (quiet / "docs.md").write_text("docs\n")
    git(quiet, "add", "-A")
    git(quiet, "commit", "-q", "-m", "C-1 docs")
    plain = tmp_path / "plain"
    plain.mkdir()
    onto, conflicts = await merge_checks(
        path,
        base=("main", "main"),
        others=[("B-1", other), ("C-1", quiet), ("D-1", plain)],
        env=env,
    )
    assert onto == MergeCheck("main", True)
    assert conflicts == (MergeCheck("B-1", False, ("calc.py",)),)
    # main moves on with a conflicting change: the branch no longer merges onto it.
    git(path, "switch", "-q", "main")
    (path / "calc.py").write_text(
        "def add(a, b):\n    return int(a) + int(b)\n\n\ndef sub():\n    0\n"
    )
    git(path, "commit", "-q", "-am", "main moves")
    git(path, "switch", "-q", "symphony/A-1")
    stale = await merge_check(path, "main", "main", env)
    assert stale == MergeCheck("main", False, ("calc.py",))
    assert (await merge_check(path, "gone", "no-such-ref", env)).clean is None
    # As the comment says it.
    facts = await workspace_facts(path, base_ref="main", start_commit=None, env=env)
    assert facts is not None
    lines = render_evidence(
        {
            "ticket": "A-1", "stage": "implement", "handed_to": "Human Review", "hand_off": 1,
            "verification": None, "pull_request": None, "turns": 1,
            "tokens": {"input": 1, "output": 1, "total": 2}, "agent_seconds": 1.0,
            "summary": "x", "open_questions": [],
            "workspace": {**facts.to_json(), "merge": stale.to_json(),
                          "conflicts_with": [c.to_json() for c in conflicts]},
        }
    )  # fmt: skip
    assert "**Does not merge cleanly onto `main`** as it is now: conflicts in `calc.py`." in lines
    assert "Conflicts with other open tickets' branches: B-1 in `calc.py`." in lines
    again = WorkspaceFacts.from_json(
        {**facts.to_json(), "merge": stale.to_json(), "conflicts_with": [conflicts[0].to_json()]}
    )
    assert again.merge == stale and again.conflicts_with == conflicts

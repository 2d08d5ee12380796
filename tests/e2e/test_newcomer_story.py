"""The README's story as a newcomer walks it, on the quickstart with its demonstration agents
and the real CLI daemon: approve DEMO-2's plan while DEMO-4 waits for review, approve DEMO-4's
pull request, watch DEMO-2 start from the main that now holds DEMO-4 (no conflict), then a
change merged onto main meanwhile makes DEMO-2's pull request conflict: one conflict fix run
resolves it and the daemon merges it. And an agent that never resolves a conflict is stopped by
the cap on conflict fixes, across a kill -9 of the daemon, in Needs Attention."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness import Daemon, Folder, wait_until
from tests.quickstart import prepare_quickstart

pytestmark = pytest.mark.slow

WAIT_S = 120.0


class Quickstart:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "project"
        self.root.mkdir()
        self.workflow = prepare_quickstart(self.root)
        self.state = self.root / ".symphony"
        self.board = self.state / "board"
        self.remote = self.state / "sample-repo.git"
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.daemons: list[Daemon] = []

    def start(self, **env: str) -> Daemon:
        daemon = Daemon(
            Folder(self.root, self.workflow),
            {"HOME": str(self.home), "DEMO_AGENT_DELAY_MS": "0", **env},
            "--port", "0",
        )  # fmt: skip
        self.daemons.append(daemon)
        return daemon

    def front(self, path: Path) -> dict[str, object]:
        try:
            loaded = yaml.safe_load(path.read_text().split("---\n", 2)[1])
        except (OSError, IndexError, yaml.YAMLError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def state_of(self, identifier: str) -> object:
        return self.front(self.board / f"{identifier}.md").get("state")

    def move(self, identifier: str, to: str) -> None:
        path = self.board / f"{identifier}.md"
        text = re.sub(r"(?m)^state: .*$", f"state: {to}", path.read_text(), count=1)
        path.write_text(text)

    def pull(self, identifier: str) -> Path | None:
        folder = self.state / "pulls"
        for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
            if self.front(path).get("branch") == f"symphony/{identifier}":
                return path
        return None

    def git(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "--git-dir", str(self.remote), *args], capture_output=True, text=True
        )

    def green(self, identifier: str) -> bool:
        """Its pull request's checks passed on the branch's head, and it merges cleanly."""
        path = self.pull(identifier)
        if path is None:
            return False
        checks = self.front(path).get("checks")
        head = self.git("rev-parse", f"refs/heads/symphony/{identifier}").stdout.strip()
        passed = (
            isinstance(checks, dict)
            and checks.get("head") == head
            and [r.get("state") for r in checks.get("results", [])] == ["passed", "passed"]
        )
        clean = self.git("merge-tree", "--write-tree", "main", head).returncode == 0
        return passed and clean

    def approve_pull(self, identifier: str) -> None:
        path = self.pull(identifier)
        assert path is not None
        path.write_text(path.read_text().replace("review: none", "review: approved", 1))

    def merge_onto_main(self, tmp: Path, line: str) -> None:
        """Someone else's change lands on main: a line at the end of calc.py."""
        clone = tmp / "someone"
        subprocess.run(["git", "clone", "-q", str(self.remote), str(clone)], check=True)
        with (clone / "calc.py").open("a") as file:
            file.write(line + "\n")
        who = ["-c", "user.name=someone", "-c", "user.email=someone@localhost"]
        subprocess.run(["git", "-C", str(clone), *who, "commit", "-qam", line], check=True)
        subprocess.run(["git", "-C", str(clone), "push", "-q", "origin", "main"], check=True)

    def runs(self, identifier: str) -> list[str]:
        """The run labels of the ticket's dispatches, across every daemon started."""
        lines = [ln for d in self.daemons for ln in list(d.lines)]
        found = []
        for line in lines:
            if "event=dispatching" in line and f"issue_identifier={identifier}" in line:
                match = re.search(r"\brun=(?:'([^']*)'|\"([^\"]*)\"|(\S+))", line)
                if match is not None:
                    found.append(next(g for g in match.groups() if g is not None))
        return found

    def tokens(self, identifier: str) -> int:
        with sqlite3.connect(self.state / "state.db") as db:
            row = db.execute(
                "SELECT total_tokens FROM ticket_totals WHERE identifier = ?", (identifier,)
            ).fetchone()
        return int(row[0]) if row else 0

    def saved_count(self, identifier: str, kind: str) -> int:
        """How many runs of `kind` the store counts for the ticket now."""
        try:
            with sqlite3.connect(f"file:{self.state / 'state.db'}?mode=ro", uri=True) as db:
                row = db.execute(
                    "SELECT ledger FROM run_ledgers WHERE identifier = ?", (identifier,)
                ).fetchone()
        except sqlite3.Error:
            return 0
        return int(json.loads(row[0])["counts"].get(kind, 0)) if row else 0

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.stop()


@pytest.fixture
def quickstart(tmp_path: Path) -> Quickstart:
    made = Quickstart(tmp_path)
    yield made  # type: ignore[misc]
    made.stop()


def wait_for(what: str, ready: Callable[[], bool], daemon: Daemon, seconds: float = WAIT_S) -> None:
    if not wait_until(ready, seconds):
        said = "".join(daemon.lines)[-6000:]
        pytest.fail(f"timed out waiting for {what}; the daemon said:\n{said}")


def test_the_readme_story_ends_merged_without_a_loop(
    quickstart: Quickstart, tmp_path: Path
) -> None:
    q = quickstart
    daemon = q.start()
    url = daemon.url()
    wait_for("DEMO-2's plan", lambda: q.state_of("DEMO-2") == "Plan Review", daemon)
    wait_for(
        "DEMO-4's pull request, green in Human Review",
        lambda: q.state_of("DEMO-4") == "Human Review" and q.green("DEMO-4"),
        daemon,
    )
    # The newcomer approves DEMO-2's plan while DEMO-4 waits for review: it waits for DEMO-4.
    q.move("DEMO-2", "Ready")

    def reason() -> str:
        return str(httpx.get(f"{url}api/v1/DEMO-2").json().get("reason") or "")

    wait_for("DEMO-2 to wait for DEMO-4", lambda: "waits for DEMO-4" in reason(), daemon)
    # They approve DEMO-4's pull request: the daemon merges it, and DEMO-2 starts from the main
    # that now holds it.
    q.approve_pull("DEMO-4")
    wait_for("DEMO-4 to be Done", lambda: q.state_of("DEMO-4") == "Done", daemon)
    wait_for(
        "DEMO-2's pull request, green and mergeable",
        lambda: q.state_of("DEMO-2") == "Human Review" and q.green("DEMO-2"),
        daemon,
    )
    subtract = q.git("show", "main:calc.py").stdout
    assert "def subtract" in subtract or "DEMO-4" in subtract  # DEMO-4 is on main
    assert q.runs("DEMO-2") == ["first run", "first run"]  # plan, then implement: no fix run
    # Someone merges a change to calc.py meanwhile: DEMO-2's pull request now conflicts; one
    # conflict fix run merges main in and keeps both sides.
    q.merge_onto_main(tmp_path, "# hotfix: keep divide's docstring")
    wait_for("the conflict fix run", lambda: "conflict fix 1/2" in q.runs("DEMO-2"), daemon)
    wait_for("DEMO-2 green again", lambda: q.green("DEMO-2"), daemon)
    q.approve_pull("DEMO-2")
    wait_for("DEMO-2 to be Done", lambda: q.state_of("DEMO-2") == "Done", daemon)
    main = q.git("show", "main:calc.py").stdout
    assert "# hotfix: keep divide's docstring" in main and "DEMO-2" in main
    assert q.runs("DEMO-2") == ["first run", "first run", "conflict fix 1/2"]
    assert "Run: conflict fix 1/2." in (q.board / "DEMO-2.md").read_text()  # its evidence
    tokens = q.tokens("DEMO-2")
    print(f"DEMO-2: {len(q.runs('DEMO-2'))} runs, {tokens} tokens")
    assert 0 < tokens < 30_000


def test_an_agent_that_never_resolves_the_conflict_stops_at_the_cap_across_kill_9(
    quickstart: Quickstart, tmp_path: Path
) -> None:
    q = quickstart
    for other in ("DEMO-1", "DEMO-3", "DEMO-4", "DEMO-6"):
        (q.board / f"{other}.md").unlink()
    q.move("DEMO-2", "Ready")  # its plan is not needed for this
    first = q.start(DEMO_AGENT_CONFLICTS="ignore")
    wait_for(
        "DEMO-2's pull request, green in Human Review",
        lambda: q.state_of("DEMO-2") == "Human Review" and q.green("DEMO-2"),
        first,
    )
    q.merge_onto_main(tmp_path, "# hotfix: keep divide's docstring")
    wait_for("the first conflict fix", lambda: "conflict fix 1/2" in q.runs("DEMO-2"), first)
    # Killed once the store holds the count (it is saved in the pass that dispatched it).
    wait_for("the count saved", lambda: q.saved_count("DEMO-2", "conflict fix") == 1, first)
    first.kill9()
    second = q.start(DEMO_AGENT_CONFLICTS="ignore")
    wait_for("Needs Attention", lambda: q.state_of("DEMO-2") == "Needs Attention", second)
    runs = q.runs("DEMO-2")
    assert [r for r in runs if r.startswith("conflict fix")] == [
        "conflict fix 1/2",
        "conflict fix 2/2",
    ], runs
    text = (q.board / "DEMO-2.md").read_text()
    assert "2 conflict fix runs did not settle it (follow.max_conflict_fixes: 2)" in text
    assert "resolved nothing" in text  # the agent's last output
    # Nothing more starts for it, over several polls.
    before = len(q.runs("DEMO-2"))
    wait_until(lambda: False, 12)
    assert len(q.runs("DEMO-2")) == before

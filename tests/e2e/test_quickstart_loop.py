"""The quickstart's loop after the hand-off, as a newcomer runs it: the real CLI daemon on the
quickstart layout (`scripts/prepare-quickstart`), its demonstration agents, and the local code
host. DEMO-6's pull request goes red on the `no-todo` check, the check's output comes back to the
agent in a fix run, the new head goes green; a person approves in the pull request's file, and
the daemon merges it into the bare repository's main and moves the ticket to Done."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness import Daemon, Folder, wait_until
from tests.quickstart import prepare_quickstart

pytestmark = pytest.mark.slow

WAIT_S = 120.0


def front(path: Path) -> dict[str, object]:
    try:
        text = path.read_text()
        loaded = yaml.safe_load(text.split("---\n", 2)[1])
    except (OSError, IndexError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[tuple[Path, Daemon]]:
    """The daemon running on a fresh quickstart in `tmp_path`; yields (root, the daemon)."""
    root = tmp_path / "project"
    root.mkdir()
    workflow = prepare_quickstart(root)
    home = tmp_path / "home"
    home.mkdir()
    # Hermetic: a home of its own, so nothing of the person's is read or changed.
    daemon = Daemon(Folder(root, workflow), {"HOME": str(home), "DEMO_AGENT_DELAY_MS": "0"})
    try:
        yield root, daemon
    finally:
        daemon.stop()


def wait_for(what: str, ready: Callable[[], bool], daemon: Daemon) -> None:
    if not wait_until(ready, WAIT_S):
        said = "".join(daemon.lines)[-4000:]
        pytest.fail(f"timed out waiting for {what}; the daemon said:\n{said}")


def git(remote: Path, *args: str) -> str:
    run = subprocess.run(
        ["git", "--git-dir", str(remote), *args], capture_output=True, text=True, check=False
    )
    return run.stdout if run.returncode == 0 else ""


def test_a_red_check_comes_back_to_the_agent_and_an_approval_merges_to_done(
    quickstart: tuple[Path, Daemon],
) -> None:
    root, daemon = quickstart
    state = root / ".symphony"
    remote, ticket, pulls = (
        state / "sample-repo.git",
        state / "board" / "DEMO-6.md",
        state / "pulls",
    )

    def pull_file() -> Path | None:
        for path in sorted(pulls.glob("*.md")) if pulls.is_dir() else []:
            if front(path).get("branch") == "symphony/DEMO-6":
                return path
        return None

    def green_in_review() -> bool:
        path = pull_file()
        if path is None or front(ticket).get("state") != "Human Review":
            return False
        checks = front(path).get("checks")
        head = git(remote, "rev-parse", "refs/heads/symphony/DEMO-6").strip()
        return (
            isinstance(checks, dict)
            and checks.get("head") == head
            and [r.get("state") for r in checks.get("results", [])] == ["passed", "passed"]
        )

    wait_for("DEMO-6's pull request to go green in Human Review", green_in_review, daemon)
    path = pull_file()
    assert path is not None
    assert front(ticket).get("pull_request") == path.as_uri()

    # Its first head left a TODO; the fix run's prompt (the agent notes what it was given) named
    # the failed check with its output, and its commit took the TODO out.
    commits = git(remote, "rev-list", "--reverse", "refs/heads/main..refs/heads/symphony/DEMO-6")
    first, *_, head = commits.split()
    assert "# TODO DEMO-6" in git(remote, "show", f"{first}:test_calc.py")
    assert "TODO" not in git(remote, "show", f"{head}:test_calc.py")
    notes = git(remote, "show", f"{head}:NOTES/DEMO-6.md")
    assert "Checks failed on pull request" in notes and "no-todo" in notes
    assert re.search(r"test_calc\.py:\d+:# TODO DEMO-6", notes), notes[-2000:]
    assert "The pull request's checks failed" in ticket.read_text()

    # A person approves in the pull request's file; the daemon merges and the ticket is done.
    text = path.read_text()
    path.write_text(text.replace("review: none", "review: approved", 1))
    wait_for("DEMO-6 to be merged and Done", lambda: front(ticket).get("state") == "Done", daemon)
    merged = front(path)
    assert merged.get("state") == "merged"
    assert git(remote, "rev-parse", "refs/heads/main").strip() == merged.get("merged_sha")
    subject = git(remote, "log", "-1", "--format=%s", "main").strip()
    assert subject == f"DEMO-6: Test multiply with negative numbers (#{path.stem})"
    assert git(remote, "rev-parse", "main^{tree}") == git(remote, "rev-parse", f"{head}^{{tree}}")
    wait_for(
        "DEMO-6's worktree to be removed",
        lambda: not (state / "workspaces" / "DEMO-6").exists(),
        daemon,
    )


def test_scripts_quickstart_serves_the_pages_and_prints_links_that_log_in(tmp_path: Path) -> None:
    """`scripts/quickstart` as a newcomer runs it, in a copy of the repository's files: with no
    port and no token given, it serves on a free loopback port with a token of its own and
    prints the dashboard's link and the review page's login link, which logs a browser in."""
    import os
    import shutil
    import signal
    from urllib.parse import unquote

    import httpx

    repo = Path(__file__).resolve().parents[2]
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copytree(repo / "scripts", clone / "scripts")
    shutil.copy(repo / "WORKFLOW.md", clone / "WORKFLOW.md")
    shutil.copytree(repo / "examples" / "quickstart", clone / "examples" / "quickstart")
    (clone / ".venv").symlink_to(repo / ".venv")  # set up already, as after a first run
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SYMPHONY_TOKEN"}
    env.update(HOME=str(home), DEMO_AGENT_DELAY_MS="0", SYMPHONY_SANDBOX="none")
    run = subprocess.Popen(
        [str(clone / "scripts" / "quickstart"), "--no-tui"],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert run.stdout is not None
        printed = []
        for line in run.stdout:
            printed.append(line)
            if "review:" in line:
                break
        said = "".join(printed)
        dashboard = re.search(r"dashboard: (http://127\.0\.0\.1:(\d+)/)\s", said)
        login = re.search(r"review:\s+(http://\S+/login\?next=/review)#token=(\S+)", said)
        assert dashboard and login, said
        assert dashboard.group(2) != "8080"  # a free port, not a fixed one
        with httpx.Client(base_url=dashboard.group(1), timeout=10) as browser:
            assert browser.get("").status_code == 200
            assert browser.get(login.group(1)).status_code == 200
            token = unquote(login.group(2))
            logged = browser.post("login", data={"token": token, "name": "ada", "next": "/review"})
            assert logged.status_code == 303 and logged.headers["location"] == "/review"
            assert browser.get("review").status_code == 200
            # The session acts: a pause taken from it is answered, not refused.
            csrf = browser.cookies["symphony_csrf"]
            paused = browser.post("api/v1/actions/pause", headers={"X-Symphony-CSRF": csrf})
            assert paused.status_code == 200, paused.text
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(60)

"""The loop after the hand-off, end to end: the real daemon on a local board, the demonstration
agent in a real subprocess, branches really pushed to a bare repository, and the GitHub fake
over HTTP as the code host. Ticket -> plan -> approve -> implement -> push + pull request with
the evidence -> a required check fails -> one fix run with the log tail -> green -> a review
thread -> rework with `{{ review }}` -> the thread answered -> approved -> merged by policy ->
Done, the workspace removed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.workspace.local import workspace_key
from tests.adapters.daemon import DEMO_AGENT
from tests.adapters.github.fake_github import FakeGitHub, serve
from tests.adapters.gitlab.fake_gitlab import FakeGitLab
from tests.adapters.gitlab.fake_gitlab import serve as serve_gitlab
from tests.adapters.gitlab.fake_merge_requests import FakeMergeRequests
from tests.harness import Daemon, wait_until
from tests.stage_flow import StageBoard, StageRun, two_stages

pytestmark = pytest.mark.slow

TOKEN = "ghp_follow_e2e_token_0001"
BRANCH = "symphony/DEMO-1"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with serve(FakeGitHub(repo="acme/widgets", token=TOKEN)) as fake:
        yield fake


def remote_repository(root: Path) -> Path:
    """A bare repository with one commit on main: the worktrees' source and the push target."""
    seed, remote = root / "seed", root / "remote.git"
    git("init", "-q", "--initial-branch=main", str(seed))
    (seed / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git("-C", str(seed), "add", "-A")
    git(
        "-C",
        str(seed),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@localhost",
        "commit",
        "-qm",
        "Start",
    )
    git("clone", "-q", "--bare", str(seed), str(remote))
    return remote


def write_workflow(
    board: StageBoard,
    remote: Path,
    api_url: str,
    kind: str = "github",
    slug: str = "acme/widgets",
    tracker: dict[str, Any] | None = None,
) -> None:
    config: dict[str, Any] = {
        "tracker": tracker
        or {
            "kind": "local",
            "provider": {"path": "board"},
            "terminal_states": ["Done", "Cancelled"],
        },
        "polling": {"interval_ms": 60_000},
        "workspace": {
            "root": "workspaces",
            "strategy": "worktree",
            "repository": str(remote),
            "base": "main",
        },
        "agent": {
            "max_concurrent_agents": 2,
            "max_retry_backoff_ms": 1000,
            "env_passthrough": ["DEMO_AGENT_*"],
        },
        "codex": {"command": f"{sys.executable} {DEMO_AGENT}", "read_timeout_ms": 10_000},
        "stages": two_stages(
            implement={
                "verify": [{"name": "committed", "run": 'test -z "$(git status --porcelain)"'}],
                "evidence": True,
                "publish": {"base": "main", "labels": ["agent"]},
            }
        ),
        "escalation_state": "Needs Attention",
        "repository": {
            "kind": kind,
            "slug": slug,
            "api_url": api_url,
            "token": "$CODE_TOKEN",
            "remote": str(remote),
        },
        "follow": {
            "interval_ms": 200,
            "on_changes_requested": "Rework",
            "on_merged": "Done",
            "max_check_fixes": 2,
        },
        "merge": {"policy": "when_green_and_approved", "method": "squash"},
    }
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")


def head(remote: Path, branch: str = BRANCH) -> str:
    return git("-C", str(remote), "rev-parse", f"refs/heads/{branch}").strip()


async def until(run: StageRun, reached: Callable[[], bool]) -> None:
    run.orchestrator.request_refresh()
    await run.until(reached)


async def test_a_ticket_goes_from_plan_to_merged_through_a_red_check_and_a_review(
    tmp_path: Path, github: FakeGitHub
) -> None:
    remote = remote_repository(tmp_path)
    board = StageBoard(tmp_path)
    # The demonstration agent leaves a TODO on its first try when the prompt says so.
    board.ticket("DEMO-1", title="Let `calc.py` subtract (the agent leaves a TODO)")
    write_workflow(board, remote, github.base)
    run = StageRun(board.workflow, {"CODE_TOKEN": TOKEN}, timeout=60, poll_s=0.1)
    pulls = github.pulls
    state = run.orchestrator.state
    try:
        await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Plan Review")
        board.set_state("DEMO-1", "Ready")  # a person approves the plan
        await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Human Review")

        # Published: the branch pushed, the pull request opened with the evidence, linked.
        (pull,) = pulls.pulls
        number, first = pull["number"], head(remote)
        assert (pull["head"]["ref"], pull["base"]["ref"]) == (BRANCH, "main")
        assert pull["title"] == "DEMO-1: Let `calc.py` subtract (the agent leaves a TODO)"
        assert "**Evidence** for DEMO-1" in pull["body"] and "committed" in pull["body"]
        assert [label["name"] for label in pull["labels"]] == ["agent"]
        assert f"pull_request: {pull['html_url']}" in board.text("DEMO-1")
        assert f"Pull request #{number}, opened by the daemon" in board.text("DEMO-1")
        assert TOKEN not in board.text("DEMO-1")

        assert "TODO" in git("-C", str(remote), "show", f"{first}:calc.py")  # the agent's slip
        # CI: a required check fails on that head with a log; one fix run gets its tail.
        pulls.push(number, first)
        pulls.add_check(number, "lint", "failure", required=True,
                        summary="calc.py:3: TODO left in the code")  # fmt: skip
        await until(run, lambda: head(remote) != first and "DEMO-1" not in state.claimed)
        assert board.state_of("DEMO-1") == "Human Review"  # it waited there meanwhile
        assert "TODO left in the code" in run.notes("DEMO-1")
        assert "TODO" not in git("-C", str(remote), "show", f"{BRANCH}:calc.py")
        fixed = head(remote)
        pulls.push(number, fixed)
        pulls.add_check(number, "lint", "success", required=True)

        # A reviewer asks for a change on a line: the ticket goes to Rework with the review.
        thread = pulls.add_thread(number, "calc.py", 2, ("alice", "Name the parameters x and y."))
        pulls.add_review(number, "alice", "CHANGES_REQUESTED", "One thing before I approve.")
        await until(run, lambda: board.state_of("DEMO-1") == "Rework")
        await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Human Review")
        notes = run.notes("DEMO-1")
        assert "Name the parameters x and y." in notes and "calc.py, line 2" in notes
        reworked = head(remote)
        assert reworked != fixed
        assert any(f"Addressed in {reworked[:7]}" in body for _, _, body in thread.comments)

        # Approved, the thread resolved, green on the new head: merged at that head.
        pulls.push(number, reworked)
        pulls.add_check(number, "lint", "success", required=True)
        pulls.resolve(thread)
        pulls.add_review(number, "alice", "APPROVED")
        await until(run, lambda: board.state_of("DEMO-1") == "Done")
        # (A reading torn by the test's edits may try the older head first: GitHub refuses a
        # merge whose head moved, which is why the daemon names the head it judged.)
        merges = [e for e in github.requests if e.method == "PUT" and e.path.endswith("/merge")]
        assert [e.body for e in merges if e.status == 200] == [
            {"sha": reworked, "merge_method": "squash"}
        ]
        assert "merged by the daemon" in board.text("DEMO-1")
        assert "approved by alice" in board.text("DEMO-1")
        await until(run, lambda: not (tmp_path / "workspaces" / "DEMO-1").exists())
        assert len(pulls.pulls) == 1
        fixes = run.events("DEMO-1", "dispatched")
        assert len(fixes) == 4  # plan, implement, the check fix, the rework
    finally:
        await run.stop()


async def test_when_the_tracker_is_the_same_repository_the_pull_request_closes_the_issue(
    tmp_path: Path, github: FakeGitHub
) -> None:
    remote = remote_repository(tmp_path)
    board = StageBoard(tmp_path)  # only for its WORKFLOW.md: the tickets are GitHub issues
    github.add(7, "Let `calc.py` subtract (the agent leaves a TODO)", labels=["status:todo"])
    tracker = {
        "kind": "github",
        "provider": {"repository": "acme/widgets", "api_url": github.base, "token": "$CODE_TOKEN"},
        "terminal_states": ["Done", "Cancelled"],
    }
    write_workflow(board, remote, github.base, tracker=tracker)
    run = StageRun(board.workflow, {"CODE_TOKEN": TOKEN}, timeout=60, poll_s=0.1)
    pulls, state, ticket = github.pulls, run.orchestrator.state, "acme/widgets#7"
    labels = github.labels_of
    try:
        await run.settle(ticket, lambda: "status:plan-review" in labels(7))
        github.edit(7, labels=["status:ready"])  # a person approves the plan
        await run.settle(ticket, lambda: "status:human-review" in labels(7))

        (pull,) = pulls.pulls
        branch = pull["head"]["ref"]
        number, first = pull["number"], head(remote, branch)
        assert pull["body"].rstrip().endswith("Closes acme/widgets#7")
        # The closing reference is the link: no link comment on the issue, the evidence names it.
        comments = github.comments_of(7)
        assert not any("Linked pull request" in body for body in comments)
        assert any(f"Pull request #{number}, opened by the daemon" in body for body in comments)

        pulls.push(number, first)
        pulls.add_check(number, "lint", "failure", required=True, summary="calc.py:3: TODO")
        await until(run, lambda: head(remote, branch) != first and ticket not in state.claimed)
        assert "status:human-review" in labels(7)
        fixed = head(remote, branch)
        pulls.push(number, fixed)
        pulls.add_check(number, "lint", "success", required=True)
        pulls.add_review(number, "alice", "APPROVED")
        await until(run, lambda: github.issues[7].state == "closed")
        merges = [e for e in github.requests if e.method == "PUT" and e.path.endswith("/merge")]
        assert [e.body["sha"] for e in merges if e.status == 200] == [fixed]
        workspace = tmp_path / "workspaces" / workspace_key(ticket)
        await until(run, lambda: not workspace.exists())
        assert len(pulls.pulls) == 1
    finally:
        await run.stop()


GITLAB_TOKEN = "glpat-follow-e2e-token-0001"


async def test_on_gitlab_a_failed_job_is_fixed_a_discussion_reworked_and_the_mr_merged(
    tmp_path: Path,
) -> None:
    requests = FakeMergeRequests(project="acme/widgets", token=GITLAB_TOKEN)
    with serve_gitlab(FakeGitLab("acme/widgets", GITLAB_TOKEN, merge_requests=requests)) as gitlab:
        remote = remote_repository(tmp_path)
        board = StageBoard(tmp_path)
        board.ticket("DEMO-1", title="Let `calc.py` subtract (the agent leaves a TODO)")
        write_workflow(board, remote, f"{gitlab.base}/api/v4", "gitlab", "acme/widgets")
        run = StageRun(board.workflow, {"CODE_TOKEN": GITLAB_TOKEN}, timeout=60, poll_s=0.1)
        state = run.orchestrator.state
        try:
            await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Plan Review")
            board.set_state("DEMO-1", "Ready")
            await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Human Review")
            (iid,) = requests.merge_requests
            item, first = requests.record(iid), head(remote)
            assert (item.source_branch, item.target_branch) == (BRANCH, "main")
            requests.push(iid, first)
            requests.add_job(iid, "lint", "failed", trace="\x1b[31mcalc.py:3: TODO left\x1b[0m")
            await until(run, lambda: head(remote) != first and "DEMO-1" not in state.claimed)
            notes = run.notes("DEMO-1")
            assert "calc.py:3: TODO left" in notes and "\x1b[" not in notes
            fixed = head(remote)
            requests.push(iid, fixed)
            requests.add_job(iid, "lint", "success")
            thread = requests.add_discussion(
                iid, "Name the parameters x and y.", "amy", path="calc.py", line=2
            )
            await until(run, lambda: board.state_of("DEMO-1") == "Rework")
            await run.settle("DEMO-1", lambda: board.state_of("DEMO-1") == "Human Review")
            assert "Name the parameters x and y." in run.notes("DEMO-1")
            reworked = head(remote)
            requests.push(iid, reworked)
            requests.add_job(iid, "lint", "success")
            requests.resolve(iid, thread)
            requests.approve(iid, "amy")
            await until(run, lambda: board.state_of("DEMO-1") == "Done")
            merges = [
                r for r in requests.requests if r.method == "PUT" and r.path.endswith("/merge")
            ]
            assert merges and merges[-1].body["sha"] == reworked
            assert len(requests.merge_requests) == 1
        finally:
            await run.stop()


def test_kill_9_after_the_pull_request_was_opened_or_merged_repeats_nothing(
    tmp_path: Path, github: FakeGitHub
) -> None:
    """The daemon dies with its answer lost twice: once after GitHub opened the pull request
    (the answer never came back), once right after the merge call. Each restart finds what
    was done and goes on: one pull request, one merge, the ticket Done."""
    remote = remote_repository(tmp_path)
    board = StageBoard(tmp_path)
    board.ticket("DEMO-1", state="Ready", title="Let `calc.py` subtract")
    write_workflow(board, remote, github.base)
    env = {"CODE_TOKEN": TOKEN, "DEMO_AGENT_DELAY_MS": "0"}
    pulls = github.pulls
    opened = r"/repos/acme/widgets/pulls"
    pulls.fail("POST", opened, 502, applied=True)  # opened, but the answer is lost

    def posted() -> bool:
        return any(e.method == "POST" and e.path == opened for e in github.requests)

    def merges() -> list[Any]:
        return [e for e in github.requests if e.method == "PUT" and e.path.endswith("/merge")]

    first = Daemon(board, env)
    try:
        assert wait_until(posted, 60), "".join(first.lines)
        first.kill9()
    finally:
        first.stop()
    assert len(pulls.pulls) == 1 and board.state_of("DEMO-1") == "Ready"

    second = Daemon(board, env)
    try:
        assert wait_until(lambda: board.state_of("DEMO-1") == "Human Review", 60)
        (pull,) = pulls.pulls  # found, not opened again
        number = pull["number"]
        pulls.push(number, head(remote))
        pulls.add_check(number, "lint", "success", required=True)
        pulls.add_review(number, "alice", "APPROVED")

        def merged() -> bool:
            return any(e.status == 200 for e in merges())

        assert wait_until(merged, 60), "".join(second.lines)
        second.kill9()
    finally:
        second.stop()

    before_restart = len(merges())
    third = Daemon(board, env)
    try:
        assert wait_until(lambda: board.state_of("DEMO-1") == "Done", 60), "".join(third.lines)
    finally:
        third.stop()
    # A reading torn by the test's own push may have named the older head once (409, read
    # again); what counts is one merge done, none after the restart, one pull request.
    assert len(merges()) == before_restart
    assert [e.status for e in merges()].count(200) == 1 and len(pulls.pulls) == 1
    assert pulls.record(number)["merged_at"]
    assert board.text("DEMO-1").count("symphony · merged") == 1


SHAPED_SECRETS = (
    "ghp_" + "Zq7" * 12,  # a GitHub token the daemon was never told
    "sk-ant-api03-" + "Kk9" * 12,  # an Anthropic key
    "AKIA" + "QWERTYUIOPASDFGH",  # an AWS access key id
    "glpat-" + "Lm3" * 8,  # a GitLab token
    "xoxb-2048-" + "Sl4" * 6,  # a Slack token
)


def test_secrets_in_ci_logs_and_reviews_are_relayed_nowhere(
    tmp_path: Path, github: FakeGitHub
) -> None:
    """A failing job's log echoes the repository's token and other credentials (as `set -x`
    prints them), its annotation and a reviewer's comment carry more: after the fix run and
    the rework, no file under the workflow's folder, no request the daemon sent and no line it
    printed holds any of them, raw, URL-encoded or JSON-escaped."""
    from urllib.parse import quote

    remote = remote_repository(tmp_path)
    board = StageBoard(tmp_path)
    board.ticket("DEMO-1", state="Ready", title="Let `calc.py` subtract")
    write_workflow(board, remote, github.base)
    secrets = (TOKEN, *SHAPED_SECRETS)
    leaked = " ".join(secrets)
    env = {"CODE_TOKEN": TOKEN, "DEMO_AGENT_DELAY_MS": "0"}
    daemon = Daemon(board, env, "--logs-root", str(tmp_path / "logs"))
    pulls = github.pulls
    try:
        assert wait_until(lambda: board.state_of("DEMO-1") == "Human Review", 60), daemon.lines
        (pull,) = pulls.pulls
        number, first = pull["number"], head(remote)
        pulls.push(number, first)
        pulls.add_check(
            number, "lint", "failure", required=True,
            summary=f"lint failed; Authorization: Bearer {SHAPED_SECRETS[0]}",
            annotations=(("calc.py", 1, f"token {SHAPED_SECRETS[1]} in code"),),
            log=f"+ export GH_TOKEN={TOKEN}\n+ export KEYS='{leaked}'\nError: lint failed\n",
        )  # fmt: skip
        assert wait_until(lambda: head(remote) != first, 60), "".join(daemon.lines)[-3000:]
        fixed = head(remote)
        pulls.push(number, fixed)
        pulls.add_check(number, "lint", "success", required=True)
        pulls.add_thread(number, "calc.py", 2, ("alice", f"Do not commit {leaked}."))
        pulls.add_review(number, "alice", "CHANGES_REQUESTED", f"Rotate {SHAPED_SECRETS[2]}!")
        assert wait_until(lambda: head(remote) != fixed, 60), "".join(daemon.lines)[-3000:]
        assert wait_until(lambda: board.state_of("DEMO-1") == "Human Review", 60)
    finally:
        daemon.stop()
    notes = next((tmp_path / "workspaces").glob("*/NOTES/*.md")).read_text()
    assert "lint failed" in notes and "[redacted]" in notes  # the prompts carried the rest
    forms = {s: {s, quote(s, safe=""), json.dumps(s)[1:-1]} for s in secrets}
    written = [
        path for path in tmp_path.rglob("*")
        if path.is_file() and ".git" not in path.parts and "remote.git" not in path.parts
        and "seed" not in path.parts
    ]  # fmt: skip
    assert any(p.name == "state.db" for p in written) and any(p.suffix == ".log" for p in written)
    sent = [json.dumps(e.body) for e in github.requests if e.body is not None]
    found = []
    for shapes in forms.values():
        for form in shapes:
            found += [str(p) for p in written if form.encode() in p.read_bytes()]
            found += [f"request {body[:80]}" for body in sent if form in body]
            found += [f"output {line[:80]}" for line in daemon.lines if form in line]
    assert found == []

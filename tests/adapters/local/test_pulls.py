"""The `local` code host against a real bare repository: pull request files a person edits,
checks run on each head commit in a clean clone, merges that land in the bare repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from symphony.codehost.contract import (
    CODE_HOST_HEAD_MOVED,
    CODE_HOST_REJECTED,
    CODE_HOST_RESPONSE,
    CheckState,
    CodeHostError,
    DiffSide,
    LineComment,
    PullRequestDraft,
    PullState,
    ReviewDecision,
    ReviewDraft,
    ReviewVerdict,
    code_host_adapter,
    publish_pull_request,
)
from symphony.config.repository import CheckCommand, CodeHostKind, MergeMethod, RepositorySettings
from symphony_adapters.local.pulls import REPLY_AUTHOR, LocalPulls
from tests.workspace.test_worktrees import git

BRANCH = "symphony/DEMO-1"


class Repo:
    """A bare remote with `main`, and a clone where a person (or an agent) commits."""

    def __init__(self, tmp_path: Path) -> None:
        self.remote = tmp_path / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.remote)], check=True)
        self.work = tmp_path / "work"
        subprocess.run(["git", "clone", "-q", str(self.remote), str(self.work)], check=True)
        self.commit("calc.py", "def add(a, b):\n    return a + b\n", "base")
        git(self.work, "push", "-q", "origin", "HEAD:main")
        git(self.work, "checkout", "-q", "-b", BRANCH)

    def commit(self, name: str, text: str, message: str) -> str:
        (self.work / name).write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", message)
        return git(self.work, "rev-parse", "HEAD")

    def push(self, ref: str = BRANCH) -> str:
        git(self.work, "push", "-q", "origin", f"HEAD:refs/heads/{ref}")
        return git(self.work, "rev-parse", "HEAD")

    def rev(self, ref: str) -> str:
        return git(self.remote, "rev-parse", ref)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def host(repo: Repo, tmp_path: Path, *checks: CheckCommand) -> LocalPulls:
    settings = RepositorySettings(
        kind=CodeHostKind.LOCAL,
        slug=str(tmp_path / "pulls"),
        api_url="",
        token="",
        token_env=None,
        remote=str(repo.remote),
        checks=checks,
    )
    made = code_host_adapter("local").create(settings)
    assert isinstance(made, LocalPulls)
    return made


DRAFT = PullRequestDraft(
    branch=BRANCH, title="DEMO-1: add subtract", body="## Evidence\n\ntests: exit 0\n"
)
NO_TODO = CheckCommand("no-todo", "! git grep -n TODO -- '*.py'")


SUBTRACT = "def sub(a, b):\n    return a - b\n"


async def opened(repo: Repo, tmp_path: Path) -> tuple[LocalPulls, str]:
    """The ticket's branch with one commit pushed and its pull request (#1) opened: the host
    and the branch's head."""
    head = repo.commit("calc.py", SUBTRACT, "DEMO-1: subtract")
    repo.push()
    pulls = host(repo, tmp_path)
    await publish_pull_request(pulls, DRAFT)
    return pulls, head


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new, 1))


async def test_publishing_twice_opens_one_file_and_keeps_what_a_person_wrote(
    repo: Repo, tmp_path: Path
) -> None:
    sha = repo.commit("calc.py", SUBTRACT, "DEMO-1: subtract")
    repo.push()
    pulls = host(repo, tmp_path)
    first = await publish_pull_request(pulls, DRAFT)
    assert first.opened and first.pull_request.number == 1
    assert first.pull_request.base == "main" and first.pull_request.head_sha == sha
    path = tmp_path / "pulls" / "1.md"
    assert first.pull_request.url == path.as_uri()
    text = path.read_text()
    assert "branch: symphony/DEMO-1" in text and "tests: exit 0" in text
    assert "review: none" in text  # the person's part, said in the file itself

    edit(path, "review: none", "review: approved")
    second = await publish_pull_request(
        pulls, PullRequestDraft(branch=BRANCH, title="DEMO-1: subtract", body="new evidence")
    )
    assert not second.opened and second.pull_request.number == 1
    text = path.read_text()
    assert "review: approved" in text and "# a reviewer sets approved" in text
    assert "title: 'DEMO-1: subtract'" in text or 'title: "DEMO-1: subtract"' in text
    assert text.endswith("---\nnew evidence\n")
    assert sorted(p.name for p in (tmp_path / "pulls").iterdir()) == ["1.md"]


async def test_a_check_runs_once_per_head_in_a_clean_clone_and_says_what_failed(
    repo: Repo, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    counted = CheckCommand("counted", f"echo run >> {runs}")
    repo.commit("calc.py", "def sub(a, b):\n    return a - b  # TODO tidy\n", "DEMO-1: sub")
    (repo.work / "stray.py").write_text("# TODO uncommitted, never seen by the check\n")
    head = repo.push()
    pulls = host(repo, tmp_path, NO_TODO, counted)
    opened = await publish_pull_request(pulls, DRAFT)

    status = await pulls.read_status(opened.pull_request.number)
    assert [c.state for c in status.checks] == [CheckState.PENDING, CheckState.PENDING]
    await pulls.checks_settled()
    status = await pulls.read_status(1)
    todo, count = status.checks
    assert todo.state is CheckState.FAILED and todo.required
    assert todo.output is not None and "calc.py:2:" in todo.output and "(exit 1)" in todo.output
    assert "stray.py" not in todo.output
    assert count.state is CheckState.PASSED and count.output is None

    # The results are the file's: a new host (a restart) reads them and runs nothing.
    again = host(repo, tmp_path, NO_TODO, counted)
    assert [c.state for c in (await again.read_status(1)).checks] == [
        CheckState.FAILED,
        CheckState.PASSED,
    ]
    await again.checks_settled()
    assert runs.read_text() == "run\n"
    text = (tmp_path / "pulls" / "1.md").read_text()
    assert f"head: {head}" in text
    assert "# a reviewer sets approved" in text  # the daemon's write kept the file's comments

    (repo.work / "stray.py").unlink()
    repo.commit("calc.py", SUBTRACT, "DEMO-1: no TODO")
    repo.push()
    await again.read_status(1)
    await again.checks_settled()
    assert [c.state for c in (await again.read_status(1)).checks] == [CheckState.PASSED] * 2
    assert runs.read_text() == "run\nrun\n"
    await pulls.aclose()
    await again.aclose()


async def test_a_check_past_its_timeout_fails_and_its_processes_end(
    repo: Repo, tmp_path: Path
) -> None:
    repo.push()
    slow = CheckCommand("slow", "sleep 60 & sleep 60", timeout_ms=1000)
    pulls = host(repo, tmp_path, slow)
    await publish_pull_request(pulls, DRAFT)
    await pulls.read_status(1)
    await pulls.checks_settled()
    (check,) = (await pulls.read_status(1)).checks
    assert check.state is CheckState.FAILED and check.output is not None
    assert "took over 1 s" in check.output
    left = subprocess.run(["pgrep", "-f", "sleep 60 & sleep 60"], capture_output=True)
    assert left.returncode == 1


async def test_reviews_and_threads_are_what_the_person_wrote_and_replies_are_appended(
    repo: Repo, tmp_path: Path
) -> None:
    pulls, _ = await opened(repo, tmp_path)
    status = await pulls.read_status(1)
    assert status.review_decision is ReviewDecision.REVIEW_REQUIRED
    assert status.approvals_required == 1 and status.reviews == () and status.threads == ()

    path = tmp_path / "pulls" / "1.md"
    edit(path, "review: none", "review: changes_requested\nreviewer: ana")
    edit(path, 'review_comment: ""', "review_comment: Name the operands")
    edit(
        path,
        "threads: []",
        "threads:\n"
        "  - path: calc.py\n    line: 1\n"
        "    comments:\n      - {author: ana, body: Call it minus}\n"
        "  - id: old\n    resolved: true\n    comments: [Done before]\n",
    )
    status = await pulls.read_status(1)
    assert status.review_decision is ReviewDecision.CHANGES_REQUESTED
    (review,) = status.reviews
    assert (review.author, review.state, review.body) == (
        "ana",
        "changes_requested",
        "Name the operands",
    )
    (thread,) = status.threads
    assert (thread.id, thread.path, thread.line) == ("1", "calc.py", 1)
    assert [(c.author, c.body) for c in thread.comments] == [("ana", "Call it minus")]

    await pulls.reply_to_thread(1, "1", "Addressed in abc123")
    (thread,) = (await pulls.read_status(1)).threads
    assert thread.comments[-1].author == REPLY_AUTHOR
    assert thread.comments[-1].body == "Addressed in abc123"
    with pytest.raises(CodeHostError) as missing:
        await pulls.reply_to_thread(1, "9", "nobody")
    assert missing.value.category == CODE_HOST_RESPONSE

    edit(path, "review: changes_requested", "review: approved")
    status = await pulls.read_status(1)
    assert status.review_decision is ReviewDecision.APPROVED
    assert status.reviews[0].author == "ana"


@pytest.mark.parametrize("method", list(MergeMethod))
async def test_a_merge_lands_in_the_bare_repository_once(
    repo: Repo, tmp_path: Path, method: MergeMethod
) -> None:
    base_before = repo.rev("main")
    pulls, head = await opened(repo, tmp_path)
    assert (await pulls.read_status(1)).mergeable is True

    merged = await pulls.merge(1, head, method)
    assert merged.sha == repo.rev("main")
    assert repo.rev("main^{tree}") == repo.rev(f"{head}^{{tree}}")
    parents = git(repo.remote, "rev-list", "--parents", "-n1", "main").split()[1:]
    expected = {
        MergeMethod.SQUASH: [base_before],
        MergeMethod.MERGE: [base_before, head],
        MergeMethod.REBASE: [base_before],  # a fast-forward: the head itself
    }[method]
    assert parents == expected
    status = await pulls.read_status(1)
    assert status.pull.state is PullState.MERGED
    # Asked again (an answer lost in a crash): the same merge, nothing new on main.
    assert await pulls.merge(1, head, method) == merged
    assert repo.rev("main") == merged.sha
    # The branch is a person's to delete once merged: the pull request still reads.
    git(repo.remote, "branch", "-D", BRANCH)
    gone = await pulls.read_status(1)
    assert gone.pull.state is PullState.MERGED and gone.pull.head_sha is None


async def test_a_merge_refuses_a_moved_head_and_a_conflict(repo: Repo, tmp_path: Path) -> None:
    pulls, first = await opened(repo, tmp_path)
    repo.commit("notes.md", "more\n", "a person's push")
    repo.push()
    with pytest.raises(CodeHostError) as moved:
        await pulls.merge(1, first, MergeMethod.SQUASH)
    assert moved.value.category == CODE_HOST_HEAD_MOVED

    # main changes the same line: the branch no longer merges.
    git(repo.work, "checkout", "-q", "main")
    repo.commit("calc.py", "def add(x, y):\n    return x + y\n", "rename on main")
    repo.push("main")
    status = await pulls.read_status(1)
    assert status.mergeable is False
    with pytest.raises(CodeHostError) as refused:
        await pulls.merge(1, status.pull.head_sha or "", MergeMethod.SQUASH)
    assert refused.value.category == CODE_HOST_REJECTED and "conflicts with main" in str(
        refused.value
    )


async def test_a_merge_interrupted_by_a_crash_is_finished_not_repeated(
    repo: Repo, tmp_path: Path
) -> None:
    pulls, head = await opened(repo, tmp_path)
    path = tmp_path / "pulls" / "1.md"
    # The crash came after the commit was named and before the base moved: not merged.
    edit(path, "review: none", f"merging: {head}\nreview: none")
    status = await pulls.read_status(1)
    assert status.pull.state is PullState.OPEN and "merging: null" in path.read_text()
    # After the base moved and before the file said so: merged, and merging again is a no-op.
    git(repo.remote, "update-ref", "refs/heads/main", head)
    edit(path, "merging: null", f"merging: {head}")
    status = await pulls.read_status(1)
    assert status.pull.state is PullState.MERGED
    assert (await pulls.merge(1, head, MergeMethod.SQUASH)).sha == head
    assert repo.rev("main") == head


async def test_a_broken_file_is_an_error_naming_it(repo: Repo, tmp_path: Path) -> None:
    repo.push()
    pulls = host(repo, tmp_path)
    await publish_pull_request(pulls, DRAFT)
    path = tmp_path / "pulls" / "1.md"
    edit(path, "state: open", "state: [open")
    with pytest.raises(CodeHostError) as broken:
        await pulls.read_status(1)
    assert broken.value.category == CODE_HOST_RESPONSE and str(path) in str(broken.value)
    edit(path, "state: [open", "state: reopened")
    with pytest.raises(CodeHostError, match="state must be open, merged or closed"):
        await pulls.read_status(1)
    # A file that cannot be read does not hide the others, nor take a number twice.
    second = await pulls.open_pull_request(
        PullRequestDraft(branch="symphony/DEMO-2", title="t", body=""), "main"
    )
    assert second.number == 2


async def test_a_review_from_the_page_is_written_into_the_file_as_threads_and_a_verdict(
    repo: Repo, tmp_path: Path
) -> None:
    pulls, _ = await opened(repo, tmp_path)
    comments = (
        LineComment("calc.py", 2, "Call it minus"),
        LineComment("calc.py", 4, "Both lines repeat", start_line=3),
        LineComment("README.md", 1, "Keep the old title", side=DiffSide.LEFT),
    )
    draft = ReviewDraft(ReviewVerdict.REQUEST_CHANGES, "Changes requested by Ada.", None,
                        comments, by="Ada")  # fmt: skip
    posted = await pulls.submit_review(1, draft)
    assert posted.threads == ("r1", "r2", "r3")
    status = await pulls.read_status(1)
    assert status.review_decision is ReviewDecision.CHANGES_REQUESTED
    assert [(r.author, r.body) for r in status.reviews] == [("Ada", "Changes requested by Ada.")]
    assert [(t.id, t.path, t.line) for t in status.threads] == [
        ("r1", "calc.py", 2),
        ("r2", "calc.py", 4),
        ("r3", "README.md", 1),
    ]
    text = (tmp_path / "pulls" / "1.md").read_text()
    assert "start_line: 3" in text and "side: left" in text
    await pulls.reply_to_thread(1, "r2", "Addressed in abc1234: merged the two lines.")
    thread = (await pulls.read_status(1)).threads[1]
    assert thread.comments[-1].body == "Addressed in abc1234: merged the two lines."

    approval = ReviewDraft(ReviewVerdict.COMMENT, "Approved by Ada at abc1234.", by="Ada")
    assert (await pulls.submit_review(1, approval)).threads == ()
    assert "Approved by Ada at abc1234." in (tmp_path / "pulls" / "1.md").read_text()

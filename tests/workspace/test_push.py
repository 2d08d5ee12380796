"""Pushing a ticket's branch with the daemon's credential, to real remotes: a bare repository on
disk (one with a hook that refuses, one a person pushed to first) and a smart-HTTP server that
demands the token, with a `git` on PATH that records every command line it was given."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from symphony.base.secrets import SecretMasker
from symphony.workspace.push import PUSH_FAILED, PUSH_REJECTED, PushError, push_branch
from tests.workspace.git_http import git_http_server
from tests.workspace.test_worktrees import git

TOKEN = "glpat-daemon-secret-0123456789"


def ticket_workspace(tmp_path: Path, name: str = "work", **added: str) -> Path:
    """A clone of `remote.git` on branch `symphony/abc-1`, one commit over the remote's main
    (calc.py changed, and the `added` files), remote `origin`."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    work = tmp_path / name
    subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True)
    (work / "calc.py").write_text("x = 1\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    git(work, "push", "-q", "origin", "HEAD:main")
    git(work, "checkout", "-q", "-b", "symphony/abc-1")
    (work / "calc.py").write_text("x = 2\n")
    for path, text in added.items():
        (work / path).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "ABC-1: change x")
    return work


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A ticket's workspace with one commit on top of the remote's main, remote `origin`."""
    return ticket_workspace(tmp_path)


def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}


async def push(workspace: Path, remote: str, **kw: object) -> str:
    pushed = await push_branch(
        workspace, "symphony/abc-1", remote, token=TOKEN, username="oauth2", env=env(),
        masker=SecretMasker(), **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    return pushed.sha


async def test_the_branch_lands_on_the_remote_and_a_second_push_is_a_success(
    workspace: Path, tmp_path: Path
) -> None:
    sha = await push(workspace, "origin")
    assert sha == git(workspace, "rev-parse", "HEAD")
    remote = tmp_path / "remote.git"
    assert git(remote, "rev-parse", "refs/heads/symphony/abc-1") == sha
    assert await push(workspace, "origin") == sha  # after a crash: pushed again, nothing lost


async def test_a_hook_that_refuses_is_reported_in_the_remotes_words(
    workspace: Path, tmp_path: Path
) -> None:
    hook = tmp_path / "remote.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'branches under symphony/ are protected' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(PushError) as refused:
        await push(workspace, "origin")
    assert refused.value.category == PUSH_REJECTED
    assert "branches under symphony/ are protected" in refused.value.message


async def test_a_branch_a_person_pushed_to_is_never_overwritten(
    workspace: Path, tmp_path: Path
) -> None:
    await push(workspace, "origin")
    person = tmp_path / "person"
    subprocess.run(["git", "clone", "-q", "-b", "symphony/abc-1", str(tmp_path / "remote.git"),
                    str(person)], check=True)  # fmt: skip
    (person / "notes.md").write_text("review notes\n")
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", "a person's commit")
    git(person, "push", "-q", "origin", "symphony/abc-1")
    theirs = git(person, "rev-parse", "HEAD")
    (workspace / "calc.py").write_text("x = 3\n")
    git(workspace, "commit", "-q", "-am", "ABC-1: again")
    with pytest.raises(PushError) as refused:
        await push(workspace, "origin")
    assert refused.value.category == PUSH_REJECTED
    assert "fetch first" in refused.value.message or "non-fast-forward" in refused.value.message
    assert git(tmp_path / "remote.git", "rev-parse", "refs/heads/symphony/abc-1") == theirs


async def test_an_unknown_remote_fails_the_push_without_a_traceback(workspace: Path) -> None:
    with pytest.raises(PushError) as failed:
        await push(workspace, "nowhere")
    assert failed.value.category == PUSH_FAILED and "nowhere" in failed.value.message


def recording_git(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `git` logs its arguments and environment, then runs the real one."""
    bin_dir, log = tmp_path / "bin", tmp_path / "git-calls.log"
    bin_dir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True)
    wrapper = bin_dir / "git"
    wrapper.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n'
        f'env | grep -c "^SYMPHONY_PUSH_TOKEN=" >> {log}\nexec {real.stdout.strip()} "$@"\n'
    )
    wrapper.chmod(0o755)
    return {**env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


async def test_over_http_the_token_authenticates_and_appears_in_no_command_line(
    workspace: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(served / "widgets.git")],
                   check=True)  # fmt: skip
    recorded_env, log = recording_git(tmp_path)
    with git_http_server(served, "oauth2", TOKEN) as server:
        url = server.url("widgets.git")
        pushed = await push_branch(
            workspace, "symphony/abc-1", url, token=TOKEN, username="oauth2",
            env=recorded_env, masker=SecretMasker(),
        )  # fmt: skip
        assert server.expected in server.seen  # the daemon's credential reached the server
        with pytest.raises(PushError) as denied:
            await push_branch(
                workspace, "symphony/abc-1", url, token="wrong-token-123456", username="oauth2",
                env=env(), masker=SecretMasker(),
            )  # fmt: skip
    assert git(served / "widgets.git", "rev-parse", "refs/heads/symphony/abc-1") == pushed.sha
    assert denied.value.category == PUSH_FAILED
    assert "wrong-token-123456" not in denied.value.message
    calls = log.read_text()
    assert TOKEN not in calls and "push --porcelain" in calls


async def test_git_output_that_echoes_the_token_is_masked(workspace: Path) -> None:
    url = f"https://oauth2:{TOKEN}@127.0.0.1:9/nowhere.git"
    with pytest.raises(PushError) as failed:
        await push(workspace, url, timeout_s=20)
    assert TOKEN not in failed.value.message


async def test_the_verified_commit_is_pushed_whatever_the_agent_checked_out_since(
    workspace: Path, tmp_path: Path
) -> None:
    verified = git(workspace, "rev-parse", "HEAD")
    (workspace / "calc.py").write_text("x = 'unverified'\n")
    git(workspace, "commit", "-q", "-am", "after the checks")
    assert await push(workspace, "origin", commit=verified) == verified
    remote = tmp_path / "remote.git"
    assert git(remote, "rev-parse", "refs/heads/symphony/abc-1") == verified
    with pytest.raises(PushError, match="lacks the verified commit"):
        await push(workspace, "origin", commit="0" * 40)

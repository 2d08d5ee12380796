"""Publishing refuses what carries a run's canary: a commit message, a changed file, the pull
request's body; nothing is pushed and no pull request is opened."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from symphony.base.secrets import SecretMasker
from symphony.config.repository import CodeHostKind, RepositorySettings
from symphony.core.stage_outcomes import PublishIntent
from symphony.daemon.publish import Published, Publisher, Suspected
from tests.factories import make_issue
from tests.fakes.code_host import MemoryCodeHost

CANARY = "cnr00112233445566778899aabb"
ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.test",
       "PATH": "/usr/bin:/bin"}  # fmt: skip


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    )
    return done.stdout


def workspace(tmp_path: Path) -> tuple[Path, Path]:
    remote, work = tmp_path / "remote.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    git(work, "commit", "-q", "--allow-empty", "-m", "start")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    git(work, "fetch", "-q", "origin")
    git(work, "checkout", "-q", "-b", "symphony/A-1")
    return remote, work


def publisher(host: MemoryCodeHost, remote: Path) -> Publisher:
    repository = RepositorySettings(CodeHostKind.LOCAL, "pulls", "", "", None, str(remote))
    return Publisher(host, repository, ENV, SecretMasker(), canaries=(CANARY,))


@pytest.mark.parametrize(
    ("file_text", "message", "body", "what"),
    [
        ("fine\n", f"Fix it {CANARY}", "Done.", "pushed commits"),
        (f"token = '{CANARY}'\n", "Fix it", "Done.", "pushed commits"),
        ("fine\n", "Fix it", f"Done. {CANARY}", "title or body"),
    ],
)
async def test_a_publication_carrying_the_canary_is_refused_before_the_push(
    tmp_path: Path, file_text: str, message: str, body: str, what: str
) -> None:
    remote, work = workspace(tmp_path)
    (work / "calc.py").write_text(file_text)
    git(work, "add", "calc.py")
    git(work, "commit", "-q", "-m", message)
    host = MemoryCodeHost(remote=remote)
    intent = PublishIntent("{{ issue.identifier }}", body, base="main")
    published = await publisher(host, remote).publish(work, intent, make_issue("A-1"))
    assert isinstance(published, Suspected) and what in published.why
    assert CANARY not in published.why
    assert host.pulls == {} and host.head_of("symphony/A-1") is None


async def test_a_clean_publication_goes_out(tmp_path: Path) -> None:
    remote, work = workspace(tmp_path)
    (work / "calc.py").write_text("fine\n")
    git(work, "add", "calc.py")
    git(work, "commit", "-q", "-m", "Fix it")
    host = MemoryCodeHost(remote=remote)
    intent = PublishIntent("{{ issue.identifier }}", "Done.", base="main")
    published = await publisher(host, remote).publish(work, intent, make_issue("A-1"))
    assert isinstance(published, Published) and host.head_of("symphony/A-1") is not None

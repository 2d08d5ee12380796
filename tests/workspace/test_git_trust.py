"""The daemon's git trusts nothing a repository says about running programs: a repository an
agent could write, with every execution hook git offers planted in it (hooks, fsmonitor,
filters, diff and textconv drivers, pagers, ssh and credential commands), is read, diffed,
checked and pushed by the daemon without any of them running; a configuration no value can
make harmless (a merge driver, a rewritten URL) makes the daemon refuse, saying which key."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from symphony.base.secrets import SecretMasker
from symphony.config.sections import WorktreeSettings
from symphony.workspace.diff import branch_diff
from symphony.workspace.facts import changed_files, merge_check, workspace_facts
from symphony.workspace.git import (
    GIT_REFUSED,
    SAFE_GIT_SH,
    git_environment,
    git_output,
    run_git,
)
from symphony.workspace.push import push_branch
from symphony.workspace.worktrees import Worktrees
from tests.workspace.test_push import ticket_workspace
from tests.workspace.test_worktrees import git

HOOKS = (
    "post-checkout", "pre-push", "reference-transaction", "post-index-change", "pre-commit",
    "post-commit", "pre-auto-gc", "post-rewrite", "push-to-checkout", "fsmonitor-watchman",
)  # fmt: skip


def plant(repository: Path, markers: Path) -> None:
    """Everything in `repository`'s git metadata that could run a program writes a marker."""
    git_dir = Path(git(repository, "rev-parse", "--absolute-git-dir"))
    common = Path(git(repository, "rev-parse", "--git-common-dir"))
    common = common if common.is_absolute() else (repository / common).resolve()

    def script(name: str) -> str:
        path = markers / f"{name}.sh"
        path.write_text(f"#!/bin/sh\ntouch {markers / name}\ncat\n")
        path.chmod(0o755)
        return str(path)

    for folder in {git_dir / "hooks", common / "hooks"}:
        folder.mkdir(exist_ok=True)
        for hook in HOOKS:
            (folder / hook).write_text(f"#!/bin/sh\ntouch {markers / hook}\n")
            (folder / hook).chmod(0o755)
    settings = {
        "core.fsmonitor": script("fsmonitor"),
        "core.pager": script("pager"),
        "core.sshCommand": script("ssh"),
        "core.askPass": script("askpass"),
        "credential.helper": f"!{script('credential')}",
        "diff.external": script("external-diff"),
        "diff.evil.textconv": script("textconv"),
        "diff.evil.command": script("diff-command"),
        "filter.evil.clean": script("clean"),
        "filter.evil.smudge": script("smudge"),
        "filter.evil.process": script("filter-process"),
        "filter.evil.required": "true",
        "log.showSignature": "true",
        "gpg.program": script("gpg"),
    }
    for key, value in settings.items():
        subprocess.run(["git", "--git-dir", str(common), "config", key, value], check=True)
    info = common / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text("* diff=evil filter=evil\n")
    (repository / ".gitattributes").write_text("* diff=evil filter=evil\n")


def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir() if not p.name.endswith(".sh"))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A clone on a ticket's branch, one commit over main that adds a name git quotes, and a
    remote to push to."""
    return ticket_workspace(tmp_path, "café work", **{"café.py": "y = 1\n"})


async def test_no_program_of_the_repository_runs_when_the_daemon_reads_diffs_and_pushes(
    workspace: Path, markers: Path, tmp_path: Path
) -> None:
    plant(workspace, markers)
    (workspace / "calc.py").write_text("x = 3\n")  # uncommitted: status must look at it
    os.utime(workspace / "calc.py", (1, 1))
    facts = await workspace_facts(workspace, base_ref="main", start_commit=None, env=env())
    assert facts is not None and facts.uncommitted >= 1 and len(facts.commits) == 1
    assert "calc.py" in facts.diff_stat
    changed = await changed_files(workspace, "main", env())
    assert {"calc.py", "café.py"} <= changed
    diff = await branch_diff(workspace, "main", env())
    assert diff is not None and {f.path for f in diff.files} == {"calc.py", "café.py"}
    check = await merge_check(workspace, "main", "main", env())
    assert check.clean is True
    pushed = await push_branch(
        workspace, "symphony/abc-1", "origin", token="", username="x", env=env(),
        masker=SecretMasker(),
    )  # fmt: skip
    remote = tmp_path / "remote.git"
    assert git(remote, "rev-parse", "refs/heads/symphony/abc-1") == pushed.sha
    assert fired(markers) == []


async def test_a_merge_driver_or_a_rewritten_url_makes_the_daemon_refuse_and_say_why(
    workspace: Path, markers: Path
) -> None:
    for key, value in (
        ("merge.evil.driver", f"touch {markers / 'merge'}"),
        ("url.https://elsewhere.invalid/.insteadOf", "https://example.com/"),
    ):
        git(workspace, "config", key, value)
        run = await run_git("-C", str(workspace), "merge-tree", "--write-tree", "HEAD", "main",
                            env=env())  # fmt: skip
        assert run.returncode == GIT_REFUSED
        assert key.split(".")[0] in run.err and "remove it" in run.err
        assert await branch_diff(workspace, "main", env()) is None
        git(workspace, "config", "--unset", key)
    assert fired(markers) == []
    assert await branch_diff(workspace, "main", env()) is not None


async def test_the_shared_store_s_planted_hooks_never_run_when_worktrees_are_made(
    tmp_path: Path, workspace: Path, markers: Path
) -> None:
    store = Worktrees(WorktreeSettings(str(tmp_path / "remote.git")), tmp_path / "ws", env())
    (tmp_path / "ws").mkdir()
    await store.add(tmp_path / "ws" / "A-1", "symphony/a-1")
    plant(tmp_path / "ws" / "A-1", markers)
    await store.add(tmp_path / "ws" / "A-2", "symphony/a-2")  # fetch, branch, checkout
    await store.remove(tmp_path / "ws" / "A-1")
    assert (tmp_path / "ws" / "A-2" / "calc.py").read_text() == "x = 1\n"
    assert fired(markers) == []


def test_the_daemon_s_git_gets_only_the_environment_it_needs() -> None:
    given = {
        "PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "HTTPS_PROXY": "http://proxy:3128",
        "GIT_DIR": "/elsewhere", "GIT_CONFIG_GLOBAL": "/home/me/.gitconfig",
        "GIT_SSH_COMMAND": "evil", "SYMPHONY_PUSH_TOKEN": "t", "GITHUB_TOKEN": "ghp_x",
        "LD_PRELOAD": "/tmp/x.so",
    }  # fmt: skip
    built = git_environment(given)
    assert built["PATH"] == "/usr/bin" and built["LC_ALL"] == "C.UTF-8"
    assert built["HTTPS_PROXY"] == "http://proxy:3128"
    assert built["GIT_CONFIG_GLOBAL"] == "/dev/null" and built["GIT_CONFIG_NOSYSTEM"] == "1"
    for name in ("GIT_DIR", "GIT_SSH_COMMAND", "SYMPHONY_PUSH_TOKEN", "GITHUB_TOKEN", "LD_PRELOAD"):
        assert name not in built


async def test_a_host_s_git_is_hardened_the_same_way(workspace: Path, markers: Path) -> None:
    """The POSIX sh the daemon runs on an SSH worker host, run here by dash or sh."""
    plant(workspace, markers)
    os.utime(workspace / "calc.py", (1, 1))
    shell = shutil.which("dash") or "sh"
    for args in (("status", "--porcelain"), ("diff", "--no-textconv", "--stat", "main...HEAD")):
        done = subprocess.run(
            [shell, "-c", SAFE_GIT_SH + 'symphony_git "" "$@"', "sh", *args],
            cwd=workspace, capture_output=True, text=True, env={**env(), "GIT_DIR": "/nowhere"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    git(workspace, "config", "merge.evil.driver", "true")
    done = subprocess.run(
        [shell, "-c", SAFE_GIT_SH + 'symphony_git "" status'], cwd=workspace,
        capture_output=True, text=True, env=env(),
    )  # fmt: skip
    assert done.returncode == GIT_REFUSED and "merge.evil.driver" in done.stderr
    assert fired(markers) == []
    assert await git_output(workspace, env(), "rev-parse", "HEAD") is None  # refused here too

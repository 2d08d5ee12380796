"""`workspace.strategy: worktree` on SSH worker hosts, through the real CLI against the real
sshd lab: each host gets its own store (`.symphony-mirror.git` in its workspace root), made and
fetched there by the host's git; a ticket's workspace is a worktree of it on the ticket's
branch, removed when the ticket is done with its branch kept; a daemon killed with kill -9 in
the middle of `git worktree add` on a host leaves a half-made worktree that the next daemon
discards and makes again; a branch pushed from the host's workspace with the daemon's token
for that command only."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from symphony.base.secrets import SecretMasker
from symphony.config.sections import HostSpec, SshSettings
from symphony.hosts.ssh import SshHost
from symphony.workspace.git import Git
from symphony.workspace.push import PUSH_FAILED, PushError, push_branch
from tests.harness import Board, Daemon, wait_until
from tests.hosts.sshd import REPO, SshLab
from tests.workspace.git_http import git_http_server

pytestmark = pytest.mark.slow

MIRROR = ".symphony-mirror.git"


@pytest.fixture(scope="module")
def lab() -> Iterator[SshLab]:
    # w2's own commands (not its agents' login shells) find a git that, while `hang` exists,
    # completes `worktree add` and then stops for good, as if the daemon's machine died there.
    tools = Path(tempfile.mkdtemp(prefix="symphony-git-", dir="/tmp"))
    tools.chmod(0o1777)  # the hosts' user writes the pid file here
    real = shutil.which("git")
    (tools / "git").write_text(
        f"""#!/bin/sh
case " $* " in
  *" worktree add "*)
    if [ -e {tools}/hang ]; then
      {real} "$@" || exit $?
      echo $$ > {tools}/git.pid
      exec sleep 600
    fi;;
esac
exec {real} "$@"
"""
    )
    (tools / "git").chmod(0o755)
    path = f"{tools}:/usr/local/bin:/usr/bin:/bin"
    lab = SshLab(sshd_options={"w2": f"SetEnv PATH={path}\n"})
    lab.tools = tools  # type: ignore[attr-defined]
    shutil.copy(REPO / "tests/fakes/fake_app_server.py", lab.base / "fake_app_server.py")
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(tools, ignore_errors=True)


def on_host(lab: SshLab, host: str, *argv: str) -> str:
    done = subprocess.run(
        ["ssh", "-F", str(lab.ssh_config), "-o", "BatchMode=yes", host, shlex.join(argv)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def repository(lab: SshLab, name: str) -> Path:
    """A repository the hosts' user can clone: one commit on main."""
    repo = lab.base / name
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "app.py"],
        ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "start"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    subprocess.run(["chown", "-R", str(lab.uid), str(repo)], check=False)
    return repo


def write_workflow(board: Board, lab: SshLab, repo: Path, roots: dict[str, Path]) -> None:
    board.write_workflow(
        codex={"command": f"{lab.python()} {lab.base / 'fake_app_server.py'}"},
        workspace={"root": "workspaces", "strategy": "worktree", "repository": str(repo)},
        worker={
            "ssh_hosts": [
                {"host": host, "max_agents": 1, "workspace_root": str(root)}
                for host, root in roots.items()
            ],
            "ssh": {"config_file": str(lab.ssh_config), "pass_env": ["FAKE_AGENT_*"]},
        },
        polling_ms=300,
    )


def roots_for(lab: SshLab, name: str, hosts: tuple[str, ...]) -> dict[str, Path]:
    roots = {}
    for host in hosts:
        root = lab.servers[host].workspace_root / name
        root.mkdir()
        os.chown(root, lab.uid, -1)
        roots[host] = root
    return roots


def test_each_host_makes_worktrees_of_its_own_store_removed_at_done_with_the_branch_kept(
    tmp_path: Path, lab: SshLab
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1", priority=1)
    board.ticket("ABC-2", priority=2)
    repo = repository(lab, f"repo-{tmp_path.name}")
    roots = roots_for(lab, tmp_path.name, ("w1", "w2"))
    write_workflow(board, lab, repo, roots)
    env = {
        "FAKE_AGENT_SCENARIO": "slow,tool",
        "FAKE_AGENT_DURATION_MS": "1000",
        "FAKE_AGENT_TOOL": "local_move_issue",
        "FAKE_AGENT_TOOL_ARGS": json.dumps({"state": "Human Review"}),
    }
    daemon = Daemon(board, env)
    try:
        handed = wait_until(
            lambda: all(board.state_of(f"ABC-{n}") == "Human Review" for n in (1, 2)), 60
        )
        assert handed, "".join(daemon.lines)
        where = {
            n: next(host for host, root in roots.items() if (root / f"ABC-{n}").is_dir())
            for n in (1, 2)
        }
        assert set(where.values()) == {"w1", "w2"}  # one ticket on each host
        for n, host in where.items():
            root, workspace = roots[host], f"{roots[host]}/ABC-{n}"
            # A worktree of that host's own store, on the ticket's branch.
            assert on_host(lab, host, "git", "-C", workspace, "rev-parse", "--abbrev-ref",
                           "HEAD").strip() == f"symphony/ABC-{n}"  # fmt: skip
            assert (
                (root / f"ABC-{n}" / ".git")
                .read_text()
                .startswith(f"gitdir: {root}/{MIRROR}/worktrees/")
            )
            assert (root / f"ABC-{n}" / "app.py").read_text() == "x = 1\n"
        path = board.tickets / "ABC-1.md"
        path.write_text(path.read_text().replace("state: Human Review", "state: Done", 1))
        host = where[1]
        root = roots[host]
        gone = wait_until(lambda: not (root / "ABC-1").exists(), 30)
        assert gone, "".join(daemon.lines)
    finally:
        assert daemon.stop() == 0
    mirror = f"{root}/{MIRROR}"
    assert "symphony/ABC-1" in on_host(lab, host, "git", "--git-dir", mirror, "branch", "--list")
    assert "ABC-1" not in on_host(lab, host, "git", "--git-dir", mirror, "worktree", "list")
    assert not (board.root / "workspaces").exists()  # nothing of it on this machine


def test_a_worktree_cut_short_on_a_host_by_kill_9_is_made_again_by_the_next_daemon(
    tmp_path: Path, lab: SshLab
) -> None:
    tools: Path = lab.tools  # type: ignore[attr-defined]
    board = Board(tmp_path)
    board.ticket("ABC-1")
    repo = repository(lab, f"repo-{tmp_path.name}")
    roots = roots_for(lab, tmp_path.name, ("w2",))
    write_workflow(board, lab, repo, roots)
    workspace = roots["w2"] / "ABC-1"
    (tools / "hang").touch()
    env = {"FAKE_AGENT_SCENARIO": "complete"}
    first = Daemon(board, env)
    try:
        assert wait_until(lambda: (tools / "git.pid").exists(), 30), "".join(first.lines)
        first.kill9()
    finally:
        first.stop()
        (tools / "hang").unlink()
        os.kill(int((tools / "git.pid").read_text()), signal.SIGKILL)
        (tools / "git.pid").unlink()
    (workspace / "partial").write_text("left by the cut\n")  # what the cut-short checkout left
    os.chown(workspace / "partial", lab.uid, -1)
    second = Daemon(board, env)
    try:
        second.wait_for("removing a half-made worktree", timeout=30)
        second.wait_for("turn completed", timeout=30)
    finally:
        assert second.stop() == 0
    assert not (workspace / "partial").exists()  # the half-made one was discarded
    head = on_host(lab, "w2", "git", "-C", str(workspace), "rev-parse", "--abbrev-ref", "HEAD")
    assert head.strip() == "symphony/ABC-1"
    mirror = f"{roots['w2']}/{MIRROR}"
    assert "ABC-1" in on_host(lab, "w2", "git", "--git-dir", mirror, "worktree", "list")


async def test_a_branch_is_pushed_from_the_host_with_the_daemon_s_token_for_that_command_only(
    tmp_path: Path, lab: SshLab
) -> None:
    token = "glpat-host-push-secret-0123456789"
    root = roots_for(lab, tmp_path.name, ("w1",))["w1"]
    work = root / "ABC-1"
    on_host(lab, "w1", "git", "clone", "-q", str(repository(lab, f"repo-{tmp_path.name}")),
            str(work))  # fmt: skip
    on_host(lab, "w1", "sh", "-c", f"cd {work} && git checkout -q -b symphony/abc-1 && "
            "echo 'x = 2' > app.py && git -c user.name=t -c user.email=t@example.com "
            "commit -q -am 'ABC-1: change x'")  # fmt: skip
    made_there = on_host(lab, "w1", "git", "-C", str(work), "rev-parse", "HEAD").strip()
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(served / "widgets.git")],
                   check=True)  # fmt: skip
    host = SshHost(
        HostSpec("w1", workspace_root=str(root)), SshSettings(config_file=lab.ssh_config),
        os.environ, str(root),
    )  # fmt: skip
    in_a_command_line: list[str] = []
    with git_http_server(served, "oauth2", token) as server:
        serve = server._serve

        def watching(request: Any) -> None:
            # While git pushes, every process's command line, on both sides of the connection.
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError):
                    if token.encode() in (entry / "cmdline").read_bytes():
                        in_a_command_line.append(entry.name)
            serve(request)

        server._serve = watching  # type: ignore[method-assign]
        pushed = await push_branch(
            work, "symphony/abc-1", server.url("widgets.git"), token=token, username="oauth2",
            env={}, masker=SecretMasker(), git=Git(host),
        )  # fmt: skip
        assert server.expected in server.seen  # the daemon's credential reached the server
        with pytest.raises(PushError) as denied:
            await push_branch(
                work, "symphony/abc-1", server.url("widgets.git"), token="wrong-token-123456",
                username="oauth2", env={}, masker=SecretMasker(), git=Git(host),
            )  # fmt: skip
    assert pushed.sha == made_there
    landed = subprocess.run(
        ["git", "-C", str(served / "widgets.git"), "rev-parse", "refs/heads/symphony/abc-1"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert landed == made_there  # the host's commit, pushed from the host
    assert not in_a_command_line
    assert denied.value.category == PUSH_FAILED and "wrong-token" not in denied.value.message
    # Nothing of the token was written on the host: not in the workspace, not in its home.
    home = Path(pwd.getpwuid(lab.uid).pw_dir)
    for folder in (work, home):
        for path in folder.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and not path.is_symlink():
                    assert token.encode() not in path.read_bytes(), path

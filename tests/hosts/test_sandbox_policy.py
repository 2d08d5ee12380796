"""What a sandbox contains, decided before bwrap or podman is named: mounts, program folders,
bridges and the proxy environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from symphony.config.sandbox import Network, SandboxKind, SandboxSettings, WorkspaceAccess
from symphony.hosts.sandbox.bwrap import bridges, proxy_environment
from symphony.hosts.sandbox.policy import (
    RUN_DIR,
    Mount,
    RunPaths,
    etc_secrets,
    git_mounts,
    path_folders,
    plan_mounts,
    program_folders,
)

BWRAP = SandboxSettings(kind=SandboxKind.BWRAP, network=Network.NONE)


def mounts_of(settings: SandboxSettings, tmp_path: Path, **kw: object) -> dict[Path, Mount]:
    paths = RunPaths(home=tmp_path / "home", sockets=tmp_path / "sockets")
    planned = plan_mounts(settings, tmp_path / "ws", paths, **kw)  # type: ignore[arg-type]
    return {m.target: m for m in planned}  # a later mount of a target covers an earlier one


def test_the_workspace_home_and_tmp_are_writable_and_the_system_read_only(tmp_path: Path) -> None:
    mounts = mounts_of(BWRAP, tmp_path)
    assert mounts[tmp_path / "ws"].kind == "rw"
    assert mounts[tmp_path / "home"].kind == "rw"
    assert mounts[Path("/tmp")].kind == "tmpfs"
    assert mounts[Path("/usr")].kind == "ro" and mounts[Path("/etc")].kind == "ro"
    assert mounts[RUN_DIR] == Mount("ro", RUN_DIR, tmp_path / "sockets")
    # Nothing else of the machine: no /root, /home, /var/lib, /srv.
    for absent in ("/root", "/home", "/var/lib", "/srv", "/work"):
        assert Path(absent) not in mounts


def test_a_read_only_stage_mounts_the_workspace_read_only(tmp_path: Path) -> None:
    settings = SandboxSettings(kind=SandboxKind.BWRAP, workspace=WorkspaceAccess.READ_ONLY)
    assert mounts_of(settings, tmp_path)[tmp_path / "ws"].kind == "ro"


def test_extra_folders_and_program_folders_are_added_but_never_twice(tmp_path: Path) -> None:
    settings = SandboxSettings(
        kind=SandboxKind.BWRAP, read_only=(Path("/opt/tools"),), writable=(tmp_path / "cache",)
    )
    mounts = mounts_of(settings, tmp_path, programs=[Path("/opt/tools/bin"), Path("/usr/lib")])
    assert mounts[Path("/opt/tools")].kind == "ro"
    assert Path("/opt/tools/bin") not in mounts  # inside one already mounted
    assert Path("/usr/lib") not in mounts  # inside the system folders
    assert mounts[tmp_path / "cache"].kind == "rw"


def test_private_files_of_etc_are_masked(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "ssl" / "private").mkdir(parents=True)
    (etc / "ssl" / "private").chmod(0o700)
    (etc / "shadow").write_text("root:x")
    (etc / "shadow").chmod(0o640)
    (etc / "hosts").write_text("127.0.0.1 localhost")
    secrets = dict(etc_secrets(etc))
    assert secrets == {etc / "shadow": False, etc / "ssl" / "private": True}
    planned = {m.target: m.kind for m in plan_mounts(
        BWRAP, tmp_path / "ws", RunPaths(tmp_path / "h", tmp_path / "s"), etc=etc)}  # fmt: skip
    assert planned[etc / "shadow"] == "mask" and planned[etc / "ssl" / "private"] == "tmpfs"


def test_a_worktree_gets_its_repository_without_the_other_worktrees(tmp_path: Path) -> None:
    mirror, ws = tmp_path / "mirror.git", tmp_path / "ws"
    subprocess.run(["git", "init", "-q", "--bare", str(mirror)], check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    subprocess.run(["git", "-C", str(seed), "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True, env=env)  # fmt: skip
    subprocess.run(["git", "-C", str(seed), "push", "-q", str(mirror), "main"], check=True)
    subprocess.run(["git", "-C", str(mirror), "worktree", "add", "-q", "-b", "t1", str(ws), "main"],
                   check=True)  # fmt: skip
    empty = tmp_path / "empty"
    mounts = git_mounts(ws, writable=True, empty=empty)
    own = mirror / "worktrees" / "ws"
    assert [(m.kind, m.target, m.source) for m in mounts] == [
        ("rw", mirror, mirror),
        ("tmpfs", mirror / "worktrees", None),
        ("rw", own, own),
        # What decides what git runs, for this ticket, the others and the daemon: read-only.
        ("ro", mirror / "config", mirror / "config"),
        ("ro", mirror / "hooks", mirror / "hooks"),
        ("ro", mirror / "info", mirror / "info"),
        ("ro", own / "commondir", own / "commondir"),
        ("ro", own / "gitdir", own / "gitdir"),
        ("ro", ws / ".git", ws / ".git"),
    ]
    # A read-only stage gets no writable git state at all.
    assert [(m.kind, m.target) for m in git_mounts(ws, writable=False, empty=empty)] == [
        ("ro", mirror),
        ("tmpfs", mirror / "worktrees"),
        ("ro", own),
    ]
    # A clone's .git is a mount of its own; a missing hooks folder is an empty read-only one.
    (seed / ".git" / "hooks").rename(tmp_path / "hooks-gone")
    assert [(m.kind, m.target, m.source) for m in git_mounts(seed, writable=True, empty=empty)] == [
        ("rw", seed / ".git", seed / ".git"),
        ("ro", seed / ".git" / "config", seed / ".git" / "config"),
        ("ro", seed / ".git" / "hooks", empty),
        ("ro", seed / ".git" / "info", seed / ".git" / "info"),
    ]
    assert git_mounts(seed, writable=False, empty=empty) == ()  # inside the read-only workspace


def test_a_bin_folder_under_the_home_folder_brings_itself_not_its_tool_s_state(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    cargo = home / ".cargo"
    (cargo / "bin").mkdir(parents=True)
    (cargo / "credentials.toml").write_text("token = 'x'\n")
    venv = home / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "opt" / "tool" / "bin").mkdir(parents=True)
    env = {"HOME": str(home), "PATH": f"{cargo / 'bin'}:{venv / 'bin'}:{tmp_path / 'opt/tool/bin'}"}
    found = path_folders(env)
    assert cargo / "bin" in found and cargo not in found
    assert venv in found  # a virtual environment's packages live beside its bin
    assert tmp_path / "opt" / "tool" in found  # outside the home folder, the installation
    versions = home / ".pyenv" / "versions" / "3.11"
    (versions / "bin").mkdir(parents=True)
    assert path_folders({**env, "PATH": str(versions / "bin")}) == [versions]
    tool = cargo / "bin" / "agent"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert cargo not in program_folders("agent", env)


def test_program_folders_follow_the_command_to_its_installation(tmp_path: Path) -> None:
    prefix = tmp_path / "opt" / "agent"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    tool = prefix / "bin" / "agent"
    tool.write_text(f"#!{sys.executable}\n")
    tool.chmod(0o755)
    data = tmp_path / "data" / "prompt.txt"
    data.parent.mkdir()
    data.write_text("x")
    env = {"PATH": f"{prefix / 'bin'}:/usr/bin", "HOME": str(tmp_path / "home")}
    found = program_folders(f"FOO=1 exec agent --flag {data}", env, home=tmp_path / "home")
    assert prefix in found
    assert data.parent in found
    # The `#!` interpreter's installation comes too (this Python, wherever it lives).
    python = Path(os.path.realpath(sys.executable))
    assert any(python.is_relative_to(f) for f in found)
    assert tmp_path not in found and Path("/") not in found


def test_the_root_folder_is_never_a_program_folder(tmp_path: Path) -> None:
    # /bin's parent is /: the system's own folders are mounted as such, never / as a whole.
    env = {"PATH": "/usr/bin:/bin"}
    assert Path("/") not in path_folders(env)
    assert Path("/") not in program_folders("sh -c 'echo up'", env)
    mounts = mounts_of(BWRAP, tmp_path, programs=[Path("/"), Path("/usr/bin")])
    assert Path("/") not in mounts


def test_node_packages_bring_their_whole_node_modules(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "pkg"
    (package / "bin").mkdir(parents=True)
    (tmp_path / "node_modules" / ".bin").mkdir()
    real = package / "bin" / "cli.js"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    (tmp_path / "node_modules" / ".bin" / "cli").symlink_to(real)
    found = program_folders(str(tmp_path / "node_modules" / ".bin" / "cli"), {"PATH": "/usr/bin"})
    assert tmp_path / "node_modules" in found


def test_bridges_and_proxy_variables_follow_the_network() -> None:
    assert bridges(Network.FULL, [4000]) == ()
    assert [b.port for b in bridges(Network.NONE, [4000, 4000])] == [4000]
    assert [b.port for b in bridges(Network.MODEL, [4000])] == [3128, 4000]
    assert proxy_environment(Network.NONE) == {}
    env = proxy_environment(Network.MODEL)
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:3128"
    assert env["ALL_PROXY"].startswith("socks5h://")
    assert "127.0.0.1" in env["NO_PROXY"]

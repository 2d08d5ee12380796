"""The sandbox hosts, bubblewrap and podman, for real: a hostile script tries to leave its
boundary, and each test runs once per kind.

Needs `bwrap`, `socat`, `podman` and `runc` (scripts/test installs them); skipped with the
reason where they are missing, failed instead under SYMPHONY_REQUIRE_SANDBOX=1 (CI).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from symphony.config.sandbox import (
    HostPattern,
    Network,
    SandboxKind,
    SandboxSettings,
    WorkspaceAccess,
)
from symphony.hosts.sandbox.home import HomeCredentials
from symphony.hosts.sandbox.host import SandboxHost, SandboxRun
from symphony.hosts.sandbox.remote import launcher
from tests.harness import wait_until
from tests.hosts.sandbox_lab import require_sandbox

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=[SandboxKind.BWRAP, SandboxKind.PODMAN], ids=lambda k: k.value)
def kind(request: pytest.FixtureRequest) -> SandboxKind:
    require_sandbox(request.param)
    return request.param  # type: ignore[no-any-return]


class Machine:
    """A daemon's surroundings in a temporary folder: a home with secrets, a state file, two
    workspaces, and the environment the daemon gives its children."""

    def __init__(self, root: Path) -> None:
        self.home = root / "realhome"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
        (self.home / ".codex").mkdir()
        (self.home / ".codex" / "auth.json").write_text('{"token": "model-only"}')
        (self.home / ".codex" / "history.jsonl").write_text("operator history")
        self.state = root / "state" / "state.db"
        self.state.parent.mkdir()
        self.state.write_text("store")
        self.workspace = root / "workspaces" / "ABC-1"
        self.other = root / "workspaces" / "ABC-2"
        self.workspace.mkdir(parents=True)
        self.other.mkdir()
        (self.other / "secret.txt").write_text("other ticket")
        self.runs = root / "runs"
        python = Path(sys.executable).parent
        self.env = {"PATH": f"{python}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


@pytest.fixture
async def run(machine: Machine) -> AsyncIterator[SandboxRun]:
    credentials = HomeCredentials(variable="CODEX_HOME", folder=".codex", files=("auth.json",))
    async with SandboxRun(
        credentials=credentials, env=machine.env, runs_root=machine.runs,
        protected=(machine.workspace.parent,),
    ) as sandbox:  # fmt: skip
        yield sandbox


async def script(
    host: SandboxHost, machine: Machine, text: str, end_group: bool = True
) -> tuple[int | None, str]:
    result = await host.run_script(
        text, cwd=machine.workspace, env=machine.env, timeout_ms=20_000, tail_bytes=20_000,
        end_group=end_group,
    )  # fmt: skip
    return result.exit_code, result.output


def no_network(kind: SandboxKind) -> SandboxSettings:
    return SandboxSettings(kind=kind, network=Network.NONE)


async def test_a_hostile_script_reaches_nothing_of_the_machine(
    run: SandboxRun, machine: Machine, kind: SandboxKind
) -> None:
    loopback = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = loopback.sockets[0].getsockname()[1]
    # A local daemon's socket (as Docker's or ssh-agent's), in a folder the user may reach.
    daemon_socket = machine.state.parent / "daemon.sock"
    local_daemon = await asyncio.start_unix_server(lambda r, w: w.close(), str(daemon_socket))
    host = await run.host(no_network(kind))
    attempts = {
        "ssh key": f"cat {machine.home}/.ssh/id_ed25519",
        "state": f"cat {machine.state}",
        "other workspace": f"cat {machine.other}/secret.txt",
        "operator history": f"cat {machine.home}/.codex/history.jsonl",
        "shadow": "grep -q root /etc/shadow",
        "root home": "ls /root/.ssh",
        "write usr": "touch /usr/pwned",
        "write home of the daemon": f"touch {machine.home}/pwned",
        "write beside": f"touch {machine.other}/pwned",
        "loopback": f"exec 3<>/dev/tcp/127.0.0.1/{port}",
        "local daemon": f"python3 -c 'import socket; socket.socket(socket.AF_UNIX)"
        f'.connect("{daemon_socket}")\'',
        "daemon env": "tr '\\0' '\\n' </proc/1/environ | grep -q TRACKER_TOKEN",
    }
    try:
        for name, attempt in attempts.items():
            code, output = await script(host, machine, f"exec bash -c {attempt!r}")
            assert code != 0, f"{name} succeeded inside the sandbox: {output}"
    finally:
        loopback.close()
        local_daemon.close()
    for victim in (machine.home / "pwned", machine.other / "pwned", Path("/usr/pwned")):
        assert not victim.exists()


async def test_inside_the_user_is_unprivileged_and_home_and_workspace_are_its_own(
    run: SandboxRun, machine: Machine, kind: SandboxKind
) -> None:
    host = await run.host(no_network(kind))
    code, output = await script(host, machine, (
        'id -u; grep CapEff /proc/self/status; echo "home=$HOME"; ls -A "$HOME"; '
        'cat "$CODEX_HOME/auth.json"; echo; echo made > made.txt; echo tmp > /tmp/t; '
        "ps -e -o pid= | wc -l"
    ))  # fmt: skip
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] != "0"
    assert lines[1].split()[1] == "0000000000000000"
    assert lines[2] == f"home={run.paths.home}"  # type: ignore[union-attr]
    assert lines[3] == ".codex"  # only the agent's own folder
    assert lines[4] == '{"token": "model-only"}'
    assert int(lines[5]) <= 6  # a PID namespace of its own: only this script's processes
    assert (machine.workspace / "made.txt").read_text() == "made\n"


async def test_a_read_only_stage_cannot_change_its_workspace(
    run: SandboxRun, machine: Machine, kind: SandboxKind
) -> None:
    settings = SandboxSettings(kind=kind, network=Network.NONE, workspace=WorkspaceAccess.READ_ONLY)
    host = await run.host(settings)
    code, _ = await script(host, machine, "echo x > changed.txt")
    assert code != 0
    assert not (machine.workspace / "changed.txt").exists()
    code, _ = await script(await run.host(settings.for_hooks()), machine, "echo x > hook.txt")
    assert code == 0 and (machine.workspace / "hook.txt").exists()


async def test_nothing_started_inside_outlives_the_run(
    run: SandboxRun, machine: Machine, kind: SandboxKind
) -> None:
    host = await run.host(no_network(kind))
    marker = f"sandbox-leftover-{os.getpid()}"
    # Escaped from the script's process group, and not ended by the script's runner: only the
    # sandbox's end can stop it.
    code, output = await script(host, machine, (
        f"setsid bash -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 & "
        f"sleep 0.3; pgrep -f {marker} >/dev/null && echo started"
    ), end_group=False)  # fmt: skip
    assert code == 0 and output.strip() == "started", output

    def leftovers() -> list[Path]:
        return [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == marker]

    # The sandbox's end kills what is left in it; the kernel may take a moment to finish.
    assert wait_until(lambda: leftovers() == [], 5.0), leftovers()


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


async def test_the_model_network_reaches_allowed_hosts_through_the_proxy_only(
    machine: Machine, kind: SandboxKind
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nmodel")
        await writer.drain()
        writer.close()

    allowed = await asyncio.start_server(serve, "127.0.0.1", 0)
    denied = await asyncio.start_server(serve, "127.0.0.1", 0)
    allowed_port = allowed.sockets[0].getsockname()[1]
    denied_port = denied.sockets[0].getsockname()[1]
    refused: list[tuple[str, int]] = []
    fetch = (
        "import os, sys, urllib.request\n"
        "opener = urllib.request.build_opener(urllib.request.ProxyHandler("
        "{'http': os.environ['HTTP_PROXY']}))\n"
        "try:\n"
        "    print(opener.open(sys.argv[1], timeout=10).read().decode())\n"
        "except Exception as error:\n"
        "    print('failed', error)\n"
    )
    (machine.workspace / "fetch.py").write_text(fetch)
    settings = SandboxSettings(kind=kind, network=Network.MODEL,
                               allow_hosts=(HostPattern("127.0.0.1", allowed_port),))  # fmt: skip
    try:

        def note(host: str, port: int) -> None:
            refused.append((host, port))

        async with SandboxRun(env=machine.env, runs_root=machine.runs, on_refused=note) as sandbox:
            host = await sandbox.host(settings)
            # NO_PROXY names loopback (for the bridged tool server): unset it to ask the proxy.
            code, output = await script(host, machine, (
                "unset NO_PROXY no_proxy; "
                f"python3 fetch.py http://127.0.0.1:{allowed_port}/; "
                f"python3 fetch.py http://127.0.0.1:{denied_port}/; "
                f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{denied_port}' 2>/dev/null "
                "&& echo direct || echo no-direct"
            ))  # fmt: skip
    finally:
        allowed.close()
        denied.close()
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] == "model"
    assert lines[1].startswith("failed") and "403" in lines[1]
    assert lines[-1] == "no-direct"
    assert ("127.0.0.1", denied_port) in refused


async def test_a_run_folder_deeper_than_a_socket_address_still_carries_ports_in(
    machine: Machine, kind: SandboxKind
) -> None:
    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"reached\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    runs_root = machine.runs / ("deep" * 30)  # a state folder far from the root
    try:
        async with SandboxRun(env=machine.env, runs_root=runs_root, forwarded=(port,)) as run:
            host = await run.host(no_network(kind))
            code, output = await script(
                host, machine, f"exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}; head -n1 <&3'"
            )
    finally:
        server.close()
    assert code == 0, output
    assert output.strip() == "reached"
    assert list(runs_root.iterdir()) in ([], [runs_root / "rootfs"])


def test_the_run_folder_is_removed_when_the_run_ends(tmp_path: Path) -> None:
    async def main() -> Path:
        async with SandboxRun(env={"HOME": str(tmp_path)}, runs_root=tmp_path / "runs") as run:
            assert run.paths is not None
            return run.paths.home.parent

    folder = asyncio.run(main())
    assert not folder.exists()
    assert shutil.which("bwrap")


@pytest.fixture
def tiny_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> str:
    """An image built offline by scripts/build-sandbox-image from a root filesystem holding
    only this machine's /bin/sh and the libraries it loads, in a podman store of the test's."""
    require_sandbox(SandboxKind.PODMAN)
    # Short: podman keeps sockets under its run root, which must stay under 50 characters.
    store = Path(tempfile.mkdtemp(prefix="sy-store-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(store, ignore_errors=True))
    conf = tmp_path / "storage.conf"
    conf.write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n'
    )
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
    rootfs = tmp_path / "rootfs"
    shell = Path(os.path.realpath("/bin/sh"))
    libraries = subprocess.run(["ldd", str(shell)], capture_output=True, text=True, check=True)
    files = [shell, *(Path(w) for w in libraries.stdout.split() if w.startswith("/"))]
    for file in files:
        target = rootfs / str(file).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(file), target)
    (rootfs / "bin").mkdir(exist_ok=True)
    if not (rootfs / "bin" / "sh").exists():
        (rootfs / "bin" / "sh").symlink_to(shell)
    for folder in ("tmp", "proc", "dev", "sys", "run", "etc"):
        (rootfs / folder).mkdir(exist_ok=True)
    image = f"localhost/symphony-test-{os.getpid()}"
    subprocess.run([str(REPO / "scripts" / "build-sandbox-image"), image, str(rootfs)],
                   check=True, capture_output=True)  # fmt: skip
    return image


async def test_a_podman_sandbox_runs_the_image_instead_of_this_machines_system(
    machine: Machine, tiny_image: str
) -> None:
    settings = SandboxSettings(kind=SandboxKind.PODMAN, network=Network.NONE, image=tiny_image)
    async with SandboxRun(env=machine.env, runs_root=machine.runs) as run:
        host = await run.host(settings)
        code, output = await script(host, machine, (
            "echo image > from-image.txt; test -e /usr/bin/git && echo host-usr || echo own-usr"
        ))  # fmt: skip
    assert code == 0, output
    assert output.strip() == "own-usr"
    assert (machine.workspace / "from-image.txt").read_text() == "image\n"


DAEMON = """
import asyncio, subprocess, sys
from pathlib import Path
from symphony.config.sandbox import Network, SandboxKind, SandboxSettings
from symphony.hosts.sandbox.host import SandboxRun

async def main():
    env = {"PATH": "/usr/bin:/bin", "HOME": sys.argv[2]}
    run = SandboxRun(env=env, runs_root=Path(sys.argv[1]))
    await run.__aenter__()
    host = await run.host(SandboxSettings(kind=SandboxKind.PODMAN, network=Network.NONE))
    spec = host.agent_launch("echo up; exec sleep 300", Path(sys.argv[3]), env)
    agent = subprocess.Popen(spec.argv, cwd=spec.cwd, env=dict(spec.env), stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE, start_new_session=True)
    print(agent.pid, agent.stdout.readline().decode().strip(), flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


async def test_a_killed_daemons_containers_are_removed_by_the_next_run(machine: Machine) -> None:
    require_sandbox(SandboxKind.PODMAN)
    daemon = subprocess.Popen(
        [sys.executable, "-c", DAEMON, str(machine.runs), str(machine.home),
         str(machine.workspace)], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert daemon.stdout is not None
    client, said = daemon.stdout.readline().split()
    assert said == "up"
    prefix = f"symphony-sandbox-{daemon.pid}-"
    # kill -9 of the daemon and of the podman client it started: the container lives on.
    for pid in (daemon.pid, int(client)):
        os.kill(pid, signal.SIGKILL)
    daemon.wait(10)
    daemon.stdout.close()
    assert _containers(prefix) != []
    async with SandboxRun(env=machine.env, runs_root=machine.runs):
        pass
    assert _containers(prefix) == []
    assert not any(p.name.startswith(f"{daemon.pid}-") for p in machine.runs.iterdir())


def _containers(prefix: str) -> list[str]:
    listed = subprocess.run(["podman", "ps", "--all", "--format", "{{.Names}}"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    return [name for name in listed.stdout.split() if name.startswith(prefix)]


STARTER = (
    "import subprocess\nstarted = []\nfor _ in range(120):\n    try:\n"
    "        started.append(subprocess.Popen(['sleep', '5']))\n"
    "    except OSError:\n        pass\nprint(f'started={len(started)}')\n"
    "for p in started:\n    p.kill()\n"
)
"""Starts 120 sleeps, says how many started."""


def started_of(output: str) -> int:
    assert "started=" in output, output
    return int(output.rsplit("started=", 1)[1].split()[0])


async def test_the_process_limit_holds_whoever_runs_the_daemon(
    run: SandboxRun, machine: Machine, kind: SandboxKind
) -> None:
    """`pids` bounds the processes inside, also for a root daemon, whose RLIMIT_NPROC the
    kernel does not enforce: 120 sleeps started under `pids: 64` do not all start."""
    settings = SandboxSettings(kind=kind, network=Network.NONE, pids=64)
    host = await run.host(settings)
    code, output = await script(host, machine, f"python3 -c {shlex.quote(STARTER)}")
    assert code == 0 and 0 < started_of(output) < 64, output


def test_a_hosts_launcher_holds_the_process_limit_for_a_root_login(machine: Machine) -> None:
    """The sh launcher an SSH worker host runs, run here: as root it holds `pids` by a cgroup
    of its own, which it leaves for the next launch to remove."""
    require_sandbox(SandboxKind.BWRAP)
    if os.getuid() != 0:
        pytest.skip("the root login's path; as another user RLIMIT_NPROC holds")
    settings = SandboxSettings(kind=SandboxKind.BWRAP, network=Network.NONE, pids=64)
    done = subprocess.run(
        ["sh", "-c", launcher(settings, HomeCredentials()), "bash",
         f"python3 -c {shlex.quote(STARTER)}"],
        cwd=machine.workspace, env=machine.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 0 < started_of(done.stdout) < 64, done.stdout
    for group in Path("/sys/fs/cgroup").glob("**/symphony-sandbox/remote-*"):
        with contextlib.suppress(OSError):
            group.rmdir()

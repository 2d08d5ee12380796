"""Real OpenSSH servers on 127.0.0.1 for the worker-host tests.

`SshLab` starts one `sshd` per host name on a free loopback port, each with a throwaway host
key, key-only login for one user (no passwords, no root login), and an ssh client config that
names them (`Host w1`, `Host w2`) with pinned host keys. Run as root, the login user is a
dedicated account (created once); otherwise the current user, so the tests also run on a
developer's machine. `SYMPHONY_REQUIRE_SSHD=1` (CI) makes a missing sshd a failure instead of a
skip. Everything lives in a world-traversable folder under /tmp, since the remote user must
reach the fake agents, their records and its workspace roots.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
WORKER_USER = "symphony-worker"
REPO = Path(__file__).resolve().parents[2]


def require_sshd() -> None:
    """Skip (or, in CI, fail) when this machine cannot run the SSH tests."""
    missing = [tool for tool in ("ssh", "ssh-keygen") if shutil.which(tool) is None]
    if not os.path.exists(SSHD):
        missing.append("sshd")
    if missing:
        reason = f"OpenSSH not installed ({', '.join(missing)}); scripts/test installs it"
        if os.environ.get("SYMPHONY_REQUIRE_SSHD") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _login_user() -> str:
    if os.geteuid() != 0:
        return getpass.getuser()
    try:
        pwd.getpwnam(WORKER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", WORKER_USER],
            check=True,
            capture_output=True,
        )
    # No password, and not locked either: sshd without PAM refuses a locked account's keys.
    subprocess.run(["usermod", "-p", "*", WORKER_USER], check=True, capture_output=True)
    return WORKER_USER


@dataclass
class Server:
    name: str
    port: int
    config: Path
    workspace_root: Path
    proc: subprocess.Popen[bytes] | None = None


class SshLab:
    def __init__(
        self, names: tuple[str, ...] = ("w1", "w2"), sshd_options: dict[str, str] | None = None
    ) -> None:
        """`sshd_options`: more sshd_config lines for a host, by its name."""
        require_sshd()
        self.base = Path(tempfile.mkdtemp(prefix="symphony-ssh-", dir="/tmp"))
        self.base.chmod(0o755)
        self.user = _login_user()
        self.uid = pwd.getpwnam(self.user).pw_uid
        self.shared = self.base / "shared"  # records and files both sides write
        self.shared.mkdir()
        self.shared.chmod(0o1777)
        key = self.base / "user_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        authorized = self.base / "authorized_keys"
        authorized.write_text(Path(f"{key}.pub").read_text())
        authorized.chmod(0o644)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.servers: dict[str, Server] = {}
        known, client = [], []
        for name in names:
            folder = self.base / name
            folder.mkdir()
            folder.chmod(0o755)
            host_key = folder / "host_key"
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True
            )
            port = free_port()
            config = folder / "sshd_config"
            config.write_text(
                f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
                f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile {authorized}\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "PermitRootLogin no\nStrictModes no\nUsePAM no\nPrintMotd no\n"
                f"AllowUsers {self.user}\nLogLevel ERROR\n" + (sshd_options or {}).get(name, "")
            )
            root = folder / "workspaces"
            root.mkdir()
            if os.geteuid() == 0:
                os.chown(root, self.uid, -1)
            self.servers[name] = Server(name, port, config, root)
            known.append(f"[127.0.0.1]:{port} {Path(f'{host_key}.pub').read_text().strip()}")
            client.append(
                f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  User {self.user}\n"
                f"  IdentityFile {key}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {self.base / 'known_hosts'}\n"
            )
        (self.base / "known_hosts").write_text("\n".join(known) + "\n")
        self.ssh_config = self.base / "ssh_config"
        self.ssh_config.write_text("\n".join(client))
        self.ssh_config.chmod(0o644)
        for name in names:
            self.start(name)

    def start(self, name: str) -> None:
        server = self.servers[name]
        server.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(server.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(self.base / f"{name}.log").open("ab"),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", server.port), 0.2),
            ):
                break
            time.sleep(0.05)
        done = subprocess.run(
            ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", name, "true"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if done.returncode != 0:
            log = (self.base / f"{name}.log").read_text(errors="replace")
            raise AssertionError(f"sshd {name} does not let the test user in: {done.stderr} {log}")

    def kill(self, name: str) -> None:
        """The host dies: its sshd and every session it carries, at once."""
        server = self.servers[name]
        if server.proc is None:
            return
        for pid in [server.proc.pid, *descendants(server.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        server.proc.wait(10)
        server.proc = None

    def close(self) -> None:
        for name in self.servers:
            self.kill(name)
        shutil.rmtree(self.base, ignore_errors=True)

    def python(self) -> str:
        """A python3 the login user can run (the system's, not one under /root)."""
        return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, found by parent ids in /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found

"""The sandbox as bubblewrap builds it: the argv around a command, and the small `sh` program
that runs first inside (bridges to the daemon's sockets, limits, then the command).

Every namespace is new (user, mount, PID, IPC, UTS, cgroup; network unless `network: full`);
the process is an unprivileged user without capabilities; it dies with the daemon's child that
started it, and with the sandbox's PID 1 every process inside ends.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from symphony.config.sandbox import Network
from symphony.hosts.sandbox.policy import RUN_DIR, SANDBOX_UID, Mount

PROXY_PORT = 3128
"""Inside: where the bridge to the daemon's proxy listens on loopback."""
PROXY_SOCKET = "proxy.sock"
BRIDGE_WAIT_TENTHS = 50
"""How long the wrapper waits for its bridges to listen before it runs the command anyway."""


@dataclass(frozen=True, slots=True)
class Bridge:
    """A loopback port inside carried to a socket of the run's socket folder."""

    port: int
    socket: str


def forward_socket(port: int) -> str:
    return f"port-{port}.sock"


def bridges(network: Network, forwarded: Sequence[int]) -> tuple[Bridge, ...]:
    """What listens on loopback inside: the proxy (`model`) and each forwarded port of the
    daemon's; nothing where the sandbox shares the machine's network."""
    if network is Network.FULL:
        return ()
    found = [Bridge(port, forward_socket(port)) for port in dict.fromkeys(forwarded)]
    if network is Network.MODEL:
        found.insert(0, Bridge(PROXY_PORT, PROXY_SOCKET))
    return tuple(found)


def proxy_environment(network: Network) -> dict[str, str]:
    """The variables that point an agent's HTTP clients at the proxy bridge."""
    if network is not Network.MODEL:
        return {}
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "ALL_PROXY": f"socks5h://127.0.0.1:{PROXY_PORT}"}
    env["NO_PROXY"] = "localhost,127.0.0.1,::1"
    return {**env, **{k.lower(): v for k, v in env.items()}}


def wrapper(bridged: Sequence[Bridge], *, memory_mb: int | None, pids: int | None) -> str:
    """The `sh` program run first inside: start each bridge, wait until they listen, then run
    its arguments under the limits (`prlimit` where the system has it; None: the limits are
    enforced outside, by a cgroup)."""
    lines = []
    for bridge in bridged:
        lines.append(
            f"socat TCP-LISTEN:{bridge.port},bind=127.0.0.1,fork,reuseaddr "
            f"UNIX-CONNECT:{RUN_DIR / bridge.socket} </dev/null >/dev/null 2>&1 &"
        )
    if bridged:
        wanted = " ".join(f"{b.port:04X}" for b in bridged)
        lines.append(
            f"_sy_i=0; for _sy_p in {wanted}; do\n"
            f'  while ! grep -q " 0100007F:$_sy_p 00000000:0000 0A" /proc/net/tcp; do\n'
            f"    _sy_i=$((_sy_i + 1)); [ $_sy_i -gt {BRIDGE_WAIT_TENTHS * 10} ] && break 2\n"
            "    sleep 0.01\n  done\ndone\nunset _sy_i _sy_p"
        )
    if memory_mb is None or pids is None:
        lines.append('exec "$@"')
        return "\n".join(lines)
    data = memory_mb * 1024 * 1024
    lines.append(
        "if command -v prlimit >/dev/null 2>&1; then\n"
        f'  exec prlimit --data={data} --nproc={pids} -- "$@"\nfi'
    )
    lines.append('exec "$@"')
    return "\n".join(lines)


def bwrap_argv(
    bwrap: str,
    mounts: Sequence[Mount],
    *,
    network: Network,
    cwd: Path,
    inner: Sequence[str],
    bridged: Sequence[Bridge],
    memory_mb: int,
    pids: int,
) -> list[str]:
    """The bwrap command line that runs `inner` in `cwd` inside the mounts."""
    argv = [
        bwrap,
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]
    if os.getuid() == 0:
        argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if network is not Network.FULL:
        argv.append("--unshare-net")
    for mount in mounts:
        argv += _mount_args(mount)
    argv += ["--proc", "/proc", "--dev", "/dev", "--chdir", str(cwd), "--"]
    argv += ["/bin/sh", "-c", wrapper(bridged, memory_mb=memory_mb, pids=pids), "sh", *inner]
    return argv


def _mount_args(mount: Mount) -> list[str]:
    target = str(mount.target)
    if mount.kind == "ro":
        return ["--ro-bind-try", str(mount.source), target]
    if mount.kind == "rw":
        return ["--bind-try", str(mount.source), target]
    if mount.kind == "tmpfs":
        return ["--tmpfs", target]
    if mount.kind == "mask":
        return ["--ro-bind", "/dev/null", target]
    if mount.kind == "symlink":
        return ["--symlink", str(mount.source), target]
    return ["--dir", target]

"""The sandbox as podman builds it: a container per child, started with `podman run -i` so the
child's stdio is the container's and the session protocol is unchanged.

The container runs an image (`sandbox.image`, whose system folders are its toolchain) or, by
default, an empty root the daemon makes (`skeleton`) with this machine's system folders mounted
read-only, the same mount plan bubblewrap gets. Memory and processes are the container's cgroup
limits (`--memory`, `--pids-limit`); the rlimits podman would otherwise copy in are given
explicitly, within what the daemon's own are, since a daemon without CAP_SYS_RESOURCE cannot
raise them. The child's environment goes in an env file (never on a command line), and every
container is named after its run, so the run removes what a killed client left behind.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from symphony.config.sandbox import Network
from symphony.hosts.sandbox.bwrap import Bridge, wrapper
from symphony.hosts.sandbox.policy import SANDBOX_UID, SYSTEM_LINKS, Mount

CONTAINER_PREFIX = "symphony-sandbox-"
"""Every container the daemon starts is named `<prefix><daemon pid>-<token>-<n>`."""

CLIENT_ENV_NAMES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "TMPDIR",
)
"""What the podman client takes of the daemon's environment: where its storage and settings
are. The container's own environment is the child's, from the env file."""

NOFILE_LIMIT = 65_536
NPROC_LIMIT = 32_768
"""The most podman's runtime accepts here without CAP_SYS_RESOURCE (its own hard limit); the
container's real process limit is its cgroup's `--pids-limit`."""


def client_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if environ is None else environ
    return {name: source[name] for name in CLIENT_ENV_NAMES if name in source}


def skeleton(folder: Path) -> Path:
    """An empty root for containers without an image: the mount points of the system folders
    and, on a merged-/usr system, its links (/bin -> usr/bin). Made once, atomically."""
    if (folder / "usr").is_dir():
        return folder
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for name in ("usr", "etc", "tmp", "var/tmp", "proc", "dev", "sys", "run", "home", "root"):
        (partial / name).mkdir(parents=True, exist_ok=True)
    for link in SYSTEM_LINKS:
        host = Path(link)
        if host.is_symlink():
            (partial / link.lstrip("/")).symlink_to(os.readlink(host))
        elif host.is_dir():
            (partial / link.lstrip("/")).mkdir()
    (partial / "tmp").chmod(0o1777)
    try:
        partial.rename(folder)
    except OSError:  # another run made it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """The child's environment for `--env-file`, readable by the daemon alone; a value with a
    line break cannot be written there and is left out."""
    lines = [f"{k}={v}" for k, v in env.items() if "\n" not in v and "=" not in k and k]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write("\n".join(lines) + "\n")


def _limit(which: int, wanted: int) -> str:
    _soft, hard = resource.getrlimit(which)
    ceiling = hard if hard != resource.RLIM_INFINITY else wanted
    value = min(wanted, ceiling)
    return f"{value}:{value}"


def podman_argv(
    podman: str,
    mounts: Sequence[Mount],
    *,
    name: str,
    network: Network,
    cwd: Path,
    inner: Sequence[str],
    bridged: Sequence[Bridge],
    memory_mb: int,
    pids: int,
    env_file: Path,
    image: str | None,
    rootfs: Path | None,
) -> list[str]:
    """The podman command line that runs `inner` in `cwd` in a new container."""
    argv = [podman]
    if shutil.which("runc") is not None:
        argv += ["--runtime", "runc"]  # crun refuses some cgroup layouts; runc takes them
    if not Path("/run/systemd/system").is_dir():
        argv += ["--cgroup-manager", "cgroupfs"]
    argv += ["run", "--rm", "-i", "--init", "--name", name, "--hostname", "sandbox"]
    argv += ["--network", "host" if network is Network.FULL else "none"]
    argv += ["--cap-drop", "all", "--security-opt", "no-new-privileges"]
    if os.getuid() == 0:
        # A root daemon's children are an unprivileged user inside who owns what root owns
        # outside (the workspace), as with bubblewrap; no other host user is mapped.
        uid = SANDBOX_UID
        for flag in ("--uidmap", "--gidmap"):
            argv += [flag, f"{uid}:0:1", flag, f"0:100000:{uid}"]
        argv += ["--user", f"{uid}:{uid}"]
    else:
        argv += ["--userns", "keep-id"]
    argv += ["--memory", f"{memory_mb}m", "--pids-limit", str(pids)]
    argv += ["--ulimit", f"nproc={_limit(resource.RLIMIT_NPROC, NPROC_LIMIT)}"]
    argv += ["--ulimit", f"nofile={_limit(resource.RLIMIT_NOFILE, NOFILE_LIMIT)}"]
    argv += ["--env-file", str(env_file), "--workdir", str(cwd)]
    for mount in mounts:
        argv += _mount_args(mount)
    argv += ["--rootfs", str(rootfs)] if image is None else [image]
    assert image is not None or rootfs is not None
    # Memory and processes are the cgroup's; the wrapper only bridges the sockets.
    argv += ["/bin/sh", "-c", wrapper(bridged, memory_mb=None, pids=None), "sh", *inner]
    return argv


def _mount_args(mount: Mount) -> list[str]:
    target = str(mount.target)
    if mount.kind == "ro":
        if mount.source is None or not mount.source.exists():
            return []
        return ["--mount", f"type=bind,src={mount.source},dst={target},ro=true"]
    if mount.kind == "rw":
        if mount.source is None or not mount.source.exists():
            return []
        return ["--mount", f"type=bind,src={mount.source},dst={target}"]
    if mount.kind == "tmpfs":
        return ["--mount", f"type=tmpfs,dst={target},notmpcopyup"]
    if mount.kind == "mask":
        return ["--mount", f"type=bind,src=/dev/null,dst={target},ro=true"]
    return []  # folders and links are the root's own (`skeleton`) or the image's


def remove_containers(podman: str, names: Sequence[str], env: Mapping[str, str]) -> None:
    """Remove the run's containers that a killed client left running (best effort)."""
    if not names:
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            [podman, "rm", "--force", "--ignore", "--time", "0", *names],
            env=dict(env), capture_output=True, timeout=60, check=False,
        )  # fmt: skip


def remove_stale_containers(podman: str, runs: Sequence[str], env: Mapping[str, str]) -> None:
    """Remove the containers of runs whose daemon is gone (`runs`: their folder names)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        argv = [podman, "ps", "--all", "--format", "{{.Names}}"]
        listed = subprocess.run(
            [*argv, "--filter", f"name={CONTAINER_PREFIX}"],
            env=dict(env), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        names = [
            name
            for name in listed.stdout.split()
            if any(name.startswith(f"{CONTAINER_PREFIX}{run}-") for run in runs)
        ]
        remove_containers(podman, names, env)

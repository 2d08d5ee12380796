"""A sandbox as a host of the host layer: agents, hooks and gates start inside the boundary.

`SandboxRun` holds what one run's boundary needs on this machine while the run lasts: a folder
with the private home and the sockets bound into the sandbox, the forwards to the daemon's
loopback servers and, with `network: model`, the allowlist proxy. The folder is made in the
`runs_root` its owner names (the daemon: beside its store, never the system's temporary folder,
where codex refuses to put the helpers its own sandbox runs through). `host(settings)` gives a
`SandboxHost` for one set of settings (a stage's for its agent and gates, the workflow's with a
writable workspace for hooks); every child it starts gets a boundary of its own around the
workspace it is started in, built afresh from those settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from symphony.base.errors import SymphonyError
from symphony.base.hosts import LOCAL
from symphony.config.sandbox import (
    HostPattern,
    Network,
    SandboxKind,
    SandboxSettings,
    WorkspaceAccess,
)
from symphony.hosts import AgentLaunchSpec
from symphony.hosts.process import pid_alive
from symphony.hosts.sandbox import cgroup
from symphony.hosts.sandbox.bwrap import (
    PROXY_SOCKET,
    bridges,
    bwrap_argv,
    forward_socket,
    proxy_environment,
)
from symphony.hosts.sandbox.home import NO_CREDENTIALS, HomeCredentials, fill_home, remove_home
from symphony.hosts.sandbox.podman import (
    CONTAINER_PREFIX,
    client_environment,
    podman_argv,
    remove_containers,
    remove_stale_containers,
    skeleton,
    write_env_file,
)
from symphony.hosts.sandbox.policy import (
    Mount,
    RunPaths,
    git_mounts,
    path_folders,
    plan_mounts,
    program_folders,
)
from symphony.hosts.sandbox.proxy import AllowlistProxy, PortForward
from symphony.hosts.shell import ScriptResult, run_script

SANDBOX_UNAVAILABLE = cgroup.SANDBOX_UNAVAILABLE
RUN_FOLDER = re.compile(r"(\d+)-[0-9a-f]{8}")
"""The name of a run's folder in the runs root: the daemon's pid and a token."""

Refused = Callable[[str, int], None]


def _ignore(host: str, port: int) -> None:
    pass


class SandboxRun:
    """One run's boundary resources; `async with` makes them and removes every trace."""

    def __init__(
        self,
        *,
        credentials: HomeCredentials = NO_CREDENTIALS,
        env: Mapping[str, str],
        default_hosts: Sequence[HostPattern] = (),
        forwarded: Sequence[int] = (),
        protected: Sequence[Path] = (),
        on_refused: Refused = _ignore,
        runs_root: Path,
    ) -> None:
        self._credentials = credentials
        self._env = env
        self.default_hosts = tuple(default_hosts)
        self.forwarded = tuple(dict.fromkeys(forwarded))
        self.protected = tuple(protected)
        self._on_refused = on_refused
        self._root = runs_root
        self.paths: RunPaths | None = None
        self.home_env: dict[str, str] = {}
        self._servers: list[AllowlistProxy | PortForward] = []
        self._containers: list[str] = []
        self._podman: str | None = None
        self._groups: list[Path] = []

    async def __aenter__(self) -> SandboxRun:
        """Make the run's folder, home and forwards; raises SymphonyError
        (`sandbox_unavailable`) when they cannot be made."""
        try:
            await self._open()
        except OSError as exc:
            await self.__aexit__(None, None, None)
            raise SymphonyError(SANDBOX_UNAVAILABLE, f"cannot prepare the sandbox: {exc}") from None
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _open(self) -> None:
        self._root.mkdir(mode=0o711, parents=True, exist_ok=True)
        sweep_stale(self._root)
        folder = self._root / f"{os.getpid()}-{secrets.token_hex(4)}"
        folder.mkdir(mode=0o711)
        home, sockets = folder / "home", folder / "s"
        self.paths = RunPaths(home=home, sockets=sockets, empty=folder / "empty")
        sockets.mkdir(mode=0o755)
        self.paths.empty.mkdir(mode=0o555)
        self.home_env = fill_home(home, self._credentials, self._env)
        _open_to_sandbox(home)
        for port in self.forwarded:
            await self._forward(port)

    async def __aexit__(self, *exc: object) -> None:
        if self._podman is not None and self._containers:
            names, self._containers = self._containers, []
            await asyncio.to_thread(remove_containers, self._podman, names, client_environment())
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.close()
        self._servers.clear()
        for _ in range(20):  # the last processes of a run may take a moment to be reaped
            for group in self._groups:
                cgroup.remove_group(group)
            self._groups = [g for g in self._groups if g.exists()]
            if not self._groups:
                break
            await asyncio.sleep(0.05)
        if self.paths is not None:
            remove_home(self.paths.home.parent)

    def container(self, podman: str) -> tuple[str, Path]:
        """A name for the next container of this run, and the env file beside it."""
        assert self.paths is not None
        self._podman = podman
        folder = self.paths.home.parent
        name = f"{CONTAINER_PREFIX}{folder.name}-{len(self._containers) + 1}"
        self._containers.append(name)
        return name, folder / f"{name}.env"

    def pids_group(self, limit: int) -> Path:
        """A cgroup of this run's holding at most `limit` processes (`symphony.hosts.sandbox.
        cgroup`): how a root daemon's bwrap sandbox keeps to `pids`."""
        assert self.paths is not None
        name = f"{self.paths.home.parent.name}-{len(self._groups) + 1}"
        group = cgroup.make_pids_group(name, limit)
        self._groups.append(group)
        return group

    @property
    def runs_root(self) -> Path:
        """Where this run's folder is made, beside those of the other runs."""
        return self._root

    def rootfs(self) -> Path:
        return skeleton(self._root / "rootfs")

    def allowed_hosts(self, settings: SandboxSettings) -> tuple[HostPattern, ...]:
        return settings.allow_hosts if settings.allow_hosts is not None else self.default_hosts

    async def host(self, settings: SandboxSettings) -> SandboxHost:
        """The host whose children start inside `settings`' boundary."""
        assert self.paths is not None, "SandboxRun used outside `async with`"
        forwarded = list(self.forwarded)
        if settings.network is Network.MODEL:
            patterns = self.allowed_hosts(settings)
            await self._proxy(patterns)
            # An allowed loopback port is reached directly (clients skip the proxy there).
            forwarded += [
                p.port
                for p in patterns
                if p.port is not None and p.host in ("127.0.0.1", "::1", "localhost")
            ]
            for port in forwarded:
                await self.forward(port)
        return SandboxHost(settings, self, tuple(dict.fromkeys(forwarded)))

    async def forward(self, port: int) -> None:
        """Carry `127.0.0.1:port` of this machine into every sandbox made after this (the
        daemon's tool server, started once the run knows it needs it)."""
        if port not in self.forwarded:
            self.forwarded = (*self.forwarded, port)
        await self._forward(port)

    async def _forward(self, port: int) -> None:
        assert self.paths is not None
        path = self.paths.sockets / forward_socket(port)
        if path.exists():
            return
        forward = PortForward(path, port)
        await forward.start()
        self._servers.append(forward)

    async def _proxy(self, patterns: tuple[HostPattern, ...]) -> None:
        assert self.paths is not None
        path = self.paths.sockets / PROXY_SOCKET
        if path.exists():
            return
        proxy = AllowlistProxy(path, patterns, self._on_refused)
        await proxy.start()
        self._servers.append(proxy)


class SandboxHost:
    """This machine, with every child inside the boundary of `settings` (`Host`)."""

    name = LOCAL

    def __init__(self, settings: SandboxSettings, run: SandboxRun, forwarded: Sequence[int]):
        if not settings.enabled:
            raise SymphonyError(SANDBOX_UNAVAILABLE, "sandbox.kind none builds no sandbox")
        self.settings = settings
        self._run = run
        self._forwarded = tuple(forwarded)
        self._program = shutil.which(settings.kind.value) or settings.kind.value
        self._shell = "/bin/sh"

    @property
    def is_local(self) -> bool:
        return True

    @property
    def describe(self) -> str:
        return self.settings.describe()

    def _folders(self, command: str, env: Mapping[str, str]) -> list[Path]:
        home = env.get("HOME")
        found = [*program_folders(command, env), *path_folders(env)]
        homes = [Path(home) for home in (home,) if home]
        protected = [*self._run.protected, self._run.runs_root, *homes]
        return [f for f in found if not any(p.is_relative_to(f) for p in protected)]

    def _start(
        self, inner: Sequence[str], workspace: Path, command: str, env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The command line that starts `inner` inside, and the environment of that process
        (the child's own for bwrap; podman's client's, the child's going in an env file)."""
        paths = self._run.paths
        assert paths is not None
        settings = self.settings
        image = settings.image if settings.kind is SandboxKind.PODMAN else None
        mounts: tuple[Mount, ...] = plan_mounts(
            settings, workspace, paths, programs=self._folders(command, env),
            git=git_mounts(
                workspace, writable=settings.workspace is WorkspaceAccess.WRITABLE,
                empty=paths.empty,
            ),
            system=image is None,
        )  # fmt: skip
        bridged = bridges(settings.network, self._forwarded)
        child_env = self.environment(env)
        if settings.kind is SandboxKind.BWRAP:
            argv = bwrap_argv(
                self._program, mounts, network=settings.network, cwd=workspace, inner=inner,
                bridged=bridged, memory_mb=settings.memory_mb, pids=settings.pids,
            )  # fmt: skip
            if cgroup.needed():
                argv = cgroup.enter_group_argv(self._run.pids_group(settings.pids), argv)
            return argv, child_env
        name, env_file = self._run.container(self._program)
        write_env_file(env_file, child_env)
        argv = podman_argv(
            self._program, mounts, name=name, network=settings.network, cwd=workspace,
            inner=inner, bridged=bridged, memory_mb=settings.memory_mb, pids=settings.pids,
            env_file=env_file, image=image, rootfs=None if image else self._run.rootfs(),
        )  # fmt: skip
        return argv, client_environment()

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """A child's environment inside: its own, pointed at the private home and the proxy."""
        return {
            **env,
            **self._run.home_env,
            **proxy_environment(self.settings.network),
            "TMPDIR": "/tmp",
            "SYMPHONY_SANDBOX": self.settings.kind.value,
        }

    def agent_launch(
        self, command: str, workspace: Path, env: Mapping[str, str]
    ) -> AgentLaunchSpec:
        # Inside, bash is the system's (an image's own, or this machine's mounted read-only).
        argv, process_env = self._start(("/bin/bash", "-lc", command), workspace, command, env)
        return AgentLaunchSpec(tuple(argv), workspace, process_env)

    async def run_script(
        self,
        script: str,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_ms: int,
        tail_bytes: int,
        end_group: bool = False,
    ) -> ScriptResult:
        argv, process_env = self._start((), cwd, "", env)
        return await run_script(
            self._shell, script, cwd=cwd, env=process_env, timeout_ms=timeout_ms,
            tail_bytes=tail_bytes, end_group=end_group, prefix=argv,
        )  # fmt: skip

    async def end_group(self, pgid: int, grace_s: float, mark: str | None = None) -> None:
        return None

    def reach(self, url: str) -> tuple[SandboxHost, str]:
        return self, url  # the run forwards the server's port into the boundary itself

    def sandboxed(self, settings: SandboxSettings, credentials: HomeCredentials) -> None:
        return None

    def reported_group(self, stderr_line: str) -> None:
        return None

    def carrier_failure(self, returncode: int | None, stderr: Sequence[str]) -> None:
        return None


def _open_to_sandbox(home: Path) -> None:
    """The sandbox's user is the daemon's own when it is not root; as root, a mapped user who
    owns what root owns. Either way the home is its own."""
    home.chmod(0o700)


def _own_folder(entry: Path) -> bool:
    return entry.is_dir() and not entry.is_symlink()


def sweep_stale(root: Path) -> None:
    """Remove the run folders of daemons that are gone (a kill -9 leaves its copies behind),
    and the containers such a run left running. Nothing else in `root` is touched."""
    stale = []
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            named = RUN_FOLDER.fullmatch(entry.name)
            if named and _own_folder(entry) and not pid_alive(int(named.group(1))):
                stale.append(entry)
    cgroup.remove_stale_groups([entry.name for entry in stale])
    podman = shutil.which("podman")
    if stale and podman is not None:
        remove_stale_containers(podman, [entry.name for entry in stale], client_environment())
    for entry in stale:
        remove_home(entry)

"""The sandbox of one attempt, as the daemon opens it: which home files and model hosts the agent
kind gets, which of the daemon's paths must never be mounted, and the host every child of the
attempt starts on (`symphony.hosts.sandbox`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from symphony.agents.registry import backend, model_hosts
from symphony.config.sections import Settings, default_state_path
from symphony.hosts import Host
from symphony.workspace.local import HookHost

if TYPE_CHECKING:
    from symphony.hosts.sandbox.host import SandboxRun

log = structlog.get_logger(__name__)

Refused = Callable[[str, int], None]

RUNS_FOLDER = "sandbox-runs"
POD_HAND_OFFS_FOLDER = "pod-hand-offs"
"""Beside the store: what the review page reads of a pod's hand-off (evidence, diff), a
folder per ticket, kept after the pod has gone and removed with the ticket's workspace."""
"""In the workflow's state folder: one folder per sandboxed run (`<daemon pid>-<token>`) with
its private home and sockets."""


def runs_root(settings: Settings) -> Path:
    """Where the daemon makes its sandboxed runs' folders: the folder of its store
    (`.symphony` beside WORKFLOW.md by default), never the system's temporary folder, where
    codex refuses to put the helpers its own sandbox runs through."""
    return _store_folder(settings) / RUNS_FOLDER


def pod_hand_offs_root(settings: Settings) -> Path:
    return _store_folder(settings) / POD_HAND_OFFS_FOLDER


def _store_folder(settings: Settings) -> Path:
    store = settings.state.path if settings.state is not None else None
    return (store or default_state_path(settings.workflow_path)).parent


def protected_paths(settings: Settings, env: Mapping[str, str]) -> tuple[Path, ...]:
    """What no sandbox may mount, even as part of a program's installation: every workspace
    (the root), the store, the notes folder, the daemon's home."""
    paths = [settings.workspace.root]
    if settings.state is not None:
        paths.append(settings.state.path.parent)
    if settings.memory is not None:
        paths.append(settings.memory.folder)
    if env.get("HOME"):
        paths.append(Path(env["HOME"]))
    return tuple(paths)


def attempt_sandbox(
    *,
    kind: str,
    env: Mapping[str, str],
    protected: Sequence[Path],
    on_refused: Refused,
    root: Path,
    gateway: bool = False,
) -> SandboxRun:
    """An attempt's sandbox resources (`async with` it): the agent kind's login files in the
    private home, and its model hosts as what `network: model` reaches by default; its folder
    in `root` (`runs_root`). With
    `gateway` (the daemon's model gateway carries the agent's calls), the home gets no login
    and no key, and `network: model` reaches the gateway only. The caller asks the run for the
    host of each set of settings."""
    from symphony.hosts.sandbox.host import SandboxRun  # only a sandboxed stage needs it

    agent = backend(kind)
    return SandboxRun(
        credentials=agent.home_through_gateway() if gateway else agent.sandbox_home,
        env=env,
        default_hosts=model_hosts(kind, env, gateway=gateway),
        protected=protected,
        on_refused=on_refused,
        runs_root=root,
    )


def hook_sandbox(
    settings: Settings, environ: Mapping[str, str], hook_env: Mapping[str, str]
) -> HookHost | None:
    """What makes each hook's sandbox (the workflow's, workspace writable), or None without
    one: a run of its own per hook, with no credentials in its home."""
    sandbox = settings.sandbox.for_hooks()
    if not sandbox.enabled:
        return None
    from symphony.hosts.sandbox.host import SandboxRun  # only a sandboxed workflow needs it

    hosts = model_hosts(settings.agent.kind, environ)
    protected = protected_paths(settings, environ)
    root = runs_root(settings)

    def refused(host: str, port: int) -> None:
        log.warning("sandbox refused a connection of a hook", target=f"{host}:{port}")

    @contextlib.asynccontextmanager
    async def hook_host() -> AsyncIterator[Host]:
        async with SandboxRun(
            env=hook_env, default_hosts=hosts, protected=protected, on_refused=refused,
            runs_root=root,
        ) as run:  # fmt: skip
            yield await run.host(sandbox)

    return hook_host

"""A workflow's SSH worker hosts (`worker.hosts`): the workspaces of each, and what start-up
stops there that an earlier daemon left running. Loaded only by a workflow that names SSH
hosts; the rest of the daemon knows them through `Places.remote`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

import structlog

from symphony.config.sections import Settings
from symphony.hosts.sandbox.home import NO_CREDENTIALS
from symphony.hosts.sandbox.remote import launcher
from symphony.hosts.ssh import SshHost
from symphony.workspace.environment import REMOTE_INSTANCE_VARIABLE
from symphony.workspace.remote import RemoteWorkspaces

log = structlog.get_logger("symphony.orchestrator")


def open_remote_workspaces(
    settings: Settings, environ: Mapping[str, str], remote_env: dict[str, str]
) -> dict[str, RemoteWorkspaces]:
    """The workspaces of each SSH worker host, by its name; hooks there run in the sandbox
    when the workflow has one."""
    worker, root = settings.worker, str(settings.workspace.root)
    hooks_launcher = (
        launcher(settings.sandbox.for_hooks(), NO_CREDENTIALS) if settings.sandbox.enabled else ""
    )
    return {
        spec.name: RemoteWorkspaces(
            SshHost(spec, worker.ssh, environ, root).with_sandbox(hooks_launcher),
            settings.hooks,
            env=remote_env,
            worktrees=settings.workspace.worktrees,
        )
        for spec in worker.hosts
    }


async def stop_remote_orphans(remote: Iterable[RemoteWorkspaces], previous: Sequence[str]) -> int:
    """What earlier daemons left running on the SSH hosts, found there by their instance ids; a
    host that cannot be reached is reported and skipped."""
    hosts = [workspaces.host for workspaces in remote]
    if not previous or not hosts:
        return 0

    async def on(host: SshHost) -> int:
        done = await host.stop_marked(REMOTE_INSTANCE_VARIABLE, previous)
        if done.returncode != 0:
            log.warning("orphans on host not checked", host=host.name, reason=done.reason())
            return 0
        count = int(done.out.strip() or 0) if done.out.strip().isdigit() else 0
        if count:
            log.warning(
                "stopped agents an earlier daemon left running", host=host.name, processes=count
            )
        return count

    return sum(await asyncio.gather(*(on(host) for host in hosts)))

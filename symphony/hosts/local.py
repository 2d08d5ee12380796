"""This machine as a host: agents under `bash -lc`, scripts under `sh -lc`, in the workspace."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from symphony.base.hosts import LOCAL
from symphony.config.sandbox import SandboxSettings
from symphony.hosts import AgentLaunchSpec
from symphony.hosts.sandbox.home import HomeCredentials
from symphony.hosts.shell import ScriptResult, run_script


class LocalHost:
    name = LOCAL

    def __init__(self, shell: str | None = None) -> None:
        # Resolved once from the daemon's PATH: a child's `env` may lack PATH or point it
        # somewhere odd.
        self._shell = shell or shutil.which("sh") or "/bin/sh"

    @property
    def is_local(self) -> bool:
        return True

    def agent_launch(
        self, command: str, workspace: Path, env: Mapping[str, str]
    ) -> AgentLaunchSpec:
        # bash is resolved on symphony's PATH; the agent gets `env` and nothing else, so what
        # was left out of it stays out.
        bash = shutil.which("bash") or "/bin/bash"
        return AgentLaunchSpec((bash, "-lc", command), workspace, env)

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
        return await run_script(
            self._shell, script, cwd=cwd, env=env, timeout_ms=timeout_ms, tail_bytes=tail_bytes,
            end_group=end_group,
        )  # fmt: skip

    async def end_group(self, pgid: int, grace_s: float, mark: str | None = None) -> None:
        return None

    def reach(self, url: str) -> tuple[LocalHost, str]:
        return self, url

    def sandboxed(self, settings: SandboxSettings, credentials: HomeCredentials) -> None:
        return None  # the run builds it here (`symphony.hosts.sandbox.host`)

    def reported_group(self, stderr_line: str) -> None:
        return None

    def carrier_failure(self, returncode: int | None, stderr: Sequence[str]) -> None:
        return None  # the agent is the process: how it ended is its own


LOCAL_HOST = LocalHost()

"""Where work runs: this machine, or an SSH worker host (spec Appendix A).

A `Host` says how to start an agent there (`agent_launch`: the argv, cwd and environment of
the local process that carries the agent's stdio, and the bytes it must read first), how to
run a hook or a verification gate there (`run_script`), and how to end a process group there
(`end_group`). The workspace manager, the agent launcher and the gates take a host; nothing
above them knows whether it is local. Tracker tools never cross: they run in the daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from symphony.hosts.shell import ScriptResult


@dataclass(frozen=True, slots=True)
class AgentLaunchSpec:
    """The local process that carries an agent's stdio."""

    argv: tuple[str, ...]
    cwd: Path | None
    env: Mapping[str, str]
    preamble: bytes = b""
    """Written to its stdin before anything else (the remote environment)."""


class Host(Protocol):
    name: str

    @property
    def is_local(self) -> bool: ...

    def agent_launch(
        self, command: str, workspace: Path, env: Mapping[str, str]
    ) -> AgentLaunchSpec: ...

    async def run_script(
        self,
        script: str,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_ms: int,
        tail_bytes: int,
        end_group: bool = False,
    ) -> ScriptResult: ...

    async def end_group(self, pgid: int, grace_s: float, mark: str | None = None) -> None:
        """End a process group the host started for an agent, and the processes that carry
        the run's `mark` (a no-op where the local process group already is the agent's)."""
        ...

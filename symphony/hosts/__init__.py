"""Where work runs: this machine, or an SSH worker host (spec Appendix A).

A `Host` says how to start an agent there (`agent_launch`: the argv, cwd and environment of
the local process that carries the agent's stdio, and the bytes it must read first), how to
run a hook or a verification gate there (`run_script`), and how to end a process group there
(`end_group`). The workspace manager, the agent launcher and the gates take a host; nothing
above them knows whether it is local. Tracker tools never cross: they run in the daemon.

What differs between hosts for one run is asked of the host too, never found by its type: how
its agents reach the daemon's loopback services, its tool server and model gateway (`reach`),
whether it builds a run's sandbox itself (`sandboxed`), and what the process carrying an
agent's stdio says about the host rather than the agent (`reported_group`,
`carrier_failure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from symphony.hosts.shell import ScriptResult

if TYPE_CHECKING:
    from symphony.config.sandbox import SandboxSettings
    from symphony.hosts.sandbox.home import HomeCredentials


@dataclass(frozen=True, slots=True)
class AgentLaunchSpec:
    """The local process that carries an agent's stdio."""

    argv: tuple[str, ...]
    cwd: Path | None
    env: Mapping[str, str]
    preamble: bytes = b""
    """Written to its stdin before anything else (the remote environment)."""


CarrierKind = Literal["unreachable", "forward_refused", "no_workspace"]


@dataclass(frozen=True, slots=True)
class CarrierFailure:
    """Why the process carrying an agent's stdio ended, when the way to the host failed rather
    than the agent: the host was lost (`unreachable`), would not carry the tool server's
    forward (`forward_refused`), or has no such workspace (`no_workspace`)."""

    kind: CarrierKind
    message: str
    """Names the host; the agent's own stderr is added by whoever reports it."""


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

    def reach(self, url: str) -> tuple[Host, str]:
        """This host as it starts an agent that calls a loopback service of the daemon at
        `url` (its tool server, its model gateway), and the address the agent uses where it
        runs."""
        ...

    def sandboxed(self, settings: SandboxSettings, credentials: HomeCredentials) -> Host | None:
        """This host with every child started inside `settings`' sandbox, built on the host
        from its own folders; None where the run builds it on this machine instead."""
        ...

    def reported_group(self, stderr_line: str) -> int | None:
        """The process group on the host that a line of an agent carrier's stderr reports
        (None for any other line, and on a host whose local group is the agent's)."""
        ...

    def carrier_failure(
        self, returncode: int | None, stderr: Sequence[str]
    ) -> CarrierFailure | None:
        """Why an agent's carrier exited with `returncode`, when it says the way to the host
        failed (None: the agent itself ended)."""
        ...

"""What the rest of symphony needs of an agent kind's settings block, whatever the kind: the
neutral `SessionSettings` every block meets (how to start the agent, its timeouts), and the
`AgentBlock` loading needs of a kind (its keys, its parser). Each kind's block itself belongs to
its backend (`symphony.agents`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol


class SessionSettings(Protocol):
    """What every agent kind's settings block has, and all the core reads of one: how to
    start the agent and its timeouts. The rest of a block belongs to its backend."""

    @property
    def command(self) -> str: ...

    @property
    def turn_timeout_ms(self) -> int:
        """Longest silence during a turn."""
        ...

    @property
    def read_timeout_ms(self) -> int:
        """Longest wait for the answer to a request."""
        ...

    @property
    def stall_timeout_ms(self) -> int:
        """Longest time without any event before the orchestrator stops the run (<= 0: off)."""
        ...


class AgentBlock(Protocol):
    """What loading needs of an agent kind (`symphony.agents.registry.Backend` is one): the
    keys of its WORKFLOW.md section, how that section is parsed, and how it takes its tools."""

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def parse(self) -> Callable[[Mapping[str, Any]], Any]: ...

    @property
    def tools_over_mcp(self) -> bool: ...

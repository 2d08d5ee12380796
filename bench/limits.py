"""Provider-limit benchmark: 50 queued tickets meet a usage limit, and waiting costs nothing.

A real orchestrator on an in-memory tracker of 50 `Todo` tickets runs an in-process agent whose
first run meets a usage limit that resets `RESET_S` seconds later (5 agents at once, the
default 30 s poll). While the agent is limited the daemon should neither poll more than its
interval, nor start or retry anything, nor wake more than the reset needs. The benchmark counts
tracker reads, agent starts and loop passes during the pause, and CPU time, then how long after
the reset the queued tickets start again.

Run: `python bench/limits.py` (targets: no tracker read and no agent start during the pause
beyond the poll interval's; the first start within a second of the reset).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.agents import TURN_FAILED, AgentError, AgentLaunch, TurnResult
from symphony.base.events import AgentEvent
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.observability.logging import configure_logging
from tests.factories import make_issue
from tests.fakes.tracker import MemoryTracker

TICKETS = 50
RESET_S = 8.0
"""How long after the first run meets the limit it resets."""


class LimitedAgent:
    """Its first run meets the usage limit; every later run works until stopped."""

    reset_at: ClassVar[datetime | None] = None
    starts: ClassVar[list[float]] = []

    def __init__(self, launch: AgentLaunch) -> None:
        self._emit = launch.on_event
        self.resumed = False
        self.pid = None
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        LimitedAgent.starts.append(time.monotonic())
        self._emit(AgentEvent("session_started", thread_id=f"t-{len(LimitedAgent.starts)}"))

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        self._emit(AgentEvent("turn_started", message=title))
        if LimitedAgent.reset_at is None:
            LimitedAgent.reset_at = datetime.now(UTC) + timedelta(seconds=RESET_S)
            limit = ProviderLimit(LimitKind.USAGE, LimitedAgent.reset_at, "usage limit reached")
            raise AgentError(TURN_FAILED, limit.describe(), limit=limit)
        await self._stopped.wait()
        raise AgentError(TURN_FAILED, "stopped")

    async def stop(self) -> None:
        self._stopped.set()


async def run(folder: Path) -> None:
    workflow = folder / "WORKFLOW.md"
    workflow.write_text(
        "---\ntracker:\n  kind: local\n  provider: {path: board}\n"
        "  active_states: [Todo]\n  terminal_states: [Done]\n"
        "workspace: {root: workspaces}\nagent: {max_concurrent_agents: 5}\n---\nWork.\n"
    )
    tracker = MemoryTracker(*(make_issue(f"LIM-{n}") for n in range(TICKETS)))
    orchestrator = Orchestrator(
        load_settings(workflow, {}), environ={}, tracker=tracker, session_factory=LimitedAgent,
        watch=False,
    )  # fmt: skip
    passes = 0

    def counted() -> None:
        nonlocal passes
        passes += 1

    orchestrator.view.add_listener(counted)
    task = asyncio.create_task(orchestrator.run())
    try:
        while "codex" not in orchestrator.state.agent_pauses:
            await asyncio.sleep(0.01)
        reads, starts, seen = tracker.reads, len(LimitedAgent.starts), passes
        cpu = time.process_time()
        assert LimitedAgent.reset_at is not None
        pause_s = (LimitedAgent.reset_at - datetime.now(UTC)).total_seconds()
        await asyncio.sleep(max(pause_s - 0.2, 0))
        cpu_ms = (time.process_time() - cpu) * 1000
        paused = (tracker.reads - reads, len(LimitedAgent.starts) - starts, passes - seen)
        reset_mono = time.monotonic() + 0.2
        while len(LimitedAgent.starts) <= starts:
            await asyncio.sleep(0.01)
        first_after = LimitedAgent.starts[starts] - reset_mono
    finally:
        orchestrator.stop()
        await task
    print(f"{TICKETS} tickets queued, 5 slots; codex limited for {pause_s:.1f} s:")
    print(f"  during the pause: {paused[0]} tracker reads, {paused[1]} agent starts, "
          f"{paused[2]} loop passes, {cpu_ms:.0f} ms CPU")  # fmt: skip
    print(f"  first start after the reset: within {abs(first_after) * 1000:.0f} ms of it")


def main() -> None:
    configure_logging(fmt="console", level="error", logs_root=None)
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(Path(folder)))


if __name__ == "__main__":
    main()

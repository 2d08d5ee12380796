"""Scheduler benchmark: CPU time of one tick's decisions and memory per running session.

One tick = stall detection + reconciliation of the running entries against fresh snapshots +
sorting and filtering the candidates + dispatch decisions. Tracker I/O is excluded: snapshots
are prebuilt. Run: `python bench/scheduler.py` (targets: tick < 20 ms with 10,000 candidates
and 100 running; < 50 KiB of orchestrator state per running session).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.base.issue import BlockerRef, Issue
from tests.factories import make_settings

CANDIDATES = 10_000
RUNNING = 100
ROUNDS = 50
WALL = datetime(2026, 1, 1, tzinfo=UTC)


def make_candidates(count: int) -> list[Issue]:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    states = ("Todo", "In Progress")
    return [
        Issue(
            id=f"id-{n}",
            identifier=f"ABC-{n}",
            title=f"Ticket number {n} with a realistic title",
            state=states[n % 2],
            dispatchable=n % 7 != 0,
            description="A description of moderate length. " * 8,
            priority=(n % 6) or None,
            labels=("backend", "agent") if n % 3 else ("frontend",),
            blocked_by=(BlockerRef(f"id-{n - 1}", f"ABC-{n - 1}", "Todo"),) if n % 11 == 0 else (),
            created_at=base + timedelta(minutes=n),
            url=f"https://tracker.example/ABC-{n}",
        )
        for n in range(count)
    ]


def running_state(candidates: list[Issue]) -> core.SchedulerState:
    state = core.SchedulerState()
    settings = make_settings(max_concurrent=RUNNING)
    core.select_dispatches(state, candidates, settings, 0.0, WALL)
    assert len(state.running) == RUNNING
    return state


def tick_cpu_ms(candidates: list[Issue], max_concurrent: int) -> list[float]:
    settings = make_settings(max_concurrent=max_concurrent)
    samples = []
    for _ in range(ROUNDS):
        state = running_state(candidates)
        refreshed = [entry.issue for entry in state.running.values()]
        ids = list(state.running)
        gc.collect()
        start = time.process_time()
        core.detect_stalls(state, settings, 10.0)
        core.apply_refresh(state, refreshed, ids, settings)
        core.select_dispatches(state, candidates, settings, 10.0, WALL)
        samples.append((time.process_time() - start) * 1000)
    return samples


def memory_per_session_kib(sessions: int = 1_000) -> float:
    candidates = make_candidates(sessions)
    settings = make_settings(max_concurrent=sessions)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    state = core.SchedulerState()
    core.select_dispatches(state, candidates, settings, 0.0, WALL)
    # Fill each session the way a busy one looks: a full event history, tokens, a long message.
    for issue_id in state.running:
        for n in range(core.RECENT_EVENTS * 2):
            event = AgentEvent(
                "notification",
                pid=4242,
                session_id=f"thread-{issue_id}-turn-{n}",
                message=f"item/completed commandExecution: pytest -q tests/test_{n}.py",
                usage=TokenUsage(1000 * n, 100 * n, 1100 * n),
            )
            core.on_agent_event(state, issue_id, event, float(n), WALL)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return grown / sessions / 1024


async def live_memory_per_session_kib(sessions: int = 50) -> float:
    """Python heap of the daemon per live session: entry, worker task, agent session, pipes.

    Runs the real orchestrator on a local board with the scripted agent (which stays silent
    once its turn starts); the agent processes themselves are not counted.
    """
    import asyncio
    import os
    import tempfile

    from symphony.config.load import load_settings
    from symphony.daemon.orchestrator import Orchestrator
    from tests.harness import Board

    with tempfile.TemporaryDirectory() as folder:
        board = Board(Path(folder))
        for n in range(sessions):
            board.ticket(f"MEM-{n}")
        board.write_workflow(agent={"max_concurrent_agents": sessions})
        env = dict(os.environ, FAKE_AGENT_SCENARIO="hang")
        orchestrator = Orchestrator(load_settings(board.workflow, env), environ=env, watch=False)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        task = asyncio.create_task(orchestrator.run())
        while sum(e.turn_count for e in orchestrator.state.running.values()) < sessions:
            await asyncio.sleep(0.05)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        orchestrator.stop()
        await task
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return grown / sessions / 1024


def report(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    print(
        f"{name}: median {statistics.median(samples):.2f} ms, p95 {p95:.2f} ms, "
        f"max {max(samples):.2f} ms (CPU time, {ROUNDS} rounds)"
    )


def main() -> None:
    import io

    from symphony.cli import loop
    from symphony.observability.logging import configure_logging

    configure_logging(level="warning", stream=io.StringIO())
    candidates = make_candidates(CANDIDATES)
    print(f"tick with {CANDIDATES:,} candidates and {RUNNING} running")
    report("  all slots busy      ", tick_cpu_ms(candidates, RUNNING))
    report("  100 slots to fill   ", tick_cpu_ms(candidates, RUNNING * 2))
    print(f"scheduler state per busy session: {memory_per_session_kib():.1f} KiB")

    live = loop.run(live_memory_per_session_kib())
    print(f"daemon heap per live session (50 real agent subprocesses): {live:.1f} KiB")


if __name__ == "__main__":
    main()

"""Fleet benchmark: what several workflows in one daemon cost, against one alone.

1. Idle cost. Real orchestrators on local boards of 2,000 tickets each, every ticket in an
   active state and dispatch paused (so each poll reads, sorts and explains all 2,000 and
   starts nothing), polling every second: the daemon's CPU over a 10 s window as a share of
   one core, for one workflow alone and for 10 in one fleet (`symphony.daemon.fleet`), in the
   same run. Target: the fleet under 10 times the single workflow's cost.
2. The scheduler's tick across the fleet: for each of 10 workflows of 2,000 candidates, what
   it asks of the fleet (`core.demand`), the fleet's share (`core.fleet`) and the dispatch
   decisions, as one pass over 20,000 candidates (tracker I/O excluded; prebuilt tickets).
   Median and slowest of 30 passes.

Run from the repository root: `python bench/fleet.py` (about a minute).
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from bench.scheduler import WALL, make_candidates
from symphony import core
from symphony.base.secrets import SecretMasker
from symphony.cli import loop
from symphony.daemon.collector import tune_collector
from symphony.daemon.events import SystemClock
from symphony.daemon.fleet import FleetPlan, FleetRunner, Member
from symphony.observability.logging import configure_logging
from tests.factories import make_settings

TICKETS = 2_000
WORKFLOWS = 10
WINDOW_S = 10.0
POLL_MS = 1_000
PASSES = 30


def write_board(folder: Path, name: str) -> Path:
    board = folder / "board"
    board.mkdir(parents=True)
    for n in range(TICKETS):
        text = f"---\ntitle: Ticket {n} of {name}\nstate: Todo\npriority: {n % 4}\n---\nDo it.\n"
        (board / f"{name.upper()}-{n}.md").write_text(text)
    front = {
        "tracker": {"kind": "local", "provider": {"path": "board"},
                    "terminal_states": ["Done", "Cancelled"]},
        "polling": {"interval_ms": POLL_MS},
        "workspace": {"root": "workspaces"},
        "agent": {"max_concurrent_agents": 4},
        "codex": {"command": "false"},
    }  # fmt: skip
    workflow = folder / "WORKFLOW.md"
    workflow.write_text(f"---\n{yaml.safe_dump(front)}---\nWork on {{{{ issue.identifier }}}}\n")
    return workflow


async def idle_share(root: Path, count: int) -> float:
    """The daemon's CPU share of one core while `count` workflows poll, paused."""
    members = []
    for n in range(count):
        name = f"w{n}"
        members.append(Member(name, write_board(root / name, name)))
    runner = FleetRunner(FleetPlan(tuple(members), 10), SecretMasker(), SystemClock(),
                         dict(os.environ))  # fmt: skip
    task = asyncio.create_task(runner.run())
    try:
        while any(s.orchestrator is None for s in runner.statuses):
            await asyncio.sleep(0.05)
        for status in runner.statuses:
            assert status.orchestrator is not None
            status.orchestrator.view.pause("bench")
        # Every workflow has polled its whole board at least once.
        while any(s.orchestrator is not None and s.orchestrator.health.last_tick_at is None
                  for s in runner.statuses):  # fmt: skip
            await asyncio.sleep(0.05)
        await asyncio.sleep(2 * POLL_MS / 1000)
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.sleep(WINDOW_S)
        return (time.process_time() - cpu) / (time.perf_counter() - wall) * 100
    finally:
        runner.stop()
        await task


def fleet_tick_ms() -> list[float]:
    workflows = [(make_settings(max_concurrent=4), make_candidates(TICKETS))
                 for _ in range(WORKFLOWS)]  # fmt: skip
    samples = []
    for _ in range(PASSES):
        shares = core.fleet.FleetShares()
        states = [core.SchedulerState() for _ in workflows]
        gc.collect()
        start = time.process_time()
        waiting = {f"w{n}": core.demand(states[n], candidates, settings, WALL, 0.0)
                   for n, (settings, candidates) in enumerate(workflows)}  # fmt: skip
        demands = {name: core.fleet.Demand(1, 0, want, 4) for name, want in waiting.items()}
        allocation = shares.allocate(10, demands, 0.0)
        for n, (settings, candidates) in enumerate(workflows):
            states[n].fleet_slots = allocation[f"w{n}"]
            core.select_dispatches(states[n], candidates, settings, 0.0, WALL)
        samples.append((time.process_time() - start) * 1000)
        assert sum(len(s.running) for s in states) == 10
    return samples


def main() -> None:
    tune_collector()  # as the CLI does
    configure_logging(level="warning", stream=io.StringIO())
    with tempfile.TemporaryDirectory() as folder:
        one = loop.run(idle_share(Path(folder) / "one", 1))
        many = loop.run(idle_share(Path(folder) / "fleet", WORKFLOWS))
    ratio = many / one if one else float("inf")
    print(f"idle, {TICKETS:,} tickets per workflow, polled every {POLL_MS} ms, dispatch paused")
    print(f"  one workflow          {one:6.1f}% of one core")
    print(f"  {WORKFLOWS} workflows, one fleet {many:6.1f}% of one core ({ratio:.1f}x; "
          f"target under {WORKFLOWS}x: {'met' if ratio < WORKFLOWS else 'MISSED'})")  # fmt: skip
    samples = fleet_tick_ms()
    print(f"scheduler tick across the fleet ({WORKFLOWS} x {TICKETS:,} = "
          f"{WORKFLOWS * TICKETS:,} candidates): demand, shares, dispatch")  # fmt: skip
    print(f"  median {statistics.median(samples):.1f} ms, slowest {max(samples):.1f} ms "
          f"({PASSES} passes)")  # fmt: skip


if __name__ == "__main__":
    main()

"""Scale benchmark: the daemon with a big board and many live sessions, in one table.

The real `Orchestrator` (watch on, a store, polling every second) runs a local board of N
tickets, S of them Todo, each taken by a scripted agent that starts its turn and holds it open
(`tests/fakes/fake_app_server.py`, scenario `hang`), the rest Done. Printed:

- start: from the daemon's start until all S sessions run;
- tick: the poll's duration (`health.last_tick_ms`) over ticks with everything running;
- memory per session: the daemon's resident memory grown from before the first dispatch to
  all S running, divided by S (agents are other processes);
- dispatch: a new Todo ticket written to the board -> its agent session asked for, with all S
  running (median of 5);
- API: `GET /api/v1/state` through the real HTTP app, p50 and p99 of 200 requests.

Run from the repository root: `python bench/scale.py` (20,000 tickets, 200 sessions; a few
minutes on a small machine) or `python bench/scale.py --short` (2,000 and 10: seconds; CI runs
this to keep the benchmark working, and checks nothing else).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.observability.logging import configure_logging
from symphony.observability.server import create_app
from symphony.store import Store

FAKE_AGENT = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "fake_app_server.py"


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ticket(folder: Path, identifier: str, state: str) -> None:
    text = f"---\ntitle: Ticket {identifier} with a realistic title\nstate: {state}\n---\n"
    (folder / f"{identifier}.md").write_text(text + "A paragraph of description. " * 4 + "\n")


async def run(tickets: int, sessions: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        board = root / "board"
        board.mkdir()
        for n in range(tickets - sessions):
            ticket(board, f"OLD-{n}", "Done")
        for n in range(sessions):
            ticket(board, f"RUN-{n}", "Todo")
        config = {
            "tracker": {
                "kind": "local",
                "provider": {"path": "board"},
                "active_states": ["Todo"],
                "terminal_states": ["Done"],
            },
            "polling": {"interval_ms": 1000},
            "workspace": {"root": "workspaces"},
            "agent": {"max_concurrent_agents": sessions + 1, "env_passthrough": ["FAKE_AGENT_*"]},
            "codex": {"command": f"{sys.executable} {FAKE_AGENT}", "read_timeout_ms": 300_000},
        }
        workflow = root / "WORKFLOW.md"
        workflow.write_text(
            f"---\n{yaml.safe_dump(config)}---\nWork on {{{{ issue.identifier }}}}.\n"
        )
        env = {**os.environ, "FAKE_AGENT_SCENARIO": "hang"}
        asked: dict[str, float] = {}

        def session(launch: AgentLaunch) -> AgentSession:
            asked.setdefault(launch.env["SYMPHONY_ISSUE_IDENTIFIER"], time.perf_counter())
            return open_session(launch)

        before = rss_bytes()
        started = time.perf_counter()
        orchestrator = Orchestrator(
            load_settings(workflow, env),
            environ=env,
            watch=True,
            session_factory=session,
            store=Store.open(root / "state.db")[0],
        )
        task = asyncio.create_task(orchestrator.run())
        app = create_app(orchestrator.view)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        try:
            running = orchestrator.state.running
            while sum(1 for e in running.values() if e.turn_count >= 1) < sessions:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
            all_running = time.perf_counter() - started
            per_session = (rss_bytes() - before) / sessions
            ticks = []
            for _ in range(5):
                at = orchestrator.health.last_tick_at
                while orchestrator.health.last_tick_at == at:
                    await asyncio.sleep(0.02)
                ticks.append(orchestrator.health.last_tick_ms or 0.0)
            reactions = []
            for n in range(5):
                identifier = f"NEW-{n}"
                written = time.perf_counter()
                ticket(board, identifier, "Todo")
                while identifier not in asked:
                    await asyncio.sleep(0.002)
                reactions.append(asked[identifier] - written)
                ticket(board, identifier, "Done")
                while identifier in running:
                    await asyncio.sleep(0.01)
            latencies = []
            async with client:
                for _ in range(200):
                    t0 = time.perf_counter()
                    answer = await client.get("/api/v1/state")
                    latencies.append(time.perf_counter() - t0)
                    assert answer.status_code == 200
        finally:
            orchestrator.stop()
            await asyncio.wait_for(task, 120)
    latencies.sort()
    return {
        "tickets": f"{tickets:,}",
        "sessions": str(sessions),
        "start": f"{all_running:.1f} s",
        "tick": f"{statistics.median(ticks):.1f} ms",
        "memory/session": f"{per_session / 1024:.0f} KiB",
        "dispatch": f"{statistics.median(reactions) * 1000:.0f} ms",
        "API p50/p99": f"{latencies[100] * 1000:.1f}/{latencies[197] * 1000:.1f} ms",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="2,000 tickets and 10 sessions")
    args = parser.parse_args()
    configure_logging(level="info", stream=io.StringIO())
    tickets, sessions = (2_000, 10) if args.short else (20_000, 200)
    row = asyncio.run(run(tickets, sessions))
    widths = {key: max(len(key), len(value)) for key, value in row.items()}
    print("  ".join(key.rjust(widths[key]) for key in row))
    print("  ".join(value.rjust(widths[key]) for key, value in row.items()))


if __name__ == "__main__":
    main()

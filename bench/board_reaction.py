"""Board reaction benchmark: how fast a person's edit starts an agent, and what an idle board
costs, on the local board with thousands of tickets.

The real `Orchestrator` (watch on, as the CLI runs it, and polling every second as the safety
net) runs a board of N tickets, all Done but the ones the benchmark writes. Idle CPU: the
daemon's own CPU time (`time.process_time`; agents are other processes) over 10 s of wall time
with nothing to do, as a share of one core. Reaction: a new Todo ticket file is written, and
the clock stops when the daemon asks for its agent session (the agent process starts right
then); the ticket is then set Done and the run left to stop before the next trial. Targets:
under 150 ms median from write to agent at 2,000 tickets; idle under 0.5% of a core at 2,000
tickets and under 2% at 20,000.

Run from the repository root: `python bench/board_reaction.py` (about a minute).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator

FAKE_AGENT = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "fake_app_server.py"
TRIALS = 20
IDLE_S = 10.0


def ticket(folder: Path, identifier: str, state: str) -> None:
    text = f"---\ntitle: Ticket {identifier} with a realistic title\nstate: {state}\n---\n"
    text += "Some description of the work to do, a paragraph long. " * 4 + "\n"
    (folder / f"{identifier}.md").write_text(text)


def workflow(root: Path) -> Path:
    config = {
        "tracker": {
            "kind": "local",
            "provider": {"path": "board"},
            "active_states": ["Todo"],
            "terminal_states": ["Done"],
        },
        "polling": {"interval_ms": 1000},
        "workspace": {"root": "workspaces"},
        "agent": {"max_concurrent_agents": 4, "env_passthrough": ["FAKE_AGENT_*"]},
        "codex": {"command": f"{sys.executable} {FAKE_AGENT}"},
    }
    path = root / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(config)}---\nWork on {{{{ issue.identifier }}}}.\n")
    return path


async def measure(count: int, trials: int) -> tuple[float, list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        board = root / "board"
        board.mkdir()
        for n in range(count):
            ticket(board, f"OLD-{n}", "Done")
        env = {**os.environ, "FAKE_AGENT_SCENARIO": "hang"}
        asked: dict[str, float] = {}

        def session(launch: AgentLaunch) -> AgentSession:
            asked.setdefault(launch.env["SYMPHONY_ISSUE_IDENTIFIER"], time.perf_counter())
            return open_session(launch)

        orchestrator = Orchestrator(
            load_settings(workflow(root), env), environ=env, watch=True, session_factory=session
        )
        task = asyncio.create_task(orchestrator.run())
        try:
            while orchestrator.health.last_tick_at is None:
                await asyncio.sleep(0.05)
            await asyncio.sleep(2.0)  # the first reads parse every file; let them settle
            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.sleep(IDLE_S)
            idle = (time.process_time() - cpu) / (time.perf_counter() - wall)
            reactions = []
            for n in range(trials):
                identifier = f"NEW-{n}"
                written = time.perf_counter()
                ticket(board, identifier, "Todo")
                while identifier not in asked:
                    await asyncio.sleep(0.002)
                reactions.append(asked[identifier] - written)
                ticket(board, identifier, "Done")
                while identifier in orchestrator.state.running:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.2)
        finally:
            orchestrator.stop()
            await asyncio.wait_for(task, 60)
    return idle, reactions


def main() -> None:
    import io

    from symphony.observability.logging import configure_logging

    # As the CLI logs (info), into memory: the cost of logging is the daemon's, not a terminal's.
    configure_logging(level="info", stream=io.StringIO())
    print(f"{'tickets':>8}  {'idle CPU':>9}  {'write -> agent (median, p90)':>30}")
    for count, trials in ((2_000, TRIALS), (20_000, 5)):
        idle, reactions = asyncio.run(measure(count, trials))
        reactions.sort()
        p90 = reactions[int(len(reactions) * 0.9) - 1] if len(reactions) >= 10 else reactions[-1]
        print(
            f"{count:>8,}  {idle * 100:>8.2f}%  "
            f"{statistics.median(reactions) * 1000:>18.0f} ms, {p90 * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()

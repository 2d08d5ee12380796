"""Agent stream benchmark: how fast the daemon takes in agent output, and what that costs it.

1. Protocol lines per second through one `AppServerSession`. The scripted agent
   (`tests/fakes/fake_app_server.py`, scenario `stream`) answers the handshake and `turn/start`,
   then writes 200,000 prebuilt notification lines (message, reasoning and command-output
   deltas, item boundaries, token usage, rate limits; 240 bytes on average) in one write and
   completes the turn. The client's real path does the work: reading lines off the pipe, JSON
   decoding, classifying, building `AgentEvent`s and calling the event sink (a counter). The
   clock runs from the turn's `turn/started` notification to its `turn_completed` event as the
   sink sees them; CPU is the daemon process's own (`time.process_time`; the agent is another
   process), reported per line. Streaming deltas reach the sink coalesced (one event per
   quarter second), so lines, not sink events, are counted. Target: 100,000 lines/s.
2. Orchestrator CPU under load. The real `Orchestrator` runs a local board of 50 tickets with
   `max_concurrent_agents: 50`; every agent streams 200 notifications/s, paced by its clock from
   prebuilt lines so that 50 agents stay cheap on a small machine, until the orchestrator stops
   it (each turn is interrupted at shutdown). Each second of an agent's stream is 196 streaming
   deltas and one model call's bookkeeping (a command's start and end, token usage, rate
   limits), which are decoded and reach the orchestrator; a real codex makes a model call every
   few seconds. Once every session streams, and after a second of warm-up, the daemon's CPU time
   over a 6 s window divided by the window's wall time is its share of one core (agent
   processes excluded). The events the sessions' sinks received in the window show the load was
   real; the daemon's context switches show how often its event loop slept (voluntary) and how
   often it was preempted (involuntary); the machine's busy share shows whether the agents
   starved it. Two writers are measured: the lines due every 50 ms in one write, and one write
   per line, as an agent that flushes every notification does; the daemon reads a streaming
   agent's pipe at its own tick either way (`symphony.agents.batching`). 50 Python agents each
   waking 200 times a second can saturate a 2-core machine; the report says so when it happens,
   since a starved daemon's figure then understates what a free machine would show. The daemon
   saves its state every loop pass as the CLI's does (`symphony.store`); the batched writer is
   measured once more without a store to show what saving costs, and once with a heavier mix,
   four bookkeeping events every 20 lines (40 a second per agent), to show what each decoded
   event costs. Target: under 5% of one core.

Run from the repository root: `python bench/agent_stream.py` (about 2 minutes, most of it 50 login
shells starting three times).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.agents import AgentLaunch, AgentSession, EventSink
from symphony.agents.codex import AppServerSession
from symphony.base.events import AgentEvent
from symphony.cli import loop
from symphony.config.codex import CodexSettings
from symphony.config.load import load_settings
from symphony.daemon.collector import tune_collector
from symphony.daemon.orchestrator import Orchestrator
from symphony.store import Store
from tests.harness import FAKE_AGENT, Board

FAKE_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_AGENT))}"

LINES = 200_000
ROUNDS = 3
LINES_TARGET = 100_000

SESSIONS = 50
RATE = 200  # notifications per second per agent
TARGET_DELTAS = 196
"""The target's load: 200 lines a second, each second 196 streaming deltas and one model call's
bookkeeping (a command's start and end, token usage, rate limits: four events). A real codex
makes a model call every few seconds."""
MIXED_DELTAS = 16
"""A heavier mix: four bookkeeping events every 20 lines, 40 a second per session."""
STREAM_LIMIT_S = 120.0  # agents stream until the orchestrator stops them; this bounds it
STARTUP_LIMIT_S = 60.0
WARMUP_S = 1.0  # after the last session starts streaming
WINDOW_S = 6.0
BATCH_TICK_MS = 50
TURN_ENDS = frozenset({"turn_completed", "turn_failed", "turn_cancelled", "turn_ended_with_error"})
CPU_TARGET = 5.0  # % of one core
SATURATED_PCT = 90.0  # machine busy share above which the agents starve the daemon


class TurnClock:
    """An event sink that times one turn: from its `turn/started` notification to the
    `turn_completed` event, counting every event (one per protocol line) in between."""

    def __init__(self) -> None:
        self.events = 0
        self.wall: tuple[float, float] = (0.0, 0.0)
        self.cpu: tuple[float, float] = (0.0, 0.0)
        self._started = False

    def __call__(self, event: AgentEvent) -> None:
        if not self._started:
            if event.message is not None and event.message.startswith("turn/started"):
                self._started = True
                self.wall = (time.perf_counter(), 0.0)
                self.cpu = (time.process_time(), 0.0)
            return
        self.events += 1
        if event.kind == "turn_completed":
            self.wall = (self.wall[0], time.perf_counter())
            self.cpu = (self.cpu[0], time.process_time())


@dataclasses.dataclass(frozen=True, slots=True)
class StreamRun:
    lines: int
    seconds: float
    cpu_seconds: float

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.seconds

    @property
    def cpu_us_per_line(self) -> float:
        return self.cpu_seconds / self.lines * 1e6


async def stream_one_session(lines: int) -> StreamRun:
    """One session, one turn of `lines` notifications written as fast as the pipe takes them."""
    clock = TurnClock()
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, FAKE_AGENT_SCENARIO="stream", FAKE_AGENT_STREAM_LINES=str(lines))
        launch = AgentLaunch(
            workspace=Path(folder),
            settings=CodexSettings(command=FAKE_COMMAND),
            env=env,
            on_event=clock,
        )
        session = AppServerSession(launch)
        try:
            await session.start()
            await session.run_turn("stream", title="bench")
        finally:
            await session.stop()
    # Lines, not sink events: streaming deltas are coalesced into fewer events by design.
    return StreamRun(lines, clock.wall[1] - clock.wall[0], clock.cpu[1] - clock.cpu[0])


class EventCounter:
    """Counts what the orchestrator's sinks receive, by wrapping each session's sink."""

    def __init__(self) -> None:
        self.events = 0
        self.ended = 0
        self.sessions: list[AppServerSession] = []

    @property
    def lines(self) -> int:
        return sum(session.lines_read for session in self.sessions)

    def wrap(self, sink: EventSink) -> EventSink:
        def counted(event: AgentEvent) -> None:
            self.events += 1
            if event.kind in TURN_ENDS:
                self.ended += 1
            sink(event)

        return counted

    def session_factory(self) -> Callable[[AgentLaunch], AgentSession]:
        def factory(launch: AgentLaunch) -> AgentSession:
            session = AppServerSession(
                dataclasses.replace(launch, on_event=self.wrap(launch.on_event))
            )
            self.sessions.append(session)
            return session

        return factory


def resident_kib() -> int:
    """This process's resident memory now (Linux), in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def machine_busy() -> tuple[float, float] | None:
    """(busy, total) CPU jiffies of the whole machine so far, or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [float(f) for f in fields[:8]]  # guest time is already counted in user time
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


@dataclasses.dataclass(frozen=True, slots=True)
class LoadRun:
    window_s: float
    cpu_s: float
    events: int
    lines: int
    slept: int  # voluntary context switches: the event loop had nothing to do and waited
    preempted: int  # involuntary context switches: the daemon was runnable but not running
    ended_in_window: int
    machine_busy_pct: float | None
    rss_kib_per_session: float
    """What the daemon's resident memory grew by from before the sessions started to the
    window's end, per session."""

    @property
    def cpu_pct(self) -> float:
        return self.cpu_s / self.window_s * 100

    @property
    def events_per_s(self) -> float:
        return self.events / self.window_s

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.window_s


async def orchestrator_under_load(
    tick_ms: int, *, with_store: bool = True, deltas: int = TARGET_DELTAS
) -> LoadRun:
    """50 streaming sessions under the real orchestrator; `tick_ms` > 0 makes each agent batch
    the lines due in that time into one write. `with_store` saves every loop pass to a state
    file, as the daemon the CLI starts does. `deltas`: streaming deltas between each model
    call's four bookkeeping events."""
    counter = EventCounter()
    with tempfile.TemporaryDirectory() as folder:
        board = Board(Path(folder))
        for n in range(SESSIONS):
            board.ticket(f"STR-{n}")
        # 50 login shells starting at once on a small machine take more than the default 5 s
        # to answer `initialize`.
        board.write_workflow(
            agent={"max_concurrent_agents": SESSIONS}, codex={"read_timeout_ms": 120_000}
        )
        env = dict(
            os.environ,
            FAKE_AGENT_SCENARIO="stream",
            FAKE_AGENT_STREAM_RATE=str(RATE),
            FAKE_AGENT_STREAM_TICK_MS=str(tick_ms),
            FAKE_AGENT_STREAM_DELTAS=str(deltas),
            FAKE_AGENT_DURATION_MS=str(int(STREAM_LIMIT_S * 1000)),
        )
        orchestrator = Orchestrator(
            load_settings(board.workflow, env),
            environ=env,
            session_factory=counter.session_factory(),
            watch=False,
            store=Store.open(Path(folder) / "state.db")[0] if with_store else None,
        )
        rss_before = resident_kib()
        task = asyncio.create_task(orchestrator.run())
        try:
            running = orchestrator.state.running
            async with asyncio.timeout(STARTUP_LIMIT_S):
                while sum(1 for e in running.values() if e.turn_count >= 1) < SESSIONS:
                    if task.done():
                        task.result()
                        raise RuntimeError("the orchestrator stopped before all sessions streamed")
                    await asyncio.sleep(0.05)
            await asyncio.sleep(WARMUP_S)
            events, ended, lines = counter.events, counter.ended, counter.lines
            busy = machine_busy()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            wall, cpu = time.perf_counter(), time.process_time()
            await asyncio.sleep(WINDOW_S)
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            usage_after = resource.getrusage(resource.RUSAGE_SELF)
            busy_after = machine_busy()
            rss_per_session = (resident_kib() - rss_before) / SESSIONS
            events, ended = counter.events - events, counter.ended - ended
            lines = counter.lines - lines
        finally:
            # Stopping interrupts every turn still streaming; the agents answer and exit.
            orchestrator.stop()
            await task
    busy_pct = None
    if busy is not None and busy_after is not None:
        busy_pct = (busy_after[0] - busy[0]) / (busy_after[1] - busy[1]) * 100
    slept = usage_after.ru_nvcsw - usage.ru_nvcsw
    preempted = usage_after.ru_nivcsw - usage.ru_nivcsw
    return LoadRun(wall, cpu, events, lines, slept, preempted, ended, busy_pct, rss_per_session)


def report_load(label: str, load: LoadRun, *, targeted: bool = True) -> None:
    """Print a run's figures; `targeted`: the run carries the target's load, so it is judged."""
    asked = SESSIONS * RATE
    verdict = "met" if load.cpu_pct < CPU_TARGET else f"missed, {load.cpu_pct / CPU_TARGET:.1f}x"
    judged = f" (target < {CPU_TARGET:.0f}%: {verdict})" if targeted else ""
    achieved = load.lines_per_s / asked * 100
    steady = "all streaming throughout" if load.ended_in_window == 0 else "turns ended inside it"
    machine = ""
    if load.machine_busy_pct is not None:
        machine = f"; machine {load.machine_busy_pct:.0f}% busy over {os.cpu_count()} cores"
    print(f"  {label}:")
    print(
        f"    daemon CPU {load.cpu_pct:.1f}% of one core{judged}, "
        f"{load.cpu_s / max(load.lines, 1) * 1e6:.1f} us per line"
    )
    print(
        f"    read {load.lines_per_s:,.0f} lines/s of {asked:,}/s asked "
        f"({achieved:.0f}%, {steady}); {load.events_per_s:,.0f} events/s reached the "
        "orchestrator (streaming deltas are coalesced)"
    )
    print(
        f"    daemon slept {load.slept / load.window_s:,.0f} times/s, "
        f"preempted {load.preempted / load.window_s:,.0f} times/s{machine}"
    )
    print(f"    resident memory grew {load.rss_kib_per_session:,.0f} KiB per session")
    if load.machine_busy_pct is not None and load.machine_busy_pct >= SATURATED_PCT:
        print(
            "    the agents saturated the machine and starved the daemon: it read more lines "
            "per wake-up than it would on a free machine, so this understates its cost"
        )
    elif achieved < 98:
        print("    the target load was not delivered: the figure is for a lighter load")


def main() -> None:
    tune_collector()  # as the CLI does
    import io

    from symphony.observability.logging import configure_logging

    configure_logging(level="warning", stream=io.StringIO())

    print(f"protocol lines through one AppServerSession ({LINES:,} per turn, {ROUNDS} rounds)")
    runs = [loop.run(stream_one_session(LINES)) for _ in range(ROUNDS)]
    rates = [run.lines_per_s for run in runs]
    cpu = statistics.median(run.cpu_us_per_line for run in runs)
    median = statistics.median(rates)
    verdict = (
        "meets target"
        if median >= LINES_TARGET
        else f"{(1 - median / LINES_TARGET) * 100:.0f}% short, needs {LINES_TARGET / median:.2f}x"
    )
    busy = statistics.median(run.cpu_seconds / run.seconds * 100 for run in runs)
    print(
        f"  median {median:,.0f} lines/s (best {max(rates):,.0f}, worst {min(rates):,.0f}); "
        f"daemon CPU {cpu:.1f} us/line, so at most {1e6 / cpu:,.0f} lines/s per core; "
        f"daemon busy {busy:.0f}% of the turn"
    )
    print(f"  target {LINES_TARGET:,} lines/s: {verdict}")

    print(
        f"orchestrator with {SESSIONS} sessions x {RATE} events/s "
        f"(CPU over {WINDOW_S:.0f} s once all stream)"
    )
    report_load(
        f"lines due every {BATCH_TICK_MS} ms sent in one write, a model call a second",
        loop.run(orchestrator_under_load(BATCH_TICK_MS)),
    )
    report_load(
        "the same without saving state (what the store costs)",
        loop.run(orchestrator_under_load(BATCH_TICK_MS, with_store=False)),
    )
    report_load("one write per line", loop.run(orchestrator_under_load(0)))
    report_load(
        f"a fifth of the lines bookkeeping ({MIXED_DELTAS} deltas, then 4 events)",
        loop.run(orchestrator_under_load(BATCH_TICK_MS, deltas=MIXED_DELTAS)),
        targeted=False,
    )


if __name__ == "__main__":
    main()

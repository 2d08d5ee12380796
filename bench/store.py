"""Store benchmark: what saving the daemon's state costs each loop pass.

The orchestrator saves once per loop pass, after it has handled every queued agent event. Here a
pass with 100 running sessions streaming looks like this: a batch of agent events (token usage
and a notification for 20 of the sessions) goes through the scheduling core as it would in the
daemon, then `Store.save` writes what changed, in one transaction, to a real SQLite file in WAL
mode on this machine's disk. Three kinds of pass are measured:

- streaming: only the sessions' tokens, turn counts and messages changed (the common pass);
- quiet: nothing changed since the last save (a wake-up for a timer);
- churn: a session ended and a retry was queued and another ticket dispatched (the rare pass).

Both the wall time of `save` and the process's CPU time in it are reported. Target: under 1 ms
per streaming pass. The file's size after the run shows the store stays small.

Run from the repository root: `python bench/store.py` (a few seconds).
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.store import Store
from tests.factories import make_issue, make_settings

RUNNING = 100
PASSES = 2_000
EVENTS_PER_PASS = 20
TARGET_MS = 1.0
WALL = datetime(2026, 1, 1, tzinfo=UTC)


def busy_state() -> core.SchedulerState:
    state = core.SchedulerState()
    issues = [
        make_issue(f"STR-{n}", title=f"A ticket with a realistic title {n}")
        for n in range(RUNNING * 2)
    ]
    core.select_dispatches(state, issues, make_settings(max_concurrent=RUNNING), 0.0, WALL)
    for n, issue_id in enumerate(state.running):
        started = AgentEvent("turn_started", pid=10_000 + n, thread_id=f"thr-{n}")
        core.on_agent_event(state, issue_id, started, 0.0, WALL)
    return state


def stream(state: core.SchedulerState, pass_no: int, mono: float) -> None:
    ids = list(state.running)
    for k in range(EVENTS_PER_PASS):
        issue_id = ids[(pass_no * EVENTS_PER_PASS + k) % len(ids)]
        grown = pass_no * 1000 + k
        usage = TokenUsage(grown, grown // 10, grown + grown // 10)
        core.on_agent_event(state, issue_id, AgentEvent("token_usage", usage=usage), mono, WALL)
        note = AgentEvent(
            "notification", message=f"item/completed commandExecution: pytest #{grown}"
        )
        core.on_agent_event(state, issue_id, note, mono, WALL)


def churn(state: core.SchedulerState, pass_no: int, mono: float) -> None:
    settings = make_settings(max_concurrent=RUNNING)
    issue_id = next(iter(state.running))
    core.on_worker_exit(state, issue_id, core.WorkerExit(ok=False, error="boom"), settings, mono)
    fresh = make_issue(f"NEW-{pass_no}", title="A ticket that arrived during the run")
    core.select_dispatches(state, [fresh], settings, mono, WALL)


def measure(
    store: Store, state: core.SchedulerState, change: Callable[..., None] | None
) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    gc.collect()
    for pass_no in range(PASSES):
        mono = 10.0 + pass_no * 0.05
        if change is not None:
            change(state, pass_no, mono)
        wall_now = WALL + timedelta(seconds=mono)
        start, cpu = time.perf_counter(), time.process_time()
        store.save(state, mono, wall_now)
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - start) * 1000)
    return walls, cpus


def report(label: str, walls: list[float], cpus: list[float]) -> None:
    p95 = sorted(walls)[int(len(walls) * 0.95) - 1]
    verdict = ""
    if label.startswith("streaming"):
        met = statistics.median(walls) < TARGET_MS
        verdict = f" (target < {TARGET_MS:.0f} ms: {'met' if met else 'missed'})"
    print(
        f"  {label}: median {statistics.median(walls):.3f} ms, p95 {p95:.3f} ms, "
        f"max {max(walls):.2f} ms wall; CPU {statistics.mean(cpus):.3f} ms mean{verdict}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state.db"
        store, _ = Store.open(path)
        state = busy_state()
        store.save(state, 0.0, WALL)
        print(f"store save per loop pass, {RUNNING} running sessions, {PASSES:,} passes each")
        before = store.writes
        report(f"streaming ({EVENTS_PER_PASS} sessions changed)", *measure(store, state, stream))
        rows = (store.writes - before) / PASSES
        report("quiet (nothing changed)         ", *measure(store, state, None))
        report("churn (exit, retry, dispatch)   ", *measure(store, state, churn))
        print(f"  rows written per streaming pass: {rows:.1f}")
        store.close()
        sizes = {p.name: p.stat().st_size for p in Path(folder).iterdir()}
        print(
            "  files: "
            + ", ".join(f"{name} {size / 1024:.0f} KiB" for name, size in sorted(sizes.items()))
        )


if __name__ == "__main__":
    main()

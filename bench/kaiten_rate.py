"""Kaiten rate benchmark: what the daemon sends to Kaiten, as Kaiten counts it.

Runs the real daemon (orchestrator, kaiten adapter, scripted agents in subprocesses) against the
test suite's fake Kaiten, which counts arrivals in a sliding one-second window and answers 429
to any request beyond 5, as Kaiten does. Two agents comment on their cards on every turn, a card
waits on a blocker that is read every poll, and midway a 429 is forced while a new card is
added. Prints the request rate, the most requests that arrived in any one second, how many went
over the limit, and how long after the 429's reset the new card was dispatched.

Run: `python bench/kaiten_rate.py [seconds] [poll_ms]` (default 120 s at a 300 ms poll).
Target: never more than 5 in any second; dispatch resumes within one window of the reset.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.cli import loop
from symphony.observability.logging import configure_logging
from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.kaiten.fake_kaiten import FakeKaiten, serve
from tests.adapters.kaiten.payloads import BOARD, column

TOKEN = "kaiten_bench_token_0001"
QUEUE, PROGRESS, DOING, REVIEW, DONE = 201, 202, 221, 203, 204


def most_in_a_second(times: list[float]) -> int:
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


async def main(seconds: float, poll_ms: int) -> None:
    fake = FakeKaiten(
        TOKEN,
        columns=[
            column(QUEUE, "Queue", 1, order=1),
            column(PROGRESS, "In Progress", 2, order=2),
            column(DOING, "Doing", 2, parent=PROGRESS, order=1),
            column(REVIEW, "Human Review", 2, order=3),
            column(DONE, "Done", 3, order=4),
        ],
    )
    fake.add(1, QUEUE)
    fake.add(2, DOING)
    fake.add(3, QUEUE, blocked_by=[6])
    fake.add(6, REVIEW)
    with serve(fake), tempfile.TemporaryDirectory() as folder:
        tracker = {
            "kind": "kaiten",
            "provider": {"base_url": fake.base, "board_id": BOARD},
            "active_states": ["Queue", "In Progress"],
            "terminal_states": ["Done"],
        }
        workflow = write_workflow(Path(folder), tracker, polling_ms=poll_ms, agent={"max_turns": 3})
        env = {
            "FAKE_AGENT_SCENARIO": "tool,tool,complete",
            "FAKE_AGENT_TOOL": "kaiten_add_comment",
            "FAKE_AGENT_TOOL_ARGS": json.dumps({"body": "progress note"}),
            "KAITEN_TOKEN": TOKEN,
        }
        run = start_daemon(workflow, env, timeout=seconds + 60, poll_s=0.2)
        started = time.monotonic()
        try:
            await run.until(lambda: {"1", "2"} <= run.dispatched)
            await asyncio.sleep(max(seconds / 2 - (time.monotonic() - started), 0))
            reset = fake.limit_next(reset_in_s=1.0)
            fake.add(10, QUEUE)
            await run.until(lambda: "10" in run.dispatched)
            after_reset = time.time() - reset
            await asyncio.sleep(max(seconds - (time.monotonic() - started), 0))
        finally:
            await run.stop()
        elapsed = time.monotonic() - started
    requests = fake.requests
    kinds = Counter(
        "comment"
        if r.path.endswith("/comments")
        else "listing"
        if r.path.endswith("/cards")
        else "columns"
        if "columns" in r.path
        else "card read"
        for r in requests
    )
    print(f"kaiten rate over {elapsed:.0f} s at a {poll_ms} ms poll")
    print(f"  requests            : {len(requests)} ({len(requests) / elapsed:.2f}/s)")
    print(f"  by kind             : {dict(kinds)}")
    print(f"  most in any second  : {most_in_a_second([r.at for r in requests])} (limit 5)")
    print(f"  over the limit      : {len(fake.over_limit)}")
    print(f"  forced 429, then the new card dispatched {after_reset:.2f} s after the reset")
    print(f"  cards dispatched    : {sorted(run.dispatched, key=int)}")


if __name__ == "__main__":
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    poll = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    configure_logging(level="error")
    loop.run(main(duration, poll))

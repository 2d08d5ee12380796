"""Memory benchmark: what `{{ memory }}` costs a dispatch when the notes folder has grown.

Writes 2,000 notes (the most a prompt reads) with `Memory.record`, spread over 50 topics, 20
labels and 200 files, then times choosing and rendering the notes for 200 tickets
(`Memory.for_prompt`: reading every file, scoring, sorting, rendering within the budget), and
checks each result against the budget. Parsed notes are kept while a file's size and mtime stay
the same, so the first prompt after a start (timed apart) pays for parsing them all. Also times
`record` once the folder is full (it looks for a repeat among the notes on the same topic).
Run from the repository root: `python bench/memory.py`.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from symphony import memory as memory_module
from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.config.sections import MemorySettings
from symphony.memory import MAX_NOTES_READ, Memory, Ticket


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        memory = Memory(MemorySettings(Path(folder), budget_chars=4_000), SecretMasker())
        started = time.perf_counter()
        for n in range(MAX_NOTES_READ):
            memory.record(
                f"topic {n % 50} area{n % 7}",
                f"Lesson {n}: " + "something worth knowing about the build " * (1 + n % 5),
                ticket=f"T-{n % 300}",
                labels=[f"label{n % 20}"],
                files=[f"src/module{n % 200}.py"],
            )
        filled = time.perf_counter() - started
        memory_module._parsed.clear()  # a daemon just started: nothing parsed yet
        t0 = time.perf_counter()
        memory.for_prompt(Ticket("T-0"))
        cold = time.perf_counter() - t0
        timings = []
        for n in range(200):
            issue = Issue(
                id=f"id-{n}", identifier=f"T-{n}", title=f"Fix area{n % 7} in topic {n % 50}",
                state="Todo", dispatchable=True, labels=(f"label{n % 20}",),
            )  # fmt: skip
            ticket = Ticket.of(issue, files=[f"src/module{n % 200}.py"])
            t0 = time.perf_counter()
            text = memory.for_prompt(ticket)
            timings.append(time.perf_counter() - t0)
            assert text is not None and len(text) <= 4_000
        t0 = time.perf_counter()
        memory.record("one more", "A new lesson.", ticket="T-1")
        one_record = time.perf_counter() - t0
    timings.sort()
    print(f"notes written:            {MAX_NOTES_READ} in {filled:.1f} s")
    print(f"first prompt (cold):      {cold * 1000:.0f} ms (every front matter parsed once)")
    print(
        f"{{{{ memory }}}} per prompt:   median {statistics.median(timings) * 1000:.1f} ms, "
        f"p95 {timings[int(len(timings) * 0.95)] * 1000:.1f} ms over {len(timings)} tickets"
    )
    print(f"record with a full folder: {one_record * 1000:.1f} ms")
    print("budget held:              every prompt within 4,000 chars")


if __name__ == "__main__":
    main()

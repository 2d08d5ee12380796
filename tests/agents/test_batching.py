"""Agents' stdout read in batches: real pipes and the real event loop; the ticks are called
by the test (their timer is set an hour away), so what a tick reads is exact."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from symphony.agents.batching import FULL_READ, ReadBatches, Stdout
from symphony.agents.stdio import AgentProcess

NEVER_S = 3600.0


class Reader:
    """One pipe given to the batches, with what they handed over."""

    def __init__(self, batches: ReadBatches) -> None:
        read_end, self.write_end = os.pipe()
        self.reads: list[bytes] = []
        self.ends = 0
        self.stdout: Stdout = batches.add(read_end, self.reads.append, self._ended)

    def _ended(self) -> None:
        self.ends += 1

    def write(self, data: bytes) -> None:
        os.write(self.write_end, data)

    async def read_by_loop(self) -> bytes:
        """The next read the event loop makes by itself (no tick)."""
        before = len(self.reads)
        async with asyncio.timeout(5):
            while len(self.reads) == before:
                await asyncio.sleep(0.001)
        return self.reads[-1]

    async def nothing_read_by_loop(self) -> bool:
        before = len(self.reads)
        for _ in range(20):  # twenty loop passes with the data ready to read
            await asyncio.sleep(0)
        await asyncio.sleep(0.02)
        return len(self.reads) == before


@pytest.fixture
async def batches() -> AsyncIterator[ReadBatches]:
    batches = ReadBatches(asyncio.get_running_loop(), pause_s=NEVER_S)
    yield batches


async def streaming(batches: ReadBatches) -> Reader:
    """A reader whose agent has output once, so it now streams."""
    reader = Reader(batches)
    reader.write(b"hello\n")
    assert await reader.read_by_loop() == b"hello\n"
    return reader


async def test_a_new_stdout_is_read_as_soon_as_its_agent_writes(batches: ReadBatches) -> None:
    reader = Reader(batches)
    reader.write(b"first answer\n")
    assert await reader.read_by_loop() == b"first answer\n"


async def test_a_streaming_stdout_waits_for_the_tick_and_gives_all_it_gathered_in_one_read(
    batches: ReadBatches,
) -> None:
    reader = await streaming(batches)
    for n in range(5):
        reader.write(b"delta %d\n" % n)
    assert await reader.nothing_read_by_loop()
    batches.tick()
    assert reader.reads[-1] == b"".join(b"delta %d\n" % n for n in range(5))
    assert len(reader.reads) == 2


async def test_one_tick_reads_every_streaming_stdout(batches: ReadBatches) -> None:
    readers = [await streaming(batches) for _ in range(3)]
    for n, reader in enumerate(readers):
        reader.write(b"from %d\n" % n)
    batches.tick()
    assert [reader.reads[-1] for reader in readers] == [b"from 0\n", b"from 1\n", b"from 2\n"]


async def test_a_stdout_empty_at_two_ticks_in_a_row_is_read_when_its_next_line_comes(
    batches: ReadBatches,
) -> None:
    reader = await streaming(batches)
    batches.tick()
    reader.write(b"after one quiet tick\n")
    assert await reader.nothing_read_by_loop()  # one empty tick: still streaming
    batches.tick()
    assert reader.reads[-1] == b"after one quiet tick\n"
    batches.tick()
    batches.tick()  # two empty ticks: the agent went quiet
    reader.write(b"awake again\n")
    assert await reader.read_by_loop() == b"awake again\n"
    reader.write(b"and streaming\n")
    assert await reader.nothing_read_by_loop()  # read once: it streams again


async def test_a_stdout_awaiting_an_answer_is_read_at_once(batches: ReadBatches) -> None:
    reader = await streaming(batches)
    batches.read_now(reader.stdout)
    reader.write(b'{"id": 1, "result": {}}\n')
    assert await reader.read_by_loop() == b'{"id": 1, "result": {}}\n'


async def test_a_read_that_filled_the_pipe_reads_on_at_once(batches: ReadBatches) -> None:
    reader = await streaming(batches)
    reader.write(b"x" * FULL_READ)
    batches.tick()
    assert len(reader.reads[-1]) == FULL_READ
    reader.write(b"more\n")  # its writer may have more: the loop reads it without a tick
    assert await reader.read_by_loop() == b"more\n"


async def test_the_end_of_a_stdout_is_told_once_whether_watched_or_streaming(
    batches: ReadBatches,
) -> None:
    watched, streamed = Reader(batches), await streaming(batches)
    os.close(watched.write_end)
    async with asyncio.timeout(5):
        while not watched.ends:
            await asyncio.sleep(0.001)
    streamed.write(b"last words\n")
    os.close(streamed.write_end)
    batches.tick()
    assert streamed.reads[-1] == b"last words\n" and streamed.ends == 0
    batches.tick()
    batches.tick()
    assert (watched.ends, streamed.ends) == (1, 1)
    for reader in (watched, streamed):
        with pytest.raises(OSError):
            os.fstat(reader.stdout.fd)  # its descriptor is closed


async def test_a_closed_stdout_is_not_read_again_and_its_end_not_told(
    batches: ReadBatches,
) -> None:
    reader = await streaming(batches)
    reader.write(b"unread\n")
    batches.close(reader.stdout)
    batches.tick()
    assert reader.reads == [b"hello\n"] and reader.ends == 0
    batches.close(reader.stdout)  # twice is harmless


async def test_a_reader_that_fails_ends_its_own_stdout_only(batches: ReadBatches) -> None:
    good = await streaming(batches)
    bad = await streaming(batches)

    def broken(data: bytes) -> None:
        raise RuntimeError("a bug")

    bad.stdout.on_data = broken
    bad.write(b"boom\n")
    good.write(b"fine\n")
    batches.tick()
    assert bad.ends == 1 and good.reads[-1] == b"fine\n"
    good.write(b"still read\n")
    batches.tick()
    assert good.reads[-1] == b"still read\n"


STREAMER = """
import sys, time
for n in range(60):
    sys.stdout.write('{"method": "item/agentMessage/delta", "n": %d}\\n' % n)
    sys.stdout.flush()
    time.sleep(0.005)
"""


async def test_an_agent_flushing_every_line_is_read_a_tick_at_a_time(tmp_path: Path) -> None:
    """60 lines, each flushed alone over about 0.3 s, reach the session in a few reads (about
    one a tick), not one read per line; and every line arrives."""
    script = tmp_path / "streamer.py"
    script.write_text(STREAMER)
    reads: list[int] = []
    process = AgentProcess(
        f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
        workspace=tmp_path,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        on_line=lambda line: None,
        on_long_line=lambda: None,
        on_lines=lambda lines: reads.append(len(lines)),
        logger=_Quiet(),
    )
    closed = asyncio.Event()

    async def on_closed(returncode: int | None) -> None:
        closed.set()

    loop = asyncio.get_running_loop()
    started = loop.time()
    await process.spawn(on_closed)
    async with asyncio.timeout(30):
        await closed.wait()
    elapsed = loop.time() - started
    await process.stop(1.0, None)
    assert sum(reads) == 60
    assert len(reads) <= elapsed / 0.1 + 3, (reads, elapsed)


class _Quiet:
    def bind(self, **_: object) -> _Quiet:
        return self

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None

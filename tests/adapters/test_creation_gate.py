"""An adapter's reads never overlap its creation of a ticket made in several requests."""

from __future__ import annotations

import asyncio

from symphony_adapters._support.creation import CreationGate


async def test_a_read_waits_for_a_creation_and_a_creation_for_the_reads() -> None:
    gate, order = CreationGate(), []
    linked = asyncio.Event()

    async def create() -> None:
        async with gate.creating():
            order.append("card made")
            await linked.wait()  # the blockers' requests
            order.append("blockers linked")

    async def read() -> None:
        async with gate.reading():
            order.append("read")

    making = asyncio.create_task(create())
    await asyncio.sleep(0)
    reading = asyncio.create_task(read())
    await asyncio.sleep(0.01)
    assert order == ["card made"]  # the poll waits
    linked.set()
    await asyncio.gather(making, reading)
    assert order == ["card made", "blockers linked", "read"]

    held = asyncio.Event()

    async def long_read() -> None:
        async with gate.reading():
            order.append("long read")
            await held.wait()

    order.clear()
    first = asyncio.create_task(long_read())
    await asyncio.sleep(0)
    second = asyncio.create_task(create())
    await asyncio.sleep(0.01)
    assert order == ["long read"]  # the creation waits for the read under way
    held.set()
    linked.set()
    await asyncio.gather(first, second)
    assert order == ["long read", "card made", "blockers linked"]

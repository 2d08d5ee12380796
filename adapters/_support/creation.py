"""Tickets made in more than one request are never read half-made.

Every tracker here but the local board makes a ticket first and records its blockers after
(Kaiten's `POST /cards`, then one `POST /cards/{id}/blockers` each; Linear's relations,
GitHub's and GitLab's links alike), and a poll answered in between would
show an active ticket with no blockers, and the daemon would start it. `CreationGate` keeps
an adapter's reads and its creations apart: a read waits while a ticket is being made, and a
creation waits for the reads under way to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class CreationGate:
    def __init__(self) -> None:
        self._reads = 0
        self._creating = False
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: not self._creating)
            self._reads += 1
        try:
            yield
        finally:
            async with self._changed:
                self._reads -= 1
                self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def creating(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: not self._creating and self._reads == 0)
            self._creating = True
        try:
            yield
        finally:
            async with self._changed:
                self._creating = False
                self._changed.notify_all()

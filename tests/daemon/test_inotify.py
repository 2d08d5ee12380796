"""The folder watch: inotify in the daemon's loop on Linux, batched like watchfiles' was, and
watchfiles where inotify cannot be set up."""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from symphony.daemon import inotify, watch

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")


async def next_batch(changes: AsyncIterator[set[str]], timeout_s: float = 10) -> set[str]:
    return await asyncio.wait_for(anext(changes), timeout_s)


async def test_writes_close_together_come_as_one_batch_and_no_thread_watches(
    tmp_path: Path,
) -> None:
    threads = threading.active_count()
    changes = inotify.changes([tmp_path], quiet_s=0.05, most_s=0.5)
    first = asyncio.ensure_future(next_batch(changes))
    await asyncio.sleep(0.05)  # the watch is set up when the generator first runs
    (tmp_path / "A-1.md").write_text("one")
    (tmp_path / "A-2.md").write_text("two")
    assert await first == {"A-1.md", "A-2.md"}
    assert threading.active_count() == threads
    os.replace(tmp_path / "A-2.md", tmp_path / "A-3.md")
    assert await next_batch(changes) == {"A-2.md", "A-3.md"}
    await changes.aclose()


async def test_a_batch_is_cut_after_its_longest_wait_while_changes_keep_coming(
    tmp_path: Path,
) -> None:
    changes = inotify.changes([tmp_path], quiet_s=0.2, most_s=0.05)
    batch = asyncio.ensure_future(next_batch(changes))
    await asyncio.sleep(0.05)
    (tmp_path / "first.md").write_text("x")
    await asyncio.sleep(0.15)  # past most_s, inside quiet_s: the first batch is out by now
    (tmp_path / "second.md").write_text("y")
    assert await batch == {"first.md"}
    assert await next_batch(changes) == {"second.md"}
    await changes.aclose()


async def test_a_removed_folder_ends_its_watch(tmp_path: Path) -> None:
    folder = tmp_path / "board"
    folder.mkdir()
    changes = inotify.changes([folder], quiet_s=0.01, most_s=0.03)
    ended = asyncio.ensure_future(next_batch(changes))
    await asyncio.sleep(0.05)
    folder.rmdir()
    with pytest.raises(inotify.WatchGone):
        await ended


async def test_a_folder_that_cannot_be_watched_says_so(tmp_path: Path) -> None:
    with pytest.raises(OSError) as caught:
        await next_batch(inotify.changes([tmp_path / "missing"], quiet_s=0.01, most_s=0.03))
    assert caught.value.errno == errno.ENOENT and "missing" in str(caught.value)


async def test_without_inotify_the_watch_falls_back_to_watchfiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(folders: Sequence[Path], **_: Any) -> AsyncIterator[set[str]]:
        raise OSError(errno.EMFILE, "inotify_init1: Too many open files")
        yield set()  # an async generator, as the real one

    monkeypatch.setattr(inotify, "changes", refused)
    changes = watch.folder_changes([tmp_path], quiet_ms=10, most_ms=30)
    batch = asyncio.ensure_future(next_batch(changes))
    await asyncio.sleep(0.3)  # watchfiles sets its watch up in a thread
    (tmp_path / "A-1.md").write_text("one")
    assert "A-1.md" in await batch
    await changes.aclose()

"""Hooks' and gates' scripts: a cancellation never leaves what a script started running."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from symphony.hosts import shell
from tests.harness import is_alive


async def test_a_script_cancelled_while_it_is_being_started_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio, cancelled while it sets a child up, kills that child, not its children: the
    script's background job must be ended by its mark."""
    pidfile = tmp_path / "job.pid"
    real = asyncio.create_subprocess_exec

    async def cancelled_while_starting(*args: Any, **kwargs: Any) -> Any:
        proc = await real(*args, **kwargs)
        for _ in range(250):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.02)
        proc.kill()  # what asyncio does to a child whose start was cancelled
        await proc.wait()
        raise asyncio.CancelledError

    monkeypatch.setattr(asyncio, "create_subprocess_exec", cancelled_while_starting)
    with pytest.raises(asyncio.CancelledError):
        await shell.run_script(
            "sh", 'sleep 30 & echo $! > "$PIDFILE"; wait',
            cwd=tmp_path, env={**os.environ, "PIDFILE": str(pidfile)},
            timeout_ms=30_000, tail_bytes=1000,
        )  # fmt: skip
    job = int(pidfile.read_text())
    for _ in range(150):
        if not is_alive(job):
            break
        await asyncio.sleep(0.02)
    assert not is_alive(job)

"""Asking git about a workspace: one bounded subprocess per question, never a prompt."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

GIT_TIMEOUT_S = 20.0


async def git_output(path: Path, env: Mapping[str, str], *args: str) -> str | None:
    """What `git -C path <args>` prints, or None when it failed, could not run or took longer
    than GIT_TIMEOUT_S. It never asks for credentials and takes no optional locks, so it can
    run beside an agent working in the same repository."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", "-C", str(path), *args,
            env={**env, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GIT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    return out.decode("utf-8", "replace") if proc.returncode == 0 else None

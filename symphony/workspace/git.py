"""Asking git about a workspace: one bounded subprocess per question, never a prompt."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class GitRun:
    returncode: int | None
    """None: git could not start or took too long (it was killed)."""
    out: str
    err: str


async def run_git(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, timeout_s: float = GIT_TIMEOUT_S
) -> GitRun:
    """Run `git <args>` to its end or `timeout_s`, never asking for credentials."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", *args,
            cwd=cwd,
            env={**env, "GIT_TERMINAL_PROMPT": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except OSError as exc:
        return GitRun(None, "", str(exc))
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # lands as git exits, and a stopped worker would go on.
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return GitRun(None, "", f"took over {timeout_s:.0f} s")
    return GitRun(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


async def git_output(path: Path, env: Mapping[str, str], *args: str) -> str | None:
    """What `git -C path <args>` prints, or None when it failed, could not run or took longer
    than GIT_TIMEOUT_S. It takes no optional locks, so it can run beside an agent working in
    the same repository."""
    run = await run_git("-C", str(path), *args, env={**env, "GIT_OPTIONAL_LOCKS": "0"})
    return run.out if run.returncode == 0 else None


async def is_own_work_tree(path: Path, env: Mapping[str, str]) -> bool:
    """Whether `path` is the top of a git work tree: a folder inside another repository (a
    workspace root under the project's own checkout) is not, or its questions would be answered
    about that repository."""
    top = await git_output(path, env, "rev-parse", "--show-toplevel")
    if not top or not top.strip():
        return False
    try:
        return Path(top.strip()).resolve() == path.resolve()
    except OSError:
        return False

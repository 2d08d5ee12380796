"""What the daemon's hardened git costs: every question first lists the repository's
configuration as data (one more git process) and runs with its executing keys switched off.

1. One question (`rev-parse HEAD`): plain `git -C <repo> rev-parse HEAD` against the daemon's
   `git_output`, 50 times each; median and slowest.
2. A hand-off's facts (`workspace_facts`: seven questions) on the same repository, 20 times.

Run from the repository root: `python bench/git_trust.py` (a few seconds).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from symphony.workspace.facts import workspace_facts
from symphony.workspace.git import git_output

ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
       "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip


def repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "base"],
                 ["checkout", "-q", "-b", "symphony/b-1"]):  # fmt: skip
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=ENV)
    for n in range(5):
        (repo / f"f{n}.py").write_text(f"x = {n}\n" * 50)
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=ENV)
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", f"c{n}"], check=True, env=ENV)
    return repo


async def timed(times: int, step: Callable[[], Awaitable[object]]) -> list[float]:
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        await step()
        spent.append((time.perf_counter() - start) * 1000)
    return spent


async def plain(repo: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        "git", "-C", str(repo), "rev-parse", "HEAD", stdout=asyncio.subprocess.PIPE, env=ENV
    )
    await proc.communicate()


def row(name: str, spent: list[float]) -> str:
    return f"{name:<36} {statistics.median(spent):8.2f} ms median {max(spent):8.2f} ms slowest"


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        repo = repository(Path(folder))
        before = await timed(50, lambda: plain(repo))
        after = await timed(50, lambda: git_output(repo, ENV, "rev-parse", "HEAD"))
        facts = await timed(20, lambda: workspace_facts(
            repo, base_ref="main", start_commit=None, env=ENV))  # fmt: skip
    print(row("plain git rev-parse", before))
    print(row("hardened git_output rev-parse", after))
    print(
        f"{'added per question':<36} {statistics.median(after) - statistics.median(before):8.2f} ms"
    )
    print(row("workspace_facts (7 questions)", facts))


if __name__ == "__main__":
    asyncio.run(main())

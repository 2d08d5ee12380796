"""Remote run benchmark: what a run on an SSH worker host adds to the same run on this machine.

A worker host here is a real sshd on 127.0.0.1 (the suite's lab, `tests/hosts/sshd.py`; it
needs OpenSSH and, as root, creates the lab's login user), so the figures are the cost of
OpenSSH itself and of symphony's wrapper, without a network's latency. Measured in one run,
each as the median of several:

- agent start: from launching the agent's process to its first line on stdout, for a trivial
  agent (`echo ready; exec cat` under `bash -lc`): locally, over ssh, and over ssh with the
  tool server's forward (`-R`, what a claude or ACP run adds);
- workspace: preparing an existing workspace (locally, a mark check; on a host, two of
  symphony's own commands, over the connection they share);
- git facts: the evidence's questions about a small repository (`workspace_facts`), here and
  on the host (a command each, over that shared connection).

Run from the repository root: `python bench/remote_run.py` (`--runs N`, default 10).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import logging

import structlog

from symphony.config.sections import HooksSettings, HostSpec, SshSettings
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST
from symphony.hosts.ssh import SshHost
from symphony.workspace.facts import workspace_facts
from symphony.workspace.git import LOCAL_GIT, Git
from symphony.workspace.local import WorkspaceManager
from symphony.workspace.remote import RemoteWorkspaces
from tests.hosts.sshd import SshLab

AGENT = "echo ready; exec cat"


async def first_line(host: Host, workspace: Path, env: dict[str, str]) -> float:
    """Seconds from launching the agent to its first stdout line."""
    spec = host.agent_launch(AGENT, workspace, env)
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *spec.argv, cwd=spec.cwd, env=dict(spec.env), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    if spec.preamble:
        proc.stdin.write(spec.preamble)
        await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    took = time.perf_counter() - started
    assert line.strip() == b"ready", line
    proc.stdin.close()
    with contextlib.suppress(ProcessLookupError):
        await asyncio.wait_for(proc.wait(), 10)
    return took


async def median_ms(runs: int, measure: Callable[[], Awaitable[float | None]]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        took = await measure()
        times.append(took if took is not None else time.perf_counter() - started)
    return statistics.median(times) * 1000


def small_repository(path: Path) -> None:
    path.mkdir(parents=True)
    run = ["git", "-C", str(path), "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run([*run, "init", "-q", "-b", "main"], check=True)
    for n in range(3):
        (path / f"f{n}.py").write_text(f"x = {n}\n")
        subprocess.run([*run, "add", "-A"], check=True)
        subprocess.run([*run, "commit", "-q", "-m", f"change {n}"], check=True)


async def main(runs: int) -> None:
    logging.disable(logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    lab = SshLab(("w1",))
    try:
        root = lab.servers["w1"].workspace_root
        spec = HostSpec("w1", workspace_root=str(root))
        host = SshHost(spec, SshSettings(config_file=lab.ssh_config), os.environ, str(root))
        forwarded, _ = host.with_tool_forward(9)
        remote = RemoteWorkspaces(host, HooksSettings(), env={})
        await remote.prepare("BENCH-1")
        with tempfile.TemporaryDirectory() as scratch:
            home = Path(scratch) / "home"  # a login shell that reads no one's profile
            home.mkdir()
            local_env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin"}
            local = WorkspaceManager(Path(scratch) / "ws", HooksSettings(), env=local_env)
            workspace = (await local.prepare("BENCH-1")).path
            small_repository(workspace / "repo")
            on_host = root / "repo"
            subprocess.run(["cp", "-a", str(workspace / "repo"), str(on_host)], check=True)
            subprocess.run(["chown", "-R", str(lab.uid), str(on_host)], check=False)

            figures = {
                "agent start, local": await median_ms(
                    runs, lambda: first_line(LOCAL_HOST, workspace, local_env)
                ),
                "agent start, ssh": await median_ms(
                    runs, lambda: first_line(host, remote.path_for("BENCH-1"), {})
                ),
                "agent start, ssh + tool forward": await median_ms(
                    runs, lambda: first_line(forwarded, remote.path_for("BENCH-1"), {})
                ),
                "workspace prepare, local": await median_ms(
                    runs, lambda: _none(local.prepare("BENCH-1"))
                ),
                "workspace prepare, ssh": await median_ms(
                    runs, lambda: _none(remote.prepare("BENCH-1"))
                ),
                "git facts, local": await median_ms(
                    runs, lambda: _none(_facts(workspace / "repo", LOCAL_GIT))
                ),
                "git facts, ssh": await median_ms(runs, lambda: _none(_facts(on_host, Git(host)))),
            }
    finally:
        lab.close()
    print(f"remote run overhead, median of {runs} (sshd on 127.0.0.1, no network latency)")
    for name, ms in figures.items():
        print(f"  {name:<34} {ms:8.1f} ms")
    local_total = figures["agent start, local"] + figures["workspace prepare, local"]
    remote_total = figures["agent start, ssh + tool forward"] + figures["workspace prepare, ssh"]
    print(f"  {'added per run (start + prepare)':<34} {remote_total - local_total:8.1f} ms")
    print(
        f"  {'added per hand-off (git facts)':<34} "
        f"{figures['git facts, ssh'] - figures['git facts, local']:8.1f} ms"
    )


async def _none(awaitable: Awaitable[object]) -> None:
    await awaitable


async def _facts(path: Path, git: Git) -> None:
    facts = await workspace_facts(path, base_ref="HEAD~2", start_commit=None, env={}, git=git)
    assert facts is not None and len(facts.commits) == 2, facts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10)
    asyncio.run(main(parser.parse_args().runs))

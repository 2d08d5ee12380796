"""Sandbox start cost: what a boundary adds to every agent, hook and gate start.

For each kind (none, bwrap, podman) the benchmark runs a trivial script (`true`) the way the
daemon runs a hook or a gate (`Host.run_script`, a login shell in the workspace) 20 times, and
reports the median and the slowest start-to-exit time, side by side, in one run. With a sandbox,
each run also opens and closes the run's resources (`SandboxRun`: the private home, the socket
folder, the proxy for `network: model`); that cost is reported apart, once per attempt. Both
networks that change the start are measured: `none` (no bridge) and `model` (the proxy bridge
inside, waited for before the command starts). A kind this machine cannot run is reported as
such (`symphony check` says why).

Targets on this machine: bwrap under 50 ms, podman under 500 ms per start.

Run from the repository root: `python bench/sandbox.py` (about 30 seconds).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from symphony.config.sandbox import Network, SandboxKind, SandboxSettings
from symphony.hosts import Host
from symphony.hosts.local import LocalHost
from symphony.hosts.sandbox.host import SandboxRun
from symphony.hosts.sandbox.probe import sandbox_problem

RUNS = 20
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


async def starts(host: Host, workspace: Path) -> list[float]:
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        result = await host.run_script(
            "true", cwd=workspace, env=ENV, timeout_ms=30_000, tail_bytes=1_000
        )
        times.append((time.perf_counter() - began) * 1000)
        assert result.ok, result.detail
    return times


def line(name: str, times: list[float], extra: str = "") -> None:
    print(
        f"  {name:<24} median {statistics.median(times):7.1f} ms   slowest {max(times):7.1f} ms"
        + (f"   {extra}" if extra else "")
    )


async def main() -> None:
    print(f"sandbox start cost, {RUNS} starts of `true` each (Host.run_script)")
    with tempfile.TemporaryDirectory(prefix="sy-bench-") as scratch:
        root = Path(scratch)
        workspace = root / "ws"
        workspace.mkdir()
        env = {**ENV, "HOME": str(root)}
        baseline = statistics.median(await starts(LocalHost(), workspace))
        line("none (this machine)", await starts(LocalHost(), workspace))
        for kind in (SandboxKind.BWRAP, SandboxKind.PODMAN):
            problem = sandbox_problem(kind)
            if problem is not None:
                print(f"  {kind.value:<24} cannot run here: {problem}")
                continue
            for network in (Network.NONE, Network.MODEL):
                settings = SandboxSettings(kind=kind, network=network)
                opened = time.perf_counter()
                async with SandboxRun(env=env, runs_root=root / "runs") as run:
                    host = await run.host(settings)
                    setup = (time.perf_counter() - opened) * 1000
                    times = await starts(host, workspace)
                added = statistics.median(times) - baseline
                line(f"{kind.value}, network {network.value}", times,
                     f"+{added:.1f} ms a start; run setup {setup:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())

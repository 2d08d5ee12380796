"""Start-up benchmark: what a user waits for before the command answers or the first agent
starts, beside what Python itself takes on the same machine in the same run.

Measured as separate processes, the median of several runs each:
- `python -c "import asyncio"`: the floor every figure is divided by;
- `symphony --help` and `symphony check` on a local board's WORKFLOW.md;
- start to first dispatch: `symphony WORKFLOW.md --no-tui` on a local board with one Todo
  ticket (and with 2,000 Done tickets beside it), until the agent's command starts: its
  first word, a shell `echo` before it execs the scripted agent
  (`tests/fakes/fake_app_server.py`), writes the mark. The scripted agent's own start-up (a
  Python script compiled from source, 40-100 ms here) is not the daemon's and not counted.
  The agent's login shell (`bash -lc`) runs with an empty HOME: a developer's own profile
  (this machine's runs `pyenv rehash`, about 100 ms) is that machine's start-up, not
  symphony's, and would be paid by any program that starts a login shell.
Each line prints the wall time, the peak resident memory of the command (for the ones that
exit) and its ratio to the floor. Targets: `--help` within 3x and first dispatch on an empty
board within 4x of the floor.

The package is compiled to bytecode first, as an install leaves it. Run from the repository
root: `python bench/startup.py` (about half a minute).
"""

from __future__ import annotations

import compileall
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FAKE_AGENT = ROOT / "tests" / "fakes" / "fake_app_server.py"
SYMPHONY = [sys.executable, "-m", "symphony"]
RUNS = 5
DISPATCH_TIMEOUT_S = 60.0


PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as status:\n"
    "        kib = next(line.split()[1] for line in status if line.startswith('VmHWM:'))\n"
    "    sys.__stderr__.write(f'peak {kib}\\n')\n"
    "atexit.register(peak)\n"
    "if sys.argv[1] == 'symphony':\n"
    "    del sys.argv[1]\n"
    "    runpy.run_module('symphony', run_name='__main__', alter_sys=True)\n"
    "else:\n"
    "    exec(sys.argv[1])\n"
)
"""Runs `symphony ARGS` (or the code given instead of `symphony`) and says its peak resident
memory at exit, as this process's own (VmHWM): a child's `ru_maxrss` also counts the pages of
the parent it was forked from, before it exec'd."""


def timed(argv: Sequence[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of `argv`."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}")
    return wall


def peak_mib(what: Sequence[str], env: dict[str, str]) -> float:
    """The peak resident memory (MiB) of `symphony ARGS` (`what` = ["symphony", *ARGS]) or of
    python running the code `what[0]`."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *what], env=env, cwd=ROOT, capture_output=True, text=True
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("peak ")]
    return int(lines[-1].split()[1]) / 1024


def median_of(argv: Sequence[str], what: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    walls = [timed(argv, env) for _ in range(RUNS)]
    return statistics.median(walls), peak_mib(what, env)


def board(root: Path, done: int) -> Path:
    tickets = root / "board"
    tickets.mkdir(parents=True)
    for n in range(done):
        (tickets / f"OLD-{n}.md").write_text(f"---\ntitle: Old {n}\nstate: Done\n---\nDone.\n")
    (tickets / "NEW-1.md").write_text("---\ntitle: New\nstate: Todo\n---\nDo it.\n")
    config = {
        "tracker": {"kind": "local", "provider": {"path": "board"},
                    "active_states": ["Todo"], "terminal_states": ["Done"]},
        "workspace": {"root": "workspaces"},
        "agent": {"env_passthrough": ["FAKE_AGENT_*"]},
        "codex": {"command": f'echo >> "$FAKE_AGENT_MARK"; exec {sys.executable} {FAKE_AGENT}'},
    }  # fmt: skip
    workflow = root / "WORKFLOW.md"
    workflow.write_text(f"---\n{yaml.safe_dump(config)}---\nWork on {{{{ issue.identifier }}}}\n")
    return workflow


def first_dispatch(workflow: Path, env: dict[str, str], stop: int = signal.SIGKILL) -> float:
    """Seconds from starting the daemon to its agent's command starting; `stop` then ends it."""
    record = workflow.parent / f"agent-{time.monotonic_ns()}.mark"
    env = {**env, "FAKE_AGENT_MARK": str(record), "FAKE_AGENT_SCENARIO": "hang"}
    started = time.perf_counter()
    daemon = subprocess.Popen(
        [*SYMPHONY, str(workflow), "--no-tui"], env=env, cwd=workflow.parent,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        while not (record.exists() and record.stat().st_size):
            if time.perf_counter() - started > DISPATCH_TIMEOUT_S or daemon.poll() is not None:
                raise SystemExit(f"no dispatch from {workflow} (exit {daemon.poll()})")
            time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        os.killpg(daemon.pid, stop)
        daemon.wait(timeout=DISPATCH_TIMEOUT_S)


def bytecode(workflow: Path, env: dict[str, str]) -> None:
    """Compile the package as an install does (pip writes bytecode; an editable checkout, or a
    machine with PYTHONDONTWRITEBYTECODE set, may have none), and start the daemon once as a
    first start after an install does, which keeps its dataclasses' compiled methods beside
    the bytecode (`symphony.base.dataclass_code`), so that what is timed is start-up, not
    compiling the source."""
    for package in ("symphony", "adapters"):
        compileall.compile_dir(ROOT / package, quiet=1)
    first = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first_dispatch(workflow, first, stop=signal.SIGTERM)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="symphony-startup-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(home)}
        empty, full = board(Path(tmp) / "empty", 0), board(Path(tmp) / "full", 2000)
        bytecode(empty, env)
        timed([*SYMPHONY, "--help"], env)  # warm the file cache and the bytecode
        floor, floor_mib = median_of(
            [sys.executable, "-c", "import asyncio"], ["import asyncio"], env
        )
        rows = [("python -c 'import asyncio'", floor, floor_mib)]
        commands = {
            "symphony --help": ["--help"],
            "symphony check (empty board)": ["check", str(empty)],
        }
        for label, args in commands.items():
            rows.append((label, *median_of([*SYMPHONY, *args], ["symphony", *args], env)))
        for label, workflow in (("start -> first dispatch, empty board", empty),
                                ("start -> first dispatch, 2,000 tickets", full)):  # fmt: skip
            walls = [first_dispatch(workflow, env) for _ in range(RUNS)]
            rows.append((label, statistics.median(walls), float("nan")))
    print(f"{'':42} {'wall':>8} {'peak RSS':>9} {'x floor':>8}")
    for label, wall, mib in rows:
        memory = f"{mib:6.0f} MiB" if mib == mib else f"{'-':>9}"
        print(f"{label:42} {wall * 1000:6.0f} ms {memory} {wall / floor:7.1f}x")


if __name__ == "__main__":
    main()

"""Run one shell script from WORKFLOW.md in a workspace: a hook, or a verification gate.

The script runs with `<shell> -lc` in its own process group, so a timeout (or a cancelled
caller) ends everything it started. Output goes to a temporary file rather than a pipe: a
background child that inherits the output can never keep the caller waiting past the script's
own exit, and no reader task is needed. What comes back is the outcome, the exit code, how long
it ran and the tail of its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import symphony.hosts.process as process

# How long a timed-out script gets to exit on SIGTERM before its process group is SIGKILLed.
TERM_GRACE_SECONDS = 1.0

ScriptOutcome = Literal["completed", "failed", "timed_out"]


@dataclass(frozen=True, slots=True)
class ScriptResult:
    """How a script (a hook or a gate) ran: outcome, exit code, duration and its output's tail."""

    outcome: ScriptOutcome
    exit_code: int | None
    detail: str
    """`completed`, `exited with status N`, `timed out after N ms`, `could not start: ...`."""
    duration_s: float
    tail: bytes
    """The last `tail_bytes` of its output (stdout and stderr together)."""
    total_bytes: int

    @property
    def ok(self) -> bool:
        return self.outcome == "completed"

    @property
    def output(self) -> str:
        return self.tail.decode("utf-8", "replace")


async def run_script(
    shell: str,
    script: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_ms: int,
    tail_bytes: int,
    end_group: bool = False,
    prefix: Sequence[str] = (),
) -> ScriptResult:
    """Run `script` to completion or timeout, under `prefix` (a sandbox's command line).
    `end_group` also ends whatever the script left running after a normal exit, in its group
    or escaped from it (a gate's test server must not outlive the gate; a hook's background
    service may)."""
    started = time.monotonic()
    mark = process.new_mark()
    with contextlib.ExitStack() as stack:
        try:
            output = stack.enter_context(tempfile.TemporaryFile())
            proc = await asyncio.create_subprocess_exec(
                *prefix,
                shell,
                "-lc",
                script,
                cwd=cwd,
                env={**env, process.CHILD_VARIABLE: mark},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return ScriptResult(
                "failed", None, f"could not start: {exc}", time.monotonic() - started, b"", 0
            )
        except BaseException:
            # Cancelled while asyncio was still setting the child up: asyncio kills the child,
            # but not what the script started meanwhile, which carries its mark.
            process.kill_marked(mark)
            raise
        process.track(proc.pid)
        try:
            async with asyncio.timeout(timeout_ms / 1000):  # never swallows a cancellation
                await proc.wait()
        except TimeoutError:
            await process.end_group(proc, TERM_GRACE_SECONDS, mark=mark)
            outcome: ScriptOutcome = "timed_out"
            detail = f"timed out after {timeout_ms} ms"
        except BaseException:
            # Cancelled (the worker was stopped): the script must not outlive its owner.
            process.signal_group(proc.pid, signal.SIGKILL)
            process.kill_marked(mark)
            raise
        else:
            code = proc.returncode
            outcome = "completed" if code == 0 else "failed"
            detail = "completed" if code == 0 else f"exited with status {code}"
            if end_group:
                process.signal_group(proc.pid, signal.SIGKILL)
                process.kill_marked(mark)
        finally:
            process.untrack(proc.pid)
        tail, total = read_tail(output, tail_bytes)
    return ScriptResult(outcome, proc.returncode, detail, time.monotonic() - started, tail, total)


def read_tail(output: IO[bytes], tail_bytes: int, start: int = 0) -> tuple[bytes, int]:
    """The last `tail_bytes` of a script's output file and its size, counting from `start`
    (what comes before it is not the script's)."""
    output.seek(0, os.SEEK_END)
    total = output.tell() - start
    output.seek(start + max(0, total - tail_bytes))
    return output.read(), total

"""The shared harness of the daemon's end-to-end tests: a local board with its WORKFLOW.md, the
scripted agent that speaks the app-server protocol, and an orchestrator running in the
background with a way to wait for its state."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator

FAKE_AGENT = Path(__file__).parent / "fakes" / "fake_app_server.py"


class Board:
    """A local board plus WORKFLOW.md in a temporary folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tickets = root / "board"
        self.tickets.mkdir()
        self.workspaces = root / "workspaces"
        self.workflow = root / "WORKFLOW.md"

    def ticket(self, identifier: str, state: str = "Todo", **fields: Any) -> None:
        front = {"title": f"Ticket {identifier}", "state": state, **fields}
        text = f"---\n{yaml.safe_dump(front, sort_keys=False)}---\nDo the thing for {identifier}.\n"
        (self.tickets / f"{identifier}.md").write_text(text)

    def state_of(self, identifier: str) -> str:
        text = (self.tickets / f"{identifier}.md").read_text()
        front = yaml.safe_load(text.split("---")[1])
        return str(front["state"])

    def write_workflow(
        self,
        *,
        agent: dict[str, Any] | None = None,
        codex: dict[str, Any] | None = None,
        hooks: dict[str, Any] | None = None,
        polling_ms: int = 60_000,
        prompt: str = "Work on {{ issue.identifier }}: {{ issue.title }}",
        **sections: Any,
    ) -> None:
        config = {
            "tracker": {
                "kind": "local",
                "provider": {"path": "board"},
                "active_states": ["Todo", "In Progress"],
                "terminal_states": ["Done", "Cancelled"],
            },
            "polling": {"interval_ms": polling_ms},
            "workspace": {"root": "workspaces"},
            "hooks": hooks or {},
            "agent": {
                "max_concurrent_agents": 4,
                "env_passthrough": list(FAKE_ENV),
                **(agent or {}),
            },
            "codex": {
                "command": f"{sys.executable} {FAKE_AGENT}",
                "read_timeout_ms": 5000,
                "turn_timeout_ms": 20_000,
                **(codex or {}),
            },
            **sections,
        }
        self.workflow.write_text(f"---\n{yaml.safe_dump(config)}---\n{prompt}\n")


FAKE_ENV = ("FAKE_AGENT_*", "DEMO_AGENT_*")
"""How the tests steer the scripted agents; an agent sees nothing it is not given."""


def scenario_env(scenario: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["FAKE_AGENT_SCENARIO"] = scenario
    env.update(extra)
    return env


class Running:
    """An orchestrator running in the background, with a way to wait for its state.

    `dispatched` remembers every issue id it ever ran. A fake tracker that changes behind the
    orchestrator's back tells it nothing: `poll_s` makes `until` look again that often.
    """

    def __init__(
        self, orchestrator: Orchestrator, *, timeout: float = 15.0, poll_s: float | None = None
    ) -> None:
        self.orchestrator = orchestrator
        self.changed = asyncio.Event()
        self.max_running = 0
        self.dispatched: set[str] = set()
        self.timeout = timeout
        self.poll_s = poll_s
        orchestrator.view.add_listener(self._on_change)
        self.task = asyncio.create_task(orchestrator.run())

    def _on_change(self) -> None:
        running = self.orchestrator.state.running
        self.max_running = max(self.max_running, len(running))
        self.dispatched.update(running)
        self.changed.set()

    async def until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        async def wait() -> None:
            while not predicate():
                if self.task.done():
                    self.task.result()
                    raise AssertionError("orchestrator stopped early")
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), self.poll_s)

        await asyncio.wait_for(wait(), timeout or self.timeout)

    async def stop(self) -> None:
        self.orchestrator.stop()
        await asyncio.wait_for(self.task, 30)


def start(board: Board, env: dict[str, str], **kw: Any) -> Running:
    settings = load_settings(board.workflow, env)
    return Running(Orchestrator(settings, environ=env, **kw))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def is_alive(pid: int) -> bool:
    """Alive and not a zombie: killed orphans may linger unreaped as zombies in containers."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class WorkflowFolder(Protocol):
    """Where a daemon is started: a folder and the WORKFLOW.md it runs (a `Board`, ...)."""

    @property
    def root(self) -> Path: ...

    @property
    def workflow(self) -> Path: ...


@dataclass(frozen=True)
class Folder:
    root: Path
    workflow: Path


class Daemon:
    """`python -m symphony` on a board's WORKFLOW.md, its log lines collected as they come."""

    def __init__(self, board: WorkflowFolder, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "symphony", str(board.workflow), "--no-tui", *args],
            cwd=board.root,
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        threading.Thread(target=lambda: self.lines.extend(stream), daemon=True).start()

    def wait_for(self, needle: str, count: int = 1, timeout: float = 30) -> list[str]:
        found: list[str] = []

        def enough() -> bool:
            found[:] = [line for line in list(self.lines) if needle in line]
            return len(found) >= count

        if not wait_until(enough, timeout):
            raise AssertionError(f"{needle!r} x{count} not logged; got:\n{''.join(self.lines)}")
        return found

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self.proc.kill()

    def url(self) -> str:
        (line,) = self.wait_for("http server listening")
        match = re.search(r"url=(\S+)", line)
        assert match is not None
        return match.group(1)

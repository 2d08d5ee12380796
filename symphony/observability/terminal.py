"""The live terminal status: a compact table of the fleet, redrawn once a second.

It reads the orchestrator's snapshot and nothing else, so it can never affect scheduling. Log
lines keep flowing above the table: while it is shown, console logs are printed through the
same rich console (`ConsoleLogStream`), which keeps the two from tearing each other apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from symphony.base.secrets import SecretMasker
from symphony.base.times import parse_instant

REFRESH_S = 1.0


class ConsoleLogStream:
    """A file-like sink for log lines that prints them above a live display."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def write(self, text: str) -> int:
        # print() sends the line and its newline as two writes; each line is printed once.
        if text.strip("\n"):
            for line in text.rstrip("\n").split("\n"):
                self._console.print(Text(line), soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        return None


def render_status(snapshot: Mapping[str, Any], masker: SecretMasker) -> RenderableType:
    """The table for one snapshot: health banner, running sessions, retry queue, totals.

    Tracker secrets are masked first: the table shares the terminal with the (masked) logs.
    """
    snapshot = masker.mask_value(snapshot)
    parts: list[RenderableType] = []
    health = snapshot.get("health") or {}
    for key, label in (("workflow_error", "WORKFLOW.md rejected"), ("tracker_error", "tracker")):
        if health.get(key):
            parts.append(Text(f" {label}: {health[key]} ", style="bold white on red"))
    now = parse_instant(snapshot.get("generated_at"))

    running = Table(title=None, expand=True, header_style="bold", pad_edge=False)
    for column in ("ticket", "state", "turn", "last event", "age", "tokens", "runtime"):
        running.add_column(column, no_wrap=column != "last event", overflow="ellipsis")
    for row in snapshot.get("running", []):
        event = row.get("last_message") or row.get("last_event") or "starting"
        if row.get("stopping"):
            event = f"stopping ({row['stopping']}): {event}"
        running.add_row(
            str(row.get("issue_identifier")),
            str(row.get("state")),
            str(row.get("turn_count") or 0),
            event,
            _age(now, parse_instant(row.get("last_event_at") or row.get("started_at"))),
            f"{row.get('tokens', {}).get('total_tokens', 0):,}",
            _duration(row.get("runtime_seconds") or 0),
        )
    if not snapshot.get("running"):
        running.add_row("-", "", "", "no agent running", "", "", "")
    parts.append(running)

    retrying = snapshot.get("retrying", [])
    if retrying:
        queue = Table(expand=True, header_style="bold", pad_edge=False)
        for column in ("retry", "attempt", "due in", "why"):
            queue.add_column(column, no_wrap=column != "why", overflow="ellipsis")
        for row in retrying:
            queue.add_row(
                str(row.get("issue_identifier")),
                str(row.get("attempt")),
                _duration(row.get("due_in_seconds") or 0),
                str(row.get("error") or row.get("kind")),
            )
        parts.append(queue)

    totals = snapshot.get("codex_totals", {})
    counts = snapshot.get("counts", {})
    parts.append(
        Text(
            f"{counts.get('running', 0)} running, {counts.get('retrying', 0)} retrying · "
            f"tokens {totals.get('total_tokens', 0):,} "
            f"(in {totals.get('input_tokens', 0):,}, out {totals.get('output_tokens', 0):,}) · "
            f"agent time {_duration(totals.get('seconds_running') or 0)}",
            style="dim",
        )
    )
    return Group(*parts)


class TerminalStatus:
    """Redraws `render_status(snapshot())` on `console` until cancelled."""

    def __init__(
        self, snapshot: Callable[[], Mapping[str, Any]], console: Console, masker: SecretMasker
    ) -> None:
        self._snapshot = snapshot
        self._console = console
        self._masker = masker

    async def run(self) -> None:
        with (
            Live(
                render_status(self._snapshot(), self._masker),
                console=self._console,
                auto_refresh=False,
                transient=True,
            ) as live,
            contextlib.suppress(asyncio.CancelledError),
        ):
            while True:
                await asyncio.sleep(REFRESH_S)
                live.update(render_status(self._snapshot(), self._masker), refresh=True)


def _age(now: datetime | None, then: datetime | None) -> str:
    if now is None or then is None:
        return ""
    return _duration(max((now - then).total_seconds(), 0.0))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"

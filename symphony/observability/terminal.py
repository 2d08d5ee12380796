"""The live terminal status: a compact table of the agents, redrawn once a second.

It reads snapshots and nothing else, so it can never affect scheduling: one orchestrator's
(`render_status`), or every workflow's of a fleet with the fleet's pool (`render_fleet`, for
`symphony serve`). Log lines keep flowing above the table: while it is shown, console logs are
printed through the same rich console (`ConsoleLogStream`), which keeps the two from tearing
each other apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
    running = _running_table([("", snapshot)], with_workflow=False)
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

    totals = snapshot.get("agent_totals", {})
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


def _running_table(
    snapshots: Sequence[tuple[str, Mapping[str, Any]]], *, with_workflow: bool
) -> Table:
    """The running sessions of each (workflow, snapshot), one row each."""
    table = Table(title=None, expand=True, header_style="bold", pad_edge=False)
    columns = ("ticket", "state", "turn", "last event", "age", "tokens", "runtime")
    for column in ("workflow", *columns) if with_workflow else columns:
        table.add_column(column, no_wrap=column != "last event", overflow="ellipsis")
    for workflow, snapshot in snapshots:
        now = parse_instant(snapshot.get("generated_at"))
        for row in snapshot.get("running", []):
            event = row.get("last_message") or row.get("last_event") or "starting"
            if row.get("stopping"):
                event = f"stopping ({row['stopping']}): {event}"
            cells = (
                str(row.get("issue_identifier")),
                str(row.get("state")),
                str(row.get("turn_count") or 0),
                event,
                _age(now, parse_instant(row.get("last_event_at") or row.get("started_at"))),
                f"{row.get('tokens', {}).get('total_tokens', 0):,}",
                _duration(row.get("runtime_seconds") or 0),
            )
            table.add_row(*((workflow, *cells) if with_workflow else cells))
    if not table.row_count:
        empty = ("-", "", "", "no agent running", "", "", "")
        table.add_row(*(("", *empty) if with_workflow else empty))
    return table


@dataclass(frozen=True, slots=True)
class FleetMember:
    """One workflow of a fleet as the table shows it: its snapshot when it runs, else why not."""

    name: str
    weight: int
    snapshot: Mapping[str, Any] | None
    error: str | None = None


def render_fleet(
    members: Sequence[FleetMember], fleet: Mapping[str, Any], masker: SecretMasker
) -> RenderableType:
    """The fleet's table: each workflow's share, load and health, then every running session
    with its workflow, then the pool."""
    fleet = masker.mask_value(fleet)
    shares = fleet.get("shares") or {}
    summary = Table(expand=True, header_style="bold", pad_edge=False)
    for column in ("workflow", "weight", "share", "running", "retrying", "status"):
        summary.add_column(column, no_wrap=column != "status", overflow="ellipsis")
    live: list[tuple[str, Mapping[str, Any]]] = []
    for member in members:
        snapshot = masker.mask_value(member.snapshot) if member.snapshot is not None else None
        if snapshot is None:
            status = Text(f"not running: {masker.mask(member.error or 'starting')}", style="red")
            summary.add_row(member.name, str(member.weight), "", "", "", status)
            continue
        live.append((member.name, snapshot))
        health = snapshot.get("health") or {}
        problem = health.get("workflow_error") or health.get("tracker_error")
        counts = snapshot.get("counts", {})
        summary.add_row(
            member.name, str(member.weight), str(shares.get(member.name, "")),
            str(counts.get("running", 0)), str(counts.get("retrying", 0)),
            Text(str(problem), style="red") if problem else Text("ok", style="green"),
        )  # fmt: skip
    budget = fleet.get("daily_budget_usd")
    pool = (
        f"fleet: {fleet.get('running', 0)} of {fleet.get('max_concurrent_agents')} agent slots"
        + (f" · daily budget ${budget:,.2f}" if budget is not None else "")
        + (" spent: nothing new starts" if fleet.get("budget_spent") else "")
    )
    return Group(summary, _running_table(live, with_workflow=True), Text(pool, style="dim"))


class TerminalStatus:
    """Redraws `render()` on `console` until cancelled."""

    def __init__(self, render: Callable[[], RenderableType], console: Console) -> None:
        self._render = render
        self._console = console

    async def run(self) -> None:
        with (
            Live(self._render(), console=self._console, auto_refresh=False, transient=True) as live,
            contextlib.suppress(asyncio.CancelledError),
        ):
            while True:
                await asyncio.sleep(REFRESH_S)
                live.update(self._render(), refresh=True)


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

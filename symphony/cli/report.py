"""`symphony report`: the outcome figures of a workflow over a window, as a table.

It reads the workflow's store beside a running daemon (read-only: SQLite in WAL mode lets it)
and prints what `/metrics` and the dashboard show, for any window: hand-offs, rework, escalations,
acceptance, time to hand-off, tokens per accepted ticket, and each gate's pass rate.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from symphony.base.exits import EXIT_OK
from symphony.cli.workflows import each, fleet_of, single
from symphony.config.fields import INVALID_CONFIG, ConfigError
from symphony.config.load import load_settings
from symphony.core.costs import usd
from symphony.core.outcomes import OutcomeSummary, summarize
from symphony.store import Store

_UNITS = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_window(text: str) -> timedelta:
    """`90m`, `24h`, `7d` or `2w`."""
    match = re.fullmatch(r"\s*(\d+)\s*([mhdw])\s*", text)
    if match is None or int(match.group(1)) == 0:
        raise ConfigError(INVALID_CONFIG, f"--since must be like 90m, 24h, 7d or 2w, got {text!r}")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def report_text(
    store: Store | None, *, workflow: str, window: timedelta, label: str, now: datetime
) -> str:
    since = now - window
    header = f"Outcomes of {workflow}, last {label} (since {since:%Y-%m-%d %H:%M} UTC)"
    if store is None:
        return f"{header}\n\nNo state yet: the daemon has not run this workflow."
    summary = summarize(store.outcomes(since))
    text = f"{header}\n\n{format_summary(summary)}"
    tickets = store.ticket_costs(since)
    if tickets:
        text += f"\n\n{'ticket':<22}{'cost':>10}   tokens"
        for identifier, cost, tokens in tickets:
            text += f"\n{identifier:<22}{usd(cost):>10}   {tokens:,}"
    return text


def format_summary(s: OutcomeSummary) -> str:
    rows = [
        ("handed to review", str(s.handoffs), ""),
        ("rework rounds", str(s.reworks), f"rework rate {_percent(s.rework_rate)}"),
        ("escalated", str(s.escalations), "blocked, stuck or verification failed"),
        (
            "closed after review",
            str(s.closed),
            f"first-pass acceptance {_percent(s.first_pass_rate)}",
        ),
        ("time to hand-off", _duration(s.median_handoff_s), "median, from stage entry"),
        (
            "tokens per accepted",
            "-" if s.tokens_per_accepted is None else f"{round(s.tokens_per_accepted):,}",
            "all attempts of a ticket",
        ),
        (
            "cost per accepted",
            "-" if s.closed == 0 else usd(s.cost_per_accepted_usd),
            "unknown when a model had no price",
        ),
    ]
    if s.merged or s.check_fixes:
        rows += [
            (
                "merged",
                str(s.merged),
                f"without rework {_percent(s.merged_without_rework_rate)}",
            ),
            ("time to merge", _duration(s.median_merge_s), "median, from publishing"),
            (
                "check fixes",
                str(s.check_fixes),
                f"green after the fix {_percent(s.check_fix_rate)}",
            ),
        ]
    if s.limited_s:
        rows.append(("limited", _duration(s.limited_s), "agents paused by their providers"))
    lines = [f"{name:<22}{value:>10}   {note}".rstrip() for name, value, note in rows]
    if s.gates:
        lines += ["", f"{'gate':<22}{'passes':>10}   rounds"]
        for gate, rate in sorted(s.gates.items()):
            lines.append(f"{gate:<22}{_percent(rate.rate):>10}   {rate.passed} of {rate.runs}")
    else:
        lines += ["", "no verification gate ran"]
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def report(args: argparse.Namespace) -> int:
    """Print the outcome figures of a workflow, or of each of a fleet's."""
    members = fleet_of(args.workflow)
    if members is not None:
        return each(members, lambda path: _report_one(path, args.since))
    return _report_one(single(args.workflow), args.since)


def _report_one(workflow: Path, since: str) -> int:
    window = parse_window(since)
    settings = load_settings(workflow)
    assert settings.state is not None
    store = Store.read_only(settings.state.path)
    try:
        print(
            report_text(
                store,
                workflow=str(settings.workflow_path),
                window=window,
                label=since.strip(),
                now=datetime.now(UTC),
            )
        )
    finally:
        if store is not None:
            store.close()
    return EXIT_OK

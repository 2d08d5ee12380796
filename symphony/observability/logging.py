"""Structured logs: `key=value` lines (or JSON) on stderr, and one log file per ticket.

Every record about a ticket carries `issue_id` and `issue_identifier`; agent lifecycle records
carry `session_id`. Known secret values are masked in every record before any sink sees it. A
sink that fails (a full disk, a removed folder) is reported once and skipped; logging never stops
the daemon.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Protocol, TextIO, cast

import structlog

from symphony.base.secrets import SecretMasker
from symphony.workspace.local import workspace_key


class LineSink(Protocol):
    """Where console log lines go: a text stream, or the live terminal display's printer."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


_FIRST_KEYS = ("ts", "level", "event")


def render_kv(event: MutableMapping[str, Any]) -> str:
    """`ts=... level=info event="dispatching" issue_identifier=ABC-1`, keys in a stable order."""
    keys = [k for k in _FIRST_KEYS if k in event] + sorted(k for k in event if k not in _FIRST_KEYS)
    return " ".join(f"{key}={_kv_value(event[key])}" for key in keys if event[key] is not None)


def _kv_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and all(ch not in text for ch in ' "=\n\t'):
        return text
    return json.dumps(text)


MAX_FIELD_CHARS = 1000
"""The longest any string field of a log record may be; longer ones are cut with a marker."""
FIELD_LIMITS = {
    # Free text from trackers and agents (spec §10.4 bounds agent messages at 200 characters).
    "title": 200,
    "detail": 200,
    "message": 200,
    # A hook's output tail and a traceback are worth more room, but still a bound.
    "output": 4096,
    "exception": 20_000,
}


def bound_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Cut every string field to its limit, so a 1 MB ticket title cannot make 1 MB log lines.

    Runs after the masker: a secret is replaced whole before any cut could split it.
    """
    for key, value in event.items():
        if isinstance(value, str):
            limit = FIELD_LIMITS.get(key, MAX_FIELD_CHARS)
            if len(value) > limit:
                event[key] = f"{value[:limit]}...[+{len(value) - limit} chars]"
    return event


def issue_log_path(logs_root: Path, identifier: str) -> Path:
    """Where a ticket's own log file is under `--logs-root`."""
    return logs_root / f"{workspace_key(identifier)}.log"


class IssueLogFiles:
    """Appends each ticket's records to `<logs_root>/<workspace_key>.log`.

    Bounded for a daemon that runs for weeks (`keep`): a file that grows past its size limit is
    rotated to `<name>.log.1` (one older copy kept), and files untouched for `keep_days` are
    deleted when the daemon starts and once a day after. Only files that read as this daemon's
    records are deleted: `--logs-root` may be a folder other programs write to as well.
    """

    def __init__(self, root: Path, stream: LineSink) -> None:
        self.root = root
        self._stream = stream
        self._failed = False
        self._max_bytes: int | None = None
        self._keep_days: int | None = None
        self._sizes: dict[Path, int] = {}
        self._pruned_at = 0.0

    def path_for(self, identifier: str) -> Path:
        return issue_log_path(self.root, identifier)

    def keep(self, max_bytes: int, keep_days: int) -> None:
        """Set the retention, and delete what is older than it now."""
        self._max_bytes, self._keep_days = max_bytes, keep_days
        self.prune()

    def prune(self) -> int:
        """Delete log files untouched for `keep_days`; returns how many."""
        self._pruned_at = time.time()
        if self._keep_days is None or not self.root.is_dir():
            return 0
        cutoff = time.time() - self._keep_days * 86_400
        removed = 0
        for path in [*self.root.glob("*.log"), *self.root.glob("*.log.1")]:
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff and _holds_our_records(path):
                    path.unlink()
                    self._sizes.pop(path, None)
                    removed += 1
        return removed

    def __call__(
        self, _: Any, __: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        identifier = event.get("issue_identifier")
        if isinstance(identifier, str):
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                line = render_kv(dict(event)) + "\n"
                path = self.path_for(identifier)
                self._rotate(path, len(line.encode("utf-8")))
                with path.open("a", encoding="utf-8") as handle:
                    handle.write(line)
                if self._keep_days is not None and time.time() - self._pruned_at > 86_400:
                    self.prune()
                self._failed = False
            except OSError as exc:
                if not self._failed:
                    self._stream.write(
                        f'level=warning event="per-issue log failed" reason={_kv_value(str(exc))}\n'
                    )
                self._failed = True
        return event

    def _rotate(self, path: Path, adding: int) -> None:
        if self._max_bytes is None:
            return
        size = self._sizes.get(path)
        if size is None:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = 0
        if size + adding > self._max_bytes and size > 0:
            os.replace(path, path.with_name(path.name + ".1"))
            size = 0
        self._sizes[path] = size + adding


def _holds_our_records(path: Path) -> bool:
    """Whether a file starts the way every per-ticket record does (`ts=...`)."""
    with path.open("rb") as handle:
        return handle.read(3) == b"ts="


class TolerantSink:
    """A line sink that drops what it cannot write: once the terminal that started the daemon
    is closed, writing to it fails (EIO), and a log line must never fail the code logging it."""

    def __init__(self, stream: LineSink) -> None:
        self._stream = stream

    def write(self, text: str, /) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


def configure_logging(
    *,
    fmt: str = "console",
    level: str = "info",
    logs_root: Path | None = None,
    stream: LineSink | None = None,
    masker: SecretMasker | None = None,
) -> IssueLogFiles | None:
    """Set up structlog for the process; returns the per-issue file sink when one is used.

    `masker` is the daemon's one masker (the orchestrator's): every record passes it before any
    sink sees it. None only where no secret is known (benchmarks)."""
    out = TolerantSink(stream or sys.stderr)
    files = IssueLogFiles(logs_root, out) if logs_root is not None else None
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.format_exc_info,
        *([masker] if masker is not None else []),
        bound_fields,
    ]
    if files is not None:
        processors.append(files)
    if fmt == "json":
        processors.append(structlog.processors.JSONRenderer(default=str))
    else:
        processors.append(lambda _, __, event: render_kv(event))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, out)),
        cache_logger_on_first_use=False,
    )
    return files

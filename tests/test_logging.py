"""Structured logs: stable key=value lines, issue context, secret masking, failing sinks."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from symphony.observability.logging import configure_logging, masker, render_kv


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    masker.set(())
    structlog.reset_defaults()


def test_key_value_lines_put_level_and_event_first_and_quote_when_needed() -> None:
    line = render_kv({"event": "stopping run", "level": "info", "ts": "T", "b": 2, "a": "x y"})
    assert line == 'ts=T level=info event="stopping run" a="x y" b=2'


def test_issue_records_reach_console_and_the_per_issue_file(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging(logs_root=tmp_path / "logs", stream=out)
    structlog.get_logger("t").info("dispatching", issue_id="1", issue_identifier="ABC/1")
    structlog.get_logger("t").info("unrelated")
    assert "issue_identifier=ABC/1" in out.getvalue()
    files = list((tmp_path / "logs").iterdir())
    assert len(files) == 1 and files[0].name.startswith("ABC_1")
    assert "dispatching" in files[0].read_text() and "unrelated" not in files[0].read_text()


def test_known_secret_values_are_masked_in_every_record() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    masker.set(["tok_abcdef123"])
    structlog.get_logger("t").warning("request failed", reason="401 for token tok_abcdef123")
    assert "tok_abcdef123" not in out.getvalue() and "[redacted]" in out.getvalue()


def test_failing_per_issue_sink_warns_once_and_logging_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    out = io.StringIO()
    configure_logging(logs_root=blocker / "logs", stream=out)
    for _ in range(3):
        structlog.get_logger("t").info("tick", issue_identifier="ABC-1")
    text = out.getvalue()
    assert text.count("per-issue log failed") == 1
    assert text.count("event=tick") == 3

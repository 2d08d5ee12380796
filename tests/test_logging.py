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


def test_every_free_text_field_is_bounded_so_a_huge_title_stays_small(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging(logs_root=tmp_path / "logs", stream=out)
    huge = "x" * 1_000_000
    structlog.get_logger("t").info(
        "agent turn starting", title=huge, reason=huge, issue_identifier="ABC-1"
    )
    for text in (out.getvalue(), (tmp_path / "logs" / "ABC-1.log").read_text()):
        assert len(text) < 2_000
        assert "x" * 200 + "...[+999800 chars]" in text
        assert "x" * 1000 + "...[+999000 chars]" in text


def test_a_secret_is_masked_before_a_long_field_is_cut() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    masker.set(["tok_abcdef123"])
    structlog.get_logger("t").info("x", title="y" * 195 + "tok_abcdef123" + "z" * 50)
    assert "tok_a" not in out.getvalue() and "y" * 195 + "[reda..." in out.getvalue()


def test_logging_to_a_terminal_that_went_away_never_fails_the_caller() -> None:
    class Gone:
        def write(self, text: str, /) -> int:
            raise OSError(5, "Input/output error")

        def flush(self) -> None:
            raise OSError(5, "Input/output error")

    configure_logging(stream=Gone())
    structlog.get_logger("t").warning("still stopping")  # must not raise

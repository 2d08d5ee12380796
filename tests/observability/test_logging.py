"""Structured logs: stable key=value lines, issue context, secret masking, failing sinks."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from symphony.base.secrets import SecretMasker
from symphony.observability.logging import configure_logging, render_kv


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
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
    masker = SecretMasker()
    configure_logging(stream=out, masker=masker)
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
    masker = SecretMasker()
    configure_logging(stream=out, masker=masker)
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


def test_a_ticket_log_past_its_size_limit_rotates_to_one_older_copy(tmp_path: Path) -> None:
    files = configure_logging(logs_root=tmp_path / "logs", stream=io.StringIO())
    assert files is not None
    files.keep(max_bytes=2_000, keep_days=30)
    for n in range(100):
        structlog.get_logger("t").info("tick", issue_identifier="ABC-1", n=n)
    current, older = tmp_path / "logs" / "ABC-1.log", tmp_path / "logs" / "ABC-1.log.1"
    assert current.stat().st_size <= 2_000 and older.stat().st_size <= 2_000
    assert "n=99" in current.read_text()
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["ABC-1.log", "ABC-1.log.1"]


def test_old_ticket_logs_are_deleted_but_never_a_file_another_program_wrote(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    files = configure_logging(logs_root=logs, stream=io.StringIO())
    assert files is not None
    structlog.get_logger("t").info("tick", issue_identifier="OLD-1")
    structlog.get_logger("t").info("tick", issue_identifier="NEW-1")
    (logs / "nginx.log").write_text("127.0.0.1 - - GET /\n")
    month_ago = time.time() - 40 * 86_400
    for name in ("OLD-1.log", "nginx.log"):
        os.utime(logs / name, (month_ago, month_ago))
    files.keep(max_bytes=10_000_000, keep_days=30)
    assert sorted(p.name for p in logs.iterdir()) == ["NEW-1.log", "nginx.log"]

"""`symphony report`'s table (`symphony.cli.report.format_summary`)."""

from __future__ import annotations

from symphony.cli.report import format_summary
from symphony.core.outcomes import OutcomeSummary


def test_the_time_agents_spent_limited_is_a_row_only_when_there_was_some() -> None:
    assert "limited" not in format_summary(OutcomeSummary())
    rows = format_summary(OutcomeSummary(limited_s=5400.0)).splitlines()
    (row,) = [line for line in rows if line.startswith("limited")]
    assert row.split()[1:3] == ["90", "min"]
    assert row.endswith("agents paused by their providers")

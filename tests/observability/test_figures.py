"""The outcome figures: computed from the kept records, again only when records were added or
the last figures are old, and over the plot window only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from symphony.core.outcomes import HANDOFF, OutcomeRecord
from symphony.observability.figures import OUTCOME_REFRESH_S, OutcomeFigures

NOON = datetime(2026, 3, 10, 12, tzinfo=UTC)


def handoff(at: datetime, n: int = 1) -> OutcomeRecord:
    return OutcomeRecord(at, HANDOFF, f"id-{n}", f"A-{n}")


def test_figures_are_recomputed_when_records_are_added_and_else_only_when_old() -> None:
    figures = OutcomeFigures()
    figures.refresh(0.0, NOON)
    assert figures.report is not None and figures.report["summary"]["handoffs"] == 0
    figures.add([handoff(NOON)])
    figures.refresh(1.0, NOON)
    assert figures.report["summary"]["handoffs"] == 1
    figures.add([])  # nothing new: the figures stand
    first = figures.report
    figures.refresh(2.0, NOON)
    assert figures.report is first
    figures.refresh(1.0 + OUTCOME_REFRESH_S, NOON)
    assert figures.report is not first


def test_records_older_than_the_plot_window_are_dropped() -> None:
    figures = OutcomeFigures()
    old = OutcomeFigures.since(NOON) - timedelta(hours=1)
    figures.add([handoff(old, 1), handoff(NOON - timedelta(days=1), 2)])
    figures.refresh(0.0, NOON)
    assert figures.report is not None
    assert sum(day["handoffs"] for day in figures.report["daily"]) == 1

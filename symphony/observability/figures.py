"""The outcome figures the surfaces show (`outcomes.summary`, /metrics, the dashboard's plots).

Kept from the store's outcome records of the plot window, so a poll never re-reads them, and
recomputed when records were added or, without new ones, every `OUTCOME_REFRESH_S` as the
window moves on. Reading them never changes scheduling.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from symphony.core.outcomes import OutcomeRecord, outcome_report

OUTCOME_WINDOW_DAYS = 7
"""The outcome figures (`outcomes.summary`, /metrics, the dashboard) cover this many days."""
OUTCOME_PLOT_DAYS = 14
"""The dashboard's plots show one point per day for this many days."""
OUTCOME_REFRESH_S = 600.0
"""Without new records, the figures are recomputed this often (the window moves on)."""


class OutcomeFigures:
    def __init__(self) -> None:
        self.report: dict[str, Any] | None = None
        """The last figures computed; None until the first refresh (or without a store)."""
        self._records: list[OutcomeRecord] = []
        self._computed_at = float("-inf")

    @staticmethod
    def since(wall: datetime) -> datetime:
        """The oldest record the figures use, as of `wall`."""
        return wall - timedelta(days=OUTCOME_PLOT_DAYS)

    def add(self, records: Iterable[OutcomeRecord]) -> None:
        """Records saved since the last refresh: the next refresh computes anew."""
        before = len(self._records)
        self._records.extend(records)
        if len(self._records) != before:
            self._computed_at = float("-inf")

    def refresh(self, now: float, wall: datetime) -> None:
        """Recompute when records were added, or when the last figures are old (`now` is
        monotonic, `wall` the instant the window ends)."""
        if self.report is not None and now - self._computed_at < OUTCOME_REFRESH_S:
            return
        cutoff = self.since(wall)
        self._records = [r for r in self._records if r.at >= cutoff]
        self.report = outcome_report(
            self._records,
            end=wall,
            window_days=OUTCOME_WINDOW_DAYS,
            plot_days=OUTCOME_PLOT_DAYS,
        )
        self._computed_at = now

"""The outcome summary's averages: medians of hand-off and merge times, the mean of tokens."""

from __future__ import annotations

from datetime import UTC, datetime

from symphony.core.outcomes import CLOSED, HANDOFF, MERGED, OutcomeRecord, summarize

AT = datetime(2026, 12, 1, tzinfo=UTC)


def record(kind: str, **data: object) -> OutcomeRecord:
    return OutcomeRecord(AT, kind, "id-A-1", "A-1", data)


def test_medians_take_the_middle_value_or_the_mean_of_the_middle_two() -> None:
    odd = summarize(
        [record(HANDOFF, seconds=s, rework=False) for s in (300, 10, 40)]
        + [record(MERGED, seconds=s) for s in (5, 1, 9, 7)]
    )
    assert odd.median_handoff_s == 40.0
    assert odd.median_merge_s == 6.0  # (5 + 7) / 2
    none = summarize([record(CLOSED, tokens=1000), record(CLOSED, tokens=2001)])
    assert none.median_handoff_s is None and none.median_merge_s is None
    assert none.tokens_per_accepted == 1500.5

"""Reporting the records a state read had to skip, without repeating itself every poll.

A malformed record is skipped by state reads (spec §11.1) and logged when it first breaks or its
problem changes, then again once it is readable: a broken ticket is news once, not every 30 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SkippedRecords:
    """`<what> skipped` (warning) and `<what> readable again` (info), keyed by `key_field`."""

    def __init__(self, logger: Any, what: str, key_field: str, **context: Any) -> None:
        self._log = logger
        self._what = what
        self._key_field = key_field
        self._context = context
        self._reported: dict[str, str] = {}

    def update(self, skipped: Mapping[str, str]) -> None:
        """Record the complete set of records this read skipped, with why."""
        for key, reason in skipped.items():
            if self._reported.get(key) != reason:
                self._log.warning(
                    f"{self._what} skipped",
                    **self._context,
                    **{self._key_field: key},
                    reason=reason,
                )
        for key in self._reported.keys() - skipped.keys():
            self._log.info(
                f"{self._what} readable again", **self._context, **{self._key_field: key}
            )
        self._reported = dict(skipped)

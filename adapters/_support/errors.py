"""The two failures every adapter names the same way: a provider record that cannot become an
Issue (`Malformed`), and a write the tracker cannot do as asked (`Rejected`).

Both live here once so each adapter raises and catches the same class with the same arguments;
the messages stay each adapter's own.
"""

from __future__ import annotations

from symphony.tracker.contract import TRACKER_REJECTED, TrackerError


class Malformed(Exception):
    """A provider record that cannot become an Issue; `reason` says why. `key` names the record
    in logs (its id when it has one) when the reason does not; the message is then
    `key: reason`."""

    def __init__(self, reason: str, key: str | None = None) -> None:
        super().__init__(reason if key is None else f"{key}: {reason}")
        self.reason = reason
        self.key = key


class Rejected(TrackerError):
    """A write the tracker cannot do as asked (refused before any request, or by the provider);
    a `tracker_rejected` error whose `code` is what an agent tool reports for it."""

    def __init__(self, message: str, code: str = TRACKER_REJECTED) -> None:
        super().__init__(TRACKER_REJECTED, message)
        self.code = code

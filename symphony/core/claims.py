"""What becomes of a ticket's workspace claim (`worker.kubernetes.workspace: pvc:<claim>`)
that this workflow made: kept while its ticket may run again, deleted once the ticket is
terminal or no longer in the tracker (pure: the daemon lists the claims and reads the
tickets, then deletes what this says)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from symphony.base.issue import Issue
from symphony.config.tracker import TrackerSettings

TERMINAL = "ticket terminal"
GONE = "ticket gone"


def claim_fates(
    claims: Mapping[str, str], found: Sequence[Issue], tracker: TrackerSettings
) -> dict[str, str | None]:
    """For each claim (its name to its ticket's id), None when it is kept, else why it goes:
    its ticket is in a terminal state, or the tracker no longer returns it. `found` is what
    one successful read of those ids returned (a failed read decides nothing). A claim whose
    ticket id is unknown is kept: nothing says its ticket ended."""
    by_id = {issue.id: issue for issue in found}
    fates: dict[str, str | None] = {}
    for name, issue_id in claims.items():
        issue = by_id.get(issue_id)
        if not issue_id:
            fates[name] = None
        elif issue is None:
            fates[name] = GONE
        elif tracker.is_terminal(issue.state):
            fates[name] = TERMINAL
        else:
            fates[name] = None
    return fates

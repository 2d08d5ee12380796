"""What becomes of a ticket's workspace claim (`worker.kubernetes.workspace: pvc:<claim>`)
that this workflow made: kept while its ticket may run again, deleted once the ticket is
terminal (pure: the daemon lists the claims and reads the tickets, then deletes what this
says). A ticket the tracker no longer returns (deleted, or moved out of the workflow's
project) may come back, and its claim may hold work nothing pushed: it is kept, as a local
workspace of such a ticket is, and `check` says so for a person to decide."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from symphony.base.issue import Issue
from symphony.config.tracker import TrackerSettings

TERMINAL = "ticket terminal"


def claim_fates(
    claims: Mapping[str, str], found: Sequence[Issue], tracker: TrackerSettings
) -> dict[str, str | None]:
    """For each claim (its name to its ticket's id), None when it is kept, else why it goes:
    its ticket is in a terminal state. `found` is what one successful read of those ids
    returned (a failed read decides nothing). A claim whose ticket is unknown, or not
    returned, is kept: nothing says its ticket ended."""
    by_id = {issue.id: issue for issue in found}
    fates: dict[str, str | None] = {}
    for name, issue_id in claims.items():
        issue = by_id.get(issue_id)
        if issue is not None and tracker.is_terminal(issue.state):
            fates[name] = TERMINAL
        else:
            fates[name] = None
    return fates

"""Writing a decided stage transition to the tracker: comments, the move, the read-back.

The scheduling core decides a transition (a `PendingTransition` in `core.transitions`) and keeps
the ticket claimed; this module performs it once, and the orchestrator calls it again after a
backoff when it fails. Every step is safe to repeat:

- the ticket is read first: already in the target (an earlier try moved it but did not see
  the read-back) means only the comments are checked; in neither its stage nor the target
  means a person moved it meanwhile, and the daemon gives way;
- each comment carries a marker with the transition's key, and is posted only when no comment
  with that marker exists yet; a comment the ticket has once (the plan, the evidence) is found
  by its kind's marker and edited in place, so a rework round updates it;
- the move is confirmed by reading the ticket back.
"""

from __future__ import annotations

from collections.abc import Collection

from symphony.base.issue import Issue, normalize_state
from symphony.core.markers import marked, marker_of, unmarked
from symphony.core.state import PendingTransition
from symphony.core.transitions import WriteResult
from symphony.tracker.contract import TRACKER_RESPONSE, Tracker, TrackerError


async def write_transition(
    tracker: Tracker, pending: PendingTransition, own_states: Collection[str]
) -> tuple[WriteResult, str | None]:
    """Perform `pending`; returns (`moved` | `abandoned`, detail). Raises TrackerError when a
    step fails, to be tried again."""
    target = pending.plan.target
    current = await _read(tracker, pending.issue.id)
    if current is None:
        return WriteResult.ABANDONED, "no longer visible in the tracker"
    state = normalize_state(current.state)
    if state != normalize_state(target) and state not in own_states:
        return WriteResult.ABANDONED, f"a person moved it to {current.state} meanwhile"
    await _post_comments(tracker, current, pending)
    if state != normalize_state(target):
        await tracker.move_issue(current, target)
        after = await _read(tracker, current.id)
        if after is None or normalize_state(after.state) != normalize_state(target):
            shown = "nothing" if after is None else after.state
            raise TrackerError(
                TRACKER_RESPONSE, f"moved to {target}, but reading it back shows {shown}"
            )
    return WriteResult.MOVED, None


async def _post_comments(tracker: Tracker, issue: Issue, pending: PendingTransition) -> None:
    if not pending.plan.comments:
        return
    existing = await tracker.list_comments(issue)
    markers = [marker_of(comment.body) for comment in existing]
    for planned in pending.plan.comments:
        if planned.single:
            kind = planned.kind
            found = [c for c, m in zip(existing, markers, strict=True) if m and m[0] == kind]
            if not found:
                await tracker.add_comment(issue, marked(planned.body, kind))
            elif unmarked(found[-1].body) != planned.body:
                await tracker.edit_comment(issue, found[-1].id, marked(planned.body, kind))
        elif (planned.kind, pending.key) not in markers:
            await tracker.add_comment(issue, marked(planned.body, planned.kind, pending.key))


async def post_comment_once(tracker: Tracker, issue: Issue, kind: str, key: str, body: str) -> bool:
    """Post `body` marked with `kind` and `key` unless the ticket already has it; True when
    posted."""
    existing = await tracker.list_comments(issue)
    if any(marker_of(comment.body) == (kind, key) for comment in existing):
        return False
    await tracker.add_comment(issue, marked(body, kind, key))
    return True


async def _read(tracker: Tracker, issue_id: str) -> Issue | None:
    found = await tracker.fetch_issues_by_ids([issue_id])
    return next((issue for issue in found if issue.id == issue_id), None)

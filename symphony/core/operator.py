"""What a person does to the daemon's runs from the review surface: pause and resume dispatch
for the whole daemon, stop one ticket's agent, retry a ticket now.

Pure: each function changes the scheduling state and says what it did, or why it did not, so a
repeated request is answered without a second activity entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from symphony.base.issue import Issue, normalize_state
from symphony.core.effects import StopWorker
from symphony.core.state import Pause, SchedulerState, StopReason


def pause(state: SchedulerState, by: str, wall: datetime) -> bool:
    """Stop starting tickets and dispatching retries; False when already paused."""
    if state.paused is not None:
        return False
    state.paused = Pause(by, wall)
    return True


def resume(state: SchedulerState) -> Pause | None:
    """Dispatch again; the pause that ended, or None when dispatch was not paused."""
    ended, state.paused = state.paused, None
    return ended


def stop(
    state: SchedulerState, issue_id: str, by: str, issue: Issue | None = None
) -> StopWorker | str | None:
    """A person's stop, final whatever the daemon is doing: the ticket is held where it is
    (nothing starts it, no retry, no fix run, no merge) until it changes or is retried, and
    its running agent is stopped (the `StopWorker`). None: held, nothing was running; a
    string: why not (the daemon knows nothing of the ticket: `issue` is its fresh read)."""
    entry = state.running.get(issue_id)
    known = entry.issue if entry is not None else issue
    if known is None:
        return "no agent is running for it"
    state.held[issue_id] = (normalize_state(known.state), known.updated_at)
    if state.retry_attempts.pop(issue_id, None) is not None and entry is None:
        state.claimed.discard(issue_id)
    if entry is None or entry.stop_reason is not None:
        return None  # stopping already: the hold keeps whatever it would start from starting
    entry.stop_reason = StopReason.PERSON
    return StopWorker(issue_id, entry.identifier, StopReason.PERSON, f"stopped by {by}")


def retry_now(state: SchedulerState, issue_id: str, now: float) -> str | None:
    """Make the ticket's retry due now, or let a held ticket be dispatched again; None when
    done, else why not."""
    if state.held.pop(issue_id, None) is not None:
        return None
    entry = state.retry_attempts.get(issue_id)
    if entry is None:
        return "it is neither waiting for a retry nor stopped by a person"
    entry.due_at = min(entry.due_at, now)
    return None


def release_changed_holds(state: SchedulerState, polled: Iterable[Issue]) -> None:
    """A held ticket that changed since it was stopped (moved, edited) is no longer held."""
    if not state.held:
        return
    for issue in polled:
        held = state.held.get(issue.id)
        if held is not None and held != (normalize_state(issue.state), issue.updated_at):
            del state.held[issue.id]

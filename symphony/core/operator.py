"""What a person does to the whole daemon from the review surface: pause and resume dispatch.

Pure: each function changes the scheduling state and says whether anything changed, so a
repeated request is answered without a second activity entry.
"""

from __future__ import annotations

from datetime import datetime

from symphony.core.state import Pause, SchedulerState


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

"""Restart recovery: make a restart boring.

In this order, before the first dispatch:

1. **Orphans.** Every agent and hook the daemon starts carries `SYMPHONY_INSTANCE=<id>` in its
   environment, and the store keeps the ids of the daemons that used it. Processes of an
   earlier instance still alive (the old daemon was killed, its agents were not) are found in
   `/proc` and their process groups stopped, TERM then KILL, so a new agent never works beside
   an old one in the same workspace. Nothing is signalled without that proof: a recorded
   process group id alone may by now belong to an unrelated process.
2. **Retries** come back with their attempt numbers and wall-clock due times: a ticket in a 40 s
   backoff is not retried a second after the restart.
3. **Runs** that were in progress come back as continuations due now, carrying the agent's
   thread id (the session resumes it when it can) and its last message (for a new thread when
   it cannot).
4. **The outbox**: stage transitions decided but not confirmed are written again, idempotently
   (`symphony.tracker.writes`), before anything else happens to those tickets.
5. Stage progress, kept workspaces, completed ids and the totals are restored as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from symphony.core.state import (
    PendingTransition,
    RetryEntry,
    RetryKind,
    SchedulerState,
    StageProgress,
)
from symphony.hosts import process
from symphony.hosts.process import INSTANCE_VARIABLE
from symphony.store.rows import Saved

ORPHAN_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a restart brought back from the store (runs, retries, pending moves), and how many
    orphaned agent process groups it stopped."""

    runs: int
    retries: int
    transitions: int
    orphans: int

    def summary(self) -> str:
        return (
            f"recovered {self.runs} run(s), {self.retries} retry(ies) and "
            f"{self.transitions} pending move(s); stopped {self.orphans} orphaned agent "
            "process group(s)"
        )


def restore(state: SchedulerState, saved: Saved, mono_now: float, wall_now: datetime) -> None:
    """Put what the last daemon saved back into a fresh scheduler state."""
    _restore_retries(state, saved, mono_now, wall_now)
    for issue_id, (stage, turns, entered) in saved.stage_progress.items():
        state.stage_progress[issue_id] = StageProgress(stage, turns, entered)
    state.handed_off.update(saved.handed_off)
    _restore_moves(state, saved, mono_now)
    state.kept_workspaces.update(saved.kept_workspaces)
    state.footprints.update(saved.footprints)
    state.workspace_hosts.update(saved.workspace_hosts)
    state.pull_requests.update(saved.pull_requests)
    state.reviews.update(saved.reviews)
    state.ledgers.update(saved.ledgers)
    state.held.update(saved.held)
    state.agent_pauses.update(saved.agent_pauses)
    state.transition_seq = max(state.transition_seq, saved.transition_seq)
    _restore_queued_moves(state, saved, mono_now)
    state.completed.update(saved.completed)
    state.ticket_totals.update(saved.ticket_totals)
    state.daily_costs.update(saved.daily_costs)
    state.model_costs.update(saved.model_costs)
    state.totals = saved.totals
    state.transition_seq = max(state.transition_seq, saved.transition_seq)


def _restore_retries(
    state: SchedulerState, saved: Saved, mono_now: float, wall_now: datetime
) -> None:
    def due(at: datetime) -> float:
        return mono_now + max((at - wall_now).total_seconds(), 0.0)

    for row in saved.retries:
        state.retry_attempts[row.issue_id] = RetryEntry(
            issue_id=row.issue_id,
            identifier=row.identifier,
            attempt=row.attempt,
            due_at=due(row.due_at),
            kind=RetryKind(row.kind),
            error=row.error,
            url=row.url,
            resume_thread_id=row.resume_thread_id,
            last_message=row.last_message,
            resume_tokens=row.resume_tokens,
        )
        state.claimed.add(row.issue_id)
    for run in saved.runs:
        # Interrupted, not failed: it continues at once, on its thread where possible.
        state.retry_attempts[run.issue_id] = RetryEntry(
            issue_id=run.issue_id,
            identifier=run.identifier,
            attempt=(run.attempt or 0) + 1,
            due_at=mono_now,
            kind=RetryKind.CONTINUATION,
            error="interrupted by a restart",
            url=run.issue.url,
            resume_thread_id=run.thread_id,
            last_message=run.last_message,
            resume_tokens=run.tokens,
        )
        state.claimed.add(run.issue_id)


def _restore_moves(state: SchedulerState, saved: Saved, mono_now: float) -> None:
    for move in saved.transitions:
        state.transitions[move.issue_id] = PendingTransition(
            issue=move.issue,
            plan=move.plan,
            key=move.key,
            turns_used=move.turns_used,
            attempts=move.attempts,
            due_at=mono_now,  # written again at once: the outbox goes first
            error=move.error,
        )
        state.claimed.add(move.issue_id)
        state.retry_attempts.pop(move.issue_id, None)


def _restore_queued_moves(state: SchedulerState, saved: Saved, mono_now: float) -> None:
    for issue_id, (issue, plan) in saved.queued_moves.items():
        # A person's move that waited for a step the restart ended: written now, unless a
        # move of the daemon's own goes first (it is taken when that one is written).
        if issue_id in state.transitions:
            state.queued_moves[issue_id] = (issue, plan)
            continue
        state.retry_attempts.pop(issue_id, None)
        state.transition_seq += 1
        state.transitions[issue_id] = PendingTransition(
            issue=issue, plan=plan, key=f"{plan.stage}-{state.transition_seq}", turns_used=0,
            due_at=mono_now,
        )  # fmt: skip
        state.claimed.add(issue_id)


def orphan_groups(instances: Collection[str], proc: Path = Path("/proc")) -> set[int]:
    """Process groups holding a process that an earlier daemon instance started."""
    if not instances:
        return set()
    groups: set[int] = set()
    for pid in process.marked(INSTANCE_VARIABLE, instances, proc):
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgrp())
    return groups


async def stop_groups(groups: Iterable[int], grace_s: float = ORPHAN_GRACE_S) -> int:
    """TERM each group, wait up to `grace_s` for them to go, KILL what is left."""
    groups = set(groups)
    for group in groups:
        _signal(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(g) for g in groups):
        await asyncio.sleep(0.05)
    for group in groups:
        _signal(group, signal.SIGKILL)
    return len(groups)


def _signal(group: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True

"""What the loop reads from the tracker, and hands to the core to judge.

A poll reconciles the running tickets (and released ones whose workspace was kept) with one
read, then reads the candidates and dispatches; a webhook's named tickets are read alone and
judged exactly as a poll would judge them; due retries read their tickets first. Every decision
is the core's (`apply_refresh`, `select_dispatches`, `on_retries_refreshed`, ...): this module
only reads, hands over and performs. A failed read skips its step and is reported
(`TrackerReads`); the next poll looks again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import structlog

from symphony import core
from symphony.base.errors import ErrorCategory
from symphony.base.issue import Issue
from symphony.daemon.owner import Owner
from symphony.tracker.contract import TrackerError, resolve_states

log = structlog.get_logger("symphony.orchestrator")


class Polling:
    """The tracker reads of one orchestrator's loop (see the module's docstring)."""

    def __init__(self, orchestrator: Owner) -> None:
        self._o = orchestrator
        self.held_for_review = 0
        """How many candidates wait only for the review queue (the last poll's count)."""

    async def tick(self) -> None:
        """A whole poll: WORKFLOW.md read again, the running reconciled, the candidates
        dispatched, the outcome figures recomputed when due; timed for the health."""
        o = self._o
        started = time.perf_counter()
        o.reloading.reload()
        if not await self.resolve_states():
            return  # without its states nothing can be judged active or terminal
        await self._reconcile()
        if o.health.workflow_error is None:
            await self._dispatch_candidates()
        if o.store is not None:
            o.outcomes.refresh(o.clock.monotonic(), o.clock.wall())
        o.health.last_tick_at = o.clock.wall()
        o.health.last_tick_ms = (time.perf_counter() - started) * 1000

    async def resolve_states(self) -> bool:
        """Ask the tracker for states the workflow left to it; False while they are unknown."""
        o = self._o
        tracker_settings = o.settings.tracker
        if tracker_settings.active_states and tracker_settings.terminal_states:
            return True
        try:
            resolved = await o.reads.read("states", resolve_states(tracker_settings, o.tracker))
        except TrackerError as exc:
            o.reads.failed(exc, "tracker states unknown, polling paused")
            return bool(tracker_settings.active_states)
        o.settings = dataclasses.replace(o.settings, tracker=resolved)
        log.info(
            "tracker states resolved",
            active=list(resolved.active_states),
            terminal=list(resolved.terminal_states),
        )
        return True

    async def refresh_named(self, ids: list[str]) -> None:
        """A webhook named these tickets: read them, and reconcile the running ones and
        dispatch the ones now eligible exactly as a poll would (slots and order among them)."""
        o = self._o
        if not ids or o.health.workflow_error is not None:
            return
        try:
            fresh = await o.reads.read("webhook", o.tracker.fetch_issues_by_ids(ids))
        except TrackerError as exc:
            log.warning("webhook refresh failed; the next poll looks again", reason=str(exc))
            return
        self._judge_refresh(fresh, ids)
        candidates = [i for i in fresh if o.settings.tracker.is_active(i.state)]
        self._take_share(candidates)
        o.perform(
            core.select_dispatches(
                o.state, candidates, o.settings, o.clock.monotonic(), o.clock.wall()
            )
        )

    async def _reconcile(self) -> None:
        """Refresh running issues (and released ones whose workspace was kept) in one read."""
        o = self._o
        ids = [i for i, entry in o.state.running.items() if entry.stop_reason is None]
        kept = list(o.state.kept_workspaces)
        if not ids and not kept:
            return
        try:
            refreshed = await o.reads.read("reconcile", o.tracker.fetch_issues_by_ids(ids + kept))
        except TrackerError as exc:
            log.warning("reconcile skipped, runs kept", reason=str(exc))
            return
        self._judge_refresh(refreshed, ids + kept)

    def _judge_refresh(self, fresh: Sequence[Issue], requested: list[str]) -> None:
        """What a fresh read of `requested` means for those running and for those released
        with their workspace kept; what was reported during the read is applied first."""
        o = self._o
        o.absorb_queued()
        o.perform(core.apply_refresh(o.state, fresh, requested, o.settings))
        o.perform(core.sweep_kept_workspaces(o.state, fresh, requested, o.settings, o.clock.wall()))

    async def _dispatch_candidates(self) -> None:
        o = self._o
        settings = o.settings
        try:
            issues = await o.reads.read(
                "candidates", o.tracker.fetch_issues_by_states(core.polled_states(settings))
            )
        except TrackerError as exc:
            o.reads.failed(exc, "candidate fetch failed, dispatch skipped")
            return
        o.reads.worked()
        candidates = [issue for issue in issues if settings.tracker.is_active(issue.state)]
        core.observe_review_queue(o.state, issues, settings)
        core.prune_footprints(o.state, issues)
        core.reruns.forget(o.state, (i.id for i in issues), o.clock.wall(), settings)
        self._take_share(candidates)
        o.perform(
            core.select_dispatches(
                o.state, candidates, settings, o.clock.monotonic(), o.clock.wall()
            )
        )
        # One look after the dispatch: what each waits for, and how many only for reviews
        # (what was dispatched never waited for the review queue).
        outlook, self.held_for_review = core.dispatch_outlook(
            o.state, candidates, settings, o.clock.wall()
        )
        reasons = {issue.id: why for issue, why in outlook}
        pending = {i: t.plan.target for i, t in o.state.transitions.items()}
        o.notices.person_moves(o.board.update(issues, reasons, settings, pending))

    def _take_share(self, candidates: Sequence[Issue]) -> None:
        """In a fleet, how many agents this workflow may run now: its share of the pool,
        given how many of `candidates` it could start (`core.fleet`)."""
        o = self._o
        if o.seat is None:
            return
        state, settings = o.state, o.settings
        if state.paused is not None or len(state.running) >= settings.agent.max_concurrent_agents:
            waiting = 0  # it starts nothing now whatever the fleet says: no need to count
        else:
            waiting = core.demand(state, candidates, settings, o.clock.wall(), o.clock.monotonic())
        self._seat_for(waiting)

    def _seat_for(self, waiting: int) -> None:
        o = self._o
        assert o.seat is not None
        o.state.fleet_slots = o.seat.slots(waiting)
        o.state.hosts_busy_elsewhere = o.seat.hosts_busy_elsewhere()
        o.perform(core.limits.adopt(o.state, o.seat.pauses_elsewhere(), o.clock.wall()))

    async def process_retries(self) -> None:
        o = self._o
        if o.health.workflow_error is not None or not o.settings.tracker.active_states:
            return  # dispatch is paused until WORKFLOW.md is valid again; retries wait
        due = core.due_retries(o.state, o.clock.monotonic())
        refreshed: list[Any] | None
        limited_for_s = None
        try:
            refreshed = await o.reads.read(
                "retries", o.tracker.fetch_issues_by_ids([r.issue_id for r in due])
            )
        except TrackerError as exc:
            log.warning("retry refresh failed", reason=str(exc))
            refreshed = None
            if exc.category == ErrorCategory.TRACKER_RATE_LIMITED:
                limited_for_s = max(exc.retry_after_s or 1.0, 0.1)
        if o.seat is not None:
            self._seat_for(len(due))
        o.perform(
            core.on_retries_refreshed(
                o.state,
                due,
                refreshed,
                o.settings,
                o.clock.monotonic(),
                o.clock.wall(),
                limited_for_s=limited_for_s,
            )
        )

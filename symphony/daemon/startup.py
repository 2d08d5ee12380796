"""What the daemon does once before its first poll, in this order.

1. `recover`: register this instance in the store, stop what earlier daemons left running (here,
   on every SSH host and in the cluster, found by their instance ids) and put the saved runs,
   retries and moves back into the scheduler state (`symphony.store.recovery`).
2. `ensure_stage_states`: in stage mode, make the tracker able to hold every state the daemon
   moves tickets to.
3. `remove_terminal_workspaces`: forget worktrees whose folders are gone, and remove the
   workspaces of tickets that turned terminal while no daemon watched.
4. `delete_ended_claims` (`symphony.daemon.cluster`): with `worker.kubernetes`, delete the
   workspace claims this workflow made whose tickets are terminal.

`prepare` runs them for one orchestrator. A step that cannot reach the tracker or a host is
reported and skipped; none stops the daemon.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from symphony import core
from symphony.base.errors import SymphonyError
from symphony.base.hosts import LOCAL
from symphony.config.sections import Settings
from symphony.daemon.events import Clock
from symphony.daemon.owner import Owner
from symphony.daemon.places import Places
from symphony.daemon.reads import TrackerReads
from symphony.observability.activity import Activity
from symphony.store import Store
from symphony.store.recovery import Recovered, orphan_groups, restore, stop_groups
from symphony.tracker.contract import Tracker, TrackerError

if TYPE_CHECKING:
    from symphony.hosts.kubernetes.pods import Pods
    from symphony.workspace.remote import RemoteWorkspaces

log = structlog.get_logger("symphony.orchestrator")


async def prepare(o: Owner) -> None:
    """The steps above, for `o`, before its loop starts: recovery needs a store; the tracker's
    states are resolved before a stage or a terminal state can be judged."""
    if o.store is not None:
        await recover(
            o.store, o.state, o.settings, o.instance_id, o.clock, o.activity,
            o.places.remote.values(), o.places.pods,
        )  # fmt: skip
        o.saver.save()
        o.outcomes.add(o.store.outcomes(o.outcomes.since(o.clock.wall())))
        o.outcomes.refresh(o.clock.monotonic(), o.clock.wall())
    await o.polling.resolve_states()
    await ensure_stage_states(o.reads, o.tracker, o.settings)
    await remove_terminal_workspaces(o.reads, o.tracker, o.settings, o.state, o.places)
    if o.places.pods is not None:
        from symphony.daemon.cluster import delete_ended_claims  # only a cluster has claims

        await delete_ended_claims(o.reads, o.tracker, o.settings, o.places.pods)


async def recover(
    store: Store,
    state: core.SchedulerState,
    settings: Settings,
    instance_id: str,
    clock: Clock,
    activity: Activity,
    remote: Collection[RemoteWorkspaces],
    pods: Pods | None = None,
) -> None:
    """Carry on where the last daemon stopped."""
    wall, mono = clock.wall(), clock.monotonic()
    previous = store.register_instance(instance_id, os.getpid(), wall)
    if settings.state is not None:
        keep = timedelta(days=settings.state.keep_days)
        if forgotten := store.forget_before(wall - keep):
            log.info("forgot the totals of long-quiet tickets", tickets=forgotten)
    saved = store.load(wall)
    activity.restore(store.recent_activity(activity.size))
    stopped = await stop_groups(orphan_groups(previous))
    if stopped:
        log.warning("stopped agents an earlier daemon left running", process_groups=stopped)
    if remote:
        from symphony.daemon.ssh_hosts import stop_remote_orphans  # only SSH hosts have them

        stopped += await stop_remote_orphans(remote, previous)
    if pods is not None:
        from symphony.daemon.cluster import delete_orphan_pods  # only a cluster has pods

        stopped += await delete_orphan_pods(pods, previous)
    restore(state, saved, mono, wall)
    recovered = Recovered(len(saved.runs), len(saved.retries), len(saved.transitions), stopped)
    if saved.runs or saved.retries or saved.transitions or stopped:
        log.info("recovered", summary=recovered.summary())
        activity.add(wall, "recovered", recovered.summary())


async def ensure_stage_states(reads: TrackerReads, tracker: Tracker, settings: Settings) -> None:
    """Stage mode: labels-as-states trackers create the labels the stages move tickets to."""
    machine = settings.machine
    if machine is None:
        return
    try:
        created = await reads.read(
            "states", tracker.ensure_states((*machine.states, *machine.targets()))
        )
    except TrackerError as exc:
        log.warning("could not prepare the stages' states on the tracker", reason=str(exc))
        return
    if created:
        log.info("created the stages' states on the tracker", states=created)


async def remove_terminal_workspaces(
    reads: TrackerReads,
    tracker: Tracker,
    settings: Settings,
    state: core.SchedulerState,
    places: Places,
) -> None:
    """Remove the workspaces of terminal tickets, each on the host the store says it is on. The
    terminal tickets are read only when there is a workspace to remove: a local one symphony
    made, or one the store knows on an SSH host."""
    await asyncio.gather(places.local.prune(), *(r.prune() for r in places.remote.values()))
    if not state.workspace_hosts and not places.local.holds_any():
        # Nothing here to remove: every terminal ticket (thousands, on a long-lived board or
        # tracker) would be read, and built as an issue, for nothing.
        return
    try:
        terminal = await reads.read(
            "startup_cleanup", tracker.fetch_issues_by_states(settings.tracker.terminal_states)
        )
    except TrackerError as exc:
        log.warning("startup cleanup skipped", reason=str(exc))
        return
    for issue in terminal:
        # A workspace on an SSH host is known by the store; every other one is here.
        host = state.workspace_hosts.get(issue.id, LOCAL)
        try:
            if await places.on(host).remove(issue.identifier):
                log.info(
                    "workspace removed", issue_identifier=issue.identifier, reason="terminal",
                    host=host,
                )  # fmt: skip
            state.workspace_hosts.pop(issue.id, None)
        except SymphonyError as exc:
            log.warning(
                "startup cleanup failed", issue_identifier=issue.identifier, reason=str(exc)
            )

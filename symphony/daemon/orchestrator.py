"""The single authority over scheduling state, and the asyncio shell that performs its effects.

One task runs `Orchestrator.run`: it owns `SchedulerState`, consumes one event queue (agent
updates, worker exits, workflow changes, refresh requests) and wakes for poll ticks and due
retries. Decisions come from `symphony.core`; this module only does the I/O they ask for (tracker
reads, worker tasks, transition and comment writes, workspace removal) and applies reloads. What
it delegates has its own module here: the start-up order (`startup`), the reload (`reload`), one
worker (`worker`), tracker reads (`reads`), where runs happen (`places`) and the file watches
(`watch`). Workers report through the queue and never touch the state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog

from symphony import core
from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.base.events import EventKind
from symphony.base.hosts import LOCAL
from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker, credential_variables
from symphony.codehost.contract import CodeHostError, code_host_adapter
from symphony.config.sections import Settings
from symphony.core import notifications
from symphony.core.budgets import check_budgets
from symphony.daemon import startup
from symphony.daemon.actions import PersonActions
from symphony.daemon.events import (
    AgentsReported,
    AgentUpdate,
    Clock,
    FollowRequested,
    MergeAnswered,
    OwnMove,
    PullRead,
    QueueEvent,
    RefreshRequested,
    Seat,
    StopRequested,
    SystemClock,
    TransitionWritten,
    WorkerExited,
    WorkflowChanged,
)
from symphony.daemon.follow import CodeHostFactory, CodeHosts, create_code_host
from symphony.daemon.notices import Notices
from symphony.daemon.notify import Notifier, Sender
from symphony.daemon.performer import Current, Performer
from symphony.daemon.places import Places, Workspaces
from symphony.daemon.reads import TrackerReads
from symphony.daemon.reload import (
    Rejected,
    Reloaded,
    StillRejected,
    Unchanged,
    WorkflowStatus,
    reload_workflow,
)
from symphony.daemon.review import review_detail, review_queue
from symphony.daemon.watch import watch_tracker, watch_workflow
from symphony.notify.channels import send
from symphony.observability.activity import Activity
from symphony.observability.board import Board
from symphony.observability.figures import OutcomeFigures
from symphony.observability.metrics import TrackerRequests
from symphony.observability.snapshot import Health, daemon_snapshot, issue_detail
from symphony.store import Store
from symphony.tracker.contract import (
    Tracker,
    TrackerContext,
    TrackerError,
    Watchable,
    create_tracker,
    resolve_states,
)
from symphony.tracker.webhooks import ReceivesWebhooks, WebhookReceiver
from symphony.workspace.editor import editor_words, open_command
from symphony.workspace.facts import read_evidence_file

log = structlog.get_logger("symphony.orchestrator")

T = TypeVar("T")

PROGRESS_SAVE_S = 1.0
"""How stale the store may let an agent's progress (tokens, turns, last message) get. A kill -9
loses at most this much of it, and a continued thread's usage catches up on its first report."""
RECENT_NOTICES = 50
"""How many of the newest notices the snapshot carries (the dashboard's browser notices)."""
SCAN_INTERVAL_S = 0.25
"""How often the loop looks over every session for stalls, budgets and due moves."""
AGENT_PASS_S = 0.1
"""How soon after agents' updates the loop makes a pass for them (saving, telling the
surfaces): streaming agents report hundreds of times a second, and a pass each would cost
more than the updates themselves."""


class Orchestrator:
    def __init__(
        self,
        settings: Settings,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        session_factory: Callable[[AgentLaunch], AgentSession] = open_session,
        tracker: Tracker | None = None,
        watch: bool = True,
        store: Store | None = None,
        masker: SecretMasker | None = None,
        code_host_factory: CodeHostFactory = create_code_host,
        notify_sender: Sender = send,
    ) -> None:
        self.settings = settings
        self.masker = masker or SecretMasker()
        """The daemon's one masker: the command line gives the same one to the logs."""
        self.store = store
        self.instance_id = uuid.uuid4().hex[:16]
        """Which daemon this is: in every child's environment, and in the store."""
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.clock: Clock = clock or SystemClock()
        self.state = core.SchedulerState()
        self.health = Health()
        self.activity = Activity()
        self.tracker_requests = TrackerRequests()
        self.board = Board()
        self.outcomes = OutcomeFigures()
        self._reads = TrackerReads(self.tracker_requests, self.health, self.activity, self.clock)
        self._workflow = WorkflowStatus(self.health, self.activity, self.clock)
        self._notices = Notices(self.activity, self.clock)
        self.tracker: Tracker = tracker or self._new_tracker(settings)
        self._mask_secrets()
        self._places = self._new_places(settings)
        self._code_hosts = CodeHosts(code_host_factory)
        self._queue: asyncio.Queue[QueueEvent] = asyncio.Queue()
        self._pass_at: float | None = None
        """When the loop pass asked for agents' updates comes (event loop time)."""
        self._progress_unsaved = False
        self._spend_reported = False
        self._performer = Performer(
            self.state,
            lambda: Current(
                self.settings,
                self.tracker,
                self._places,
                self._code_hosts.for_repository(self.settings.repository),
            ),
            report=self._report,
            clock=self.clock,
            activity=self.activity,
            board=self.board,
            health=self.health,
            masker=self.masker,
            session_factory=session_factory,
            changed=self._notify,
        )
        self._actions = PersonActions(
            self.state,
            self.board,
            self.activity,
            self.clock,
            self._reads,
            lambda: (self.settings, self.tracker),
            perform=self._perform,
            changed=self._notify,
            refresh=self.request_refresh,
        )
        self.served_at: str | None = None
        """The HTTP server's address once it listens (the review page messages link to)."""
        self._notifier = Notifier(
            store, lambda: self.settings.notify, self.review_url, self.clock, self.activity,
            self.masker, sender=notify_sender,
        )  # fmt: skip
        self._unhealthy = notifications.Unhealthy()
        self._unsaved_deliveries: list[notifications.Delivery] = []
        self._recent_notices: dict[str, notifications.Notice] = {}
        """Health notices of past passes not yet in the store (it was failing)."""
        self.seat: Seat | None = None
        """Its place in a fleet's shared pool of slots (`symphony.daemon.fleet`); None alone."""
        self._tasks: asyncio.TaskGroup | None = None
        self._stopping = False
        self._watch = watch
        self._refresh_asked = False
        """A queued event asked for a tick while it was applied mid-pass (`_absorb_queued`)."""
        self._tracker_watcher: asyncio.Task[None] | None = None
        self._targeted: set[str] = set()
        """Tickets webhooks named in this loop pass."""
        self._wake_stale = True
        """Something may have moved the next deadline: compute it again before sleeping."""
        self._next_tick = 0.0
        self._unsaved = False
        self._saved_at = float("-inf")
        self._held_for_review = 0
        self._listeners: list[Callable[[], None]] = []

    # Public surface

    def stop(self) -> None:
        """Ask the loop to stop its workers and return (safe from signal handlers)."""
        self._stopping = True
        self._queue.put_nowait(StopRequested())

    def webhook(self, kind: str) -> WebhookReceiver | None:
        """The receiver of the workflow's tracker for deliveries addressed to `kind`; None
        when that is another tracker or no webhook secret is configured."""
        tracker = self.tracker
        if kind != self.settings.tracker.kind or not isinstance(tracker, ReceivesWebhooks):
            return None
        return tracker.webhook()

    def follow_webhook(self, kind: str, headers: Mapping[str, str]) -> bool:
        """A verified delivery to `kind`: when it is the code host's word about a pull request,
        every followed pull request is read now; True when it was."""
        repository = self.settings.repository
        if repository is None or repository.kind.value != kind:
            return False
        try:
            adapter = code_host_adapter(kind)
        except CodeHostError:
            return False
        if not adapter.about_pull_requests(headers):
            return False
        self._queue.put_nowait(FollowRequested())
        return True

    def pause(self, by: str) -> bool:
        """A person paused dispatch (the review surface); False when it already was."""
        return self._actions.pause(by)

    def resume(self, by: str) -> bool:
        """Dispatch again, and poll now; False when it was not paused."""
        return self._actions.resume(by)

    async def ticket_action(
        self, wanted: str, action: str, *, comment: str, by: str, tickets: object = None
    ) -> dict[str, Any] | core.review_actions.Refusal:
        """A person's action on one ticket (`symphony.daemon.actions`)."""
        return await self._actions.on_ticket(
            wanted, action, comment=comment, by=by, tickets=tickets
        )

    def request_refresh(self, ids: Sequence[str] | None = None) -> None:
        """Poll now rather than at the next interval; with `ids`, look at those tickets only
        (what a webhook names), which costs one read of them instead of a whole poll."""
        self._queue.put_nowait(RefreshRequested(tuple(ids) if ids is not None else None))

    def snapshot(self) -> dict[str, Any]:
        """A JSON-safe view of the current state for status surfaces."""
        return daemon_snapshot(
            self.state,
            self.settings,
            self.clock.monotonic(),
            self.clock.wall(),
            health=self.health,
            tracker_requests=self.tracker_requests,
            activity=self.activity,
            board=self.board,
            outcomes=self.outcomes.report,
            held_for_review=self._held_for_review,
            host_roots=self._places.host_roots(),
            notify=self._notifier.status(),
            notices=[n.to_json() for n in self._recent_notices.values()],
        )

    def issue_snapshot(self, wanted: str) -> dict[str, Any] | None:
        """One issue (by identifier or id) in detail: running, retrying, or known from the last
        poll as waiting (with the reason); None when the daemon knows nothing of it."""
        return issue_detail(
            self.state,
            wanted,
            self.clock.monotonic(),
            self.clock.wall(),
            board=self.board,
            activity=self.activity,
            evidence=self._evidence_of,
        )

    def _evidence_of(self, identifier: str) -> dict[str, Any] | None:
        workspace = self._places.local.owned_path(identifier)
        return read_evidence_file(workspace) if workspace is not None else None

    def review_queue(self) -> dict[str, Any]:
        """The tickets waiting for a person (`symphony.daemon.review`), and whether dispatch is
        paused: what the review page polls, without the whole snapshot."""
        paused = self.state.paused
        return {
            "queue": review_queue(self.board, self.settings, self.state),
            "running": [
                {
                    "issue_identifier": entry.identifier,
                    "title": entry.issue.title,
                    "state": entry.issue.state,
                    "stage": entry.stage,
                    "run": entry.label,
                    "stopping": entry.stop_reason.value if entry.stop_reason else None,
                }
                for entry in self.state.running.values()
            ],
            "paused": paused.to_json() if paused is not None else None,
        }

    async def review_detail(self, wanted: str) -> dict[str, Any] | None:
        """One waiting ticket's review: its words, plan, evidence and diff."""
        return await review_detail(
            wanted, board=self.board, settings=self.settings, state=self.state,
            tracker=self.tracker, workspaces_of=self._workspaces_of,
            open_command=self.open_command, env=self.environ,
        )  # fmt: skip

    def review_url(self) -> str | None:
        """Where messages link to: `notify.review_url`, else the server's own address."""
        return self.settings.notify.review_url or self.served_at

    def notify_status(self) -> list[dict[str, Any]]:
        """Each notification channel's deliveries (pending, sent, failing)."""
        return self._notifier.status()

    def _workspaces_of(self, issue_id: str) -> Workspaces:
        """The workspaces holding the issue's: its SSH host's, else this machine's."""
        return self._places.on(self.state.workspace_hosts.get(issue_id, LOCAL))

    def workspace_path(self, identifier: str) -> Path:
        """Where the issue's workspace is (or would be) under the current settings."""
        return self._places.local.path_for(identifier)

    def open_command(self, path: Path) -> str:
        """The command that opens `path` in the configured editor (`symphony.workspace.editor`)."""
        return open_command(editor_words(self.settings, self.environ), path)

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called after every state change (observability surfaces; must not block)."""
        self._listeners.append(listener)

    async def run(self) -> None:
        """Start up (`symphony.daemon.startup`, in its order), loop until stopped, shut down."""
        if self.store is not None:
            await startup.recover(
                self.store, self.state, self.settings, self.instance_id, self.clock,
                self.activity, self._places.remote.values(),
            )  # fmt: skip
            self._save()
            self.outcomes.add(self.store.outcomes(OutcomeFigures.since(self.clock.wall())))
            self._refresh_outcomes()
        await self._resolve_states()
        await startup.ensure_stage_states(self._reads, self.tracker, self.settings)
        await startup.remove_terminal_workspaces(
            self._reads, self.tracker, self.settings, self.state, self._places
        )
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            self._performer.start(tasks)
            workflow = self.settings.workflow_path
            watcher = (
                tasks.create_task(watch_workflow(workflow, self.reload))
                if self._watch
                else None
            )
            self._watch_tracker()
            notifier = tasks.create_task(self._notifier.run())
            try:
                await self._loop()
            finally:
                await self._shutdown()
                notifier.cancel()  # what is not sent stays queued for the next daemon
                if watcher is not None:
                    watcher.cancel()
                if self._tracker_watcher is not None:
                    self._tracker_watcher.cancel()
        await self.tracker.aclose()
        await self._code_hosts.aclose()
        await self._places.close()

    # The loop

    async def _loop(self) -> None:
        self._next_tick = self.clock.monotonic()
        next_scan, wake = 0.0, self._next_tick
        while not self._stopping:
            # Sleep to the next deadline, but never wake just to scan: a deadline closer than
            # the next scan waits for it (at most SCAN_INTERVAL_S), and an idle daemon sleeps
            # until its next poll.
            # What was handled mid-pass (`_absorb_queued`) is acted on now, without a wait.
            refresh, self._refresh_asked = self._refresh_asked, False
            due = max(max(wake, next_scan) - self.clock.monotonic(), 0.0)
            timeout = 0.0 if refresh or self._targeted else due
            try:
                # Not wait_for: it makes a task of every wait, hundreds a second here.
                if self._queue.empty():
                    async with asyncio.timeout(timeout):
                        event = await self._queue.get()
                else:
                    event = self._queue.get_nowait()
            except TimeoutError:
                pass
            else:
                refresh = self._handle(event) or refresh
                # Drain what else is queued so a burst of agent updates costs one pass.
                while not self._queue.empty():
                    refresh = self._handle(self._queue.get_nowait()) or refresh
            if self._stopping:
                break
            now = self.clock.monotonic()
            # The scans over every session run at most every SCAN_INTERVAL_S, not on each of
            # the hundreds of wake-ups a second that streaming agents cause; none of what they
            # look for (a stall, a budget, a due move) needs a finer clock.
            scanned = now >= next_scan or refresh
            if scanned or self._spend_reported:
                # Spend is looked at after every agents' pass too: a budget stops the turn
                # within AGENT_PASS_S of the report that crossed it, not a scan later.
                self._spend_reported = False
                self._perform(check_budgets(self.state, self.settings))
            if scanned:
                self._perform(core.detect_stalls(self.state, self.settings, now))
                self._perform(core.due_transitions(self.state, now))
                if self.settings.repository is not None:
                    self._perform(core.follow.due_reads(self.state, self.settings, now))
                next_scan = now + SCAN_INTERVAL_S
            if refresh or now >= self._next_tick:
                self._targeted.clear()  # a whole poll reads them too
                await self._tick()
                self._next_tick = self.clock.monotonic() + self.settings.polling.interval_ms / 1000
                self._unsaved = self._wake_stale = True
            elif self._targeted:
                named = sorted(self._targeted)
                self._targeted.clear()
                await self._refresh_named(named)
                self._unsaved = True
            if core.due_retries(self.state, self.clock.monotonic()):
                await self._process_retries()
                self._unsaved = True
            if scanned:
                self._observe_health()
            self._save_pass()
            self._notify()
            if scanned or self._wake_stale:
                if not scanned:
                    # Decisions were made (a run ended, a move was decided): what they made
                    # due is looked at in the next pass, not after a scan interval.
                    next_scan = self.clock.monotonic()
                wake = core.next_wakeup(self.state, self._next_tick, self.settings)
                self._wake_stale = False

    def _report(self, event: QueueEvent) -> None:
        """What workers and writes report. An agent's updates are folded into the state at
        once (they decide nothing by themselves: stalls and budgets are looked at by the
        scans) and ask for one pass within `AGENT_PASS_S`, so a streaming agent does not
        wake the loop for every read; everything else is queued for the loop."""
        if isinstance(event, AgentUpdate):
            self._handle(event)
            self._progress_unsaved = True
            self._ask_pass(AGENT_PASS_S)
            return
        self._queue.put_nowait(event)

    def _ask_pass(self, delay_s: float) -> None:
        """A loop pass within `delay_s`, unless one is asked for that soon already."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(delay_s, 0.0)
        if self._pass_at is None or at < self._pass_at:
            self._pass_at = at
            loop.call_at(at, self._queue.put_nowait, AgentsReported())

    def _handle(self, event: QueueEvent) -> bool:
        """Apply one queued event; True when it asks for an immediate tick."""
        if isinstance(event, AgentsReported):
            self._pass_at = None
            self._spend_reported = True
            return False
        if isinstance(event, AgentUpdate):
            state, pricing = self.state, self.settings.pricing
            for agent_event in event.events:
                core.on_agent_event(
                    state, event.issue_id, agent_event, event.at, event.at_wall, pricing
                )
                if agent_event.kind is EventKind.SESSION_STARTED:
                    entry = state.running.get(event.issue_id)
                    if entry is not None:
                        self._unsaved = True  # the thread a restart would continue
                        self._notices.session_priced(entry)
            return False
        if isinstance(event, OwnMove):
            core.on_own_move(self.state, event.issue_id, event.target, event.phase)
            return False
        self._unsaved = True
        if isinstance(event, WorkerExited):
            self._performer.exited(event.issue_id)
            entry = self.state.running.get(event.issue_id)
            failed = core.failure_reason(entry, event.result) if entry is not None else None
            if failed is not None:
                self.health.failures[failed.value] = self.health.failures.get(failed.value, 0) + 1
            effects = core.on_worker_exit(
                self.state, event.issue_id, event.result, self.settings, self.clock.monotonic()
            )
            self._perform(effects)
            return False
        if isinstance(event, PullRead | MergeAnswered | FollowRequested):
            self._perform(self._followed(event))
            self._wake_stale = True  # the next reading is due at a new time
            return False
        if isinstance(event, TransitionWritten):
            if event.pull is not None:
                core.follow.on_published(self.state, event.issue_id, event.pull, self.clock.wall())
            effects = core.on_transition_written(
                self.state, event.issue_id, event.result, event.detail, self.settings,
                self.clock.monotonic(), self.clock.wall(),
            )  # fmt: skip
            self._perform(effects)
            # A confirmed move may have freed a slot or made a ticket of the next stage ready.
            return event.result is not core.WriteResult.FAILED
        if isinstance(event, WorkflowChanged):
            self._reload()
            return False
        if isinstance(event, RefreshRequested) and event.ids is not None:
            self._targeted.update(event.ids)  # all named in this pass: one read
            return False
        return isinstance(event, RefreshRequested)

    def _followed(self, event: PullRead | MergeAnswered | FollowRequested) -> list[core.Effect]:
        """What a reading of a pull request, a merge's answer or a webhook asks for."""
        state, settings = self.state, self.settings
        now, wall = self.clock.monotonic(), self.clock.wall()
        if isinstance(event, FollowRequested):
            core.follow.read_now(state)
            return []
        if isinstance(event, MergeAnswered):
            return core.follow.on_merge_answered(
                state, event.issue_id, event.answer, event.detail, settings, now, wall
            )
        if event.status is None:
            core.follow.on_read_failed(state, event.issue_id, settings, now)
            return []
        return core.follow.on_pull_read(state, event.issue_id, event.status, settings, now, wall)

    def _absorb_queued(self) -> None:
        """Apply what was reported while a tracker read was in flight, before its answer is
        judged: a run's own move is reported before its write is sent, so a read that shows
        the new state always finds the move noted (`core.apply_refresh`)."""
        while not self._queue.empty():
            self._refresh_asked = self._handle(self._queue.get_nowait()) or self._refresh_asked

    async def _tick(self) -> None:
        started = time.perf_counter()
        self._reload()
        if not await self._resolve_states():
            return  # without its states nothing can be judged active or terminal
        await self._reconcile()
        if self.health.workflow_error is None:
            await self._dispatch_candidates()
        self._refresh_outcomes()
        self.health.last_tick_at = self.clock.wall()
        self.health.last_tick_ms = (time.perf_counter() - started) * 1000

    def _refresh_outcomes(self) -> None:
        """The outcome figures, recomputed at a poll when due (`OutcomeFigures.refresh`)."""
        if self.store is not None:
            self.outcomes.refresh(self.clock.monotonic(), self.clock.wall())

    async def _refresh_named(self, ids: list[str]) -> None:
        """A webhook named these tickets: read them, and reconcile the running ones and
        dispatch the ones now eligible exactly as a poll would (slots and order among them)."""
        if not ids or self.health.workflow_error is not None:
            return
        try:
            fresh = await self._reads.read("webhook", self.tracker.fetch_issues_by_ids(ids))
        except TrackerError as exc:
            log.warning("webhook refresh failed; the next poll looks again", reason=str(exc))
            return
        self._judge_refresh(fresh, ids)
        candidates = [i for i in fresh if self.settings.tracker.is_active(i.state)]
        self._take_share(candidates)
        self._perform(
            core.select_dispatches(
                self.state, candidates, self.settings, self.clock.monotonic(), self.clock.wall()
            )
        )

    async def _reconcile(self) -> None:
        """Refresh running issues (and released ones whose workspace was kept) in one read."""
        ids = [i for i, entry in self.state.running.items() if entry.stop_reason is None]
        kept = list(self.state.kept_workspaces)
        if not ids and not kept:
            return
        try:
            refreshed = await self._reads.read(
                "reconcile", self.tracker.fetch_issues_by_ids(ids + kept)
            )
        except TrackerError as exc:
            log.warning("reconcile skipped, runs kept", reason=str(exc))
            return
        self._judge_refresh(refreshed, ids + kept)

    def _judge_refresh(self, fresh: Sequence[Issue], requested: list[str]) -> None:
        """What a fresh read of `requested` means for those running and for those released
        with their workspace kept; what was reported during the read is applied first."""
        self._absorb_queued()
        self._perform(core.apply_refresh(self.state, fresh, requested, self.settings))
        wall = self.clock.wall()
        self._perform(core.sweep_kept_workspaces(self.state, fresh, requested, self.settings, wall))

    async def _dispatch_candidates(self) -> None:
        settings = self.settings
        tracker_settings = settings.tracker
        states = core.polled_states(settings)
        try:
            issues = await self._reads.read(
                "candidates", self.tracker.fetch_issues_by_states(states)
            )
        except TrackerError as exc:
            self._reads.failed(exc, "candidate fetch failed, dispatch skipped")
            return
        self._reads.worked()
        candidates = [issue for issue in issues if tracker_settings.is_active(issue.state)]
        core.observe_review_queue(self.state, issues, settings)
        core.prune_footprints(self.state, issues)
        core.reruns.forget(self.state, (i.id for i in issues), self.clock.wall(), settings)
        self._take_share(candidates)
        effects = core.select_dispatches(
            self.state, candidates, settings, self.clock.monotonic(), self.clock.wall()
        )
        self._perform(effects)
        # One look after the dispatch: what each waits for, and how many only for reviews
        # (what was dispatched never waited for the review queue).
        outlook, self._held_for_review = core.dispatch_outlook(
            self.state, candidates, settings, self.clock.wall()
        )
        reasons = {issue.id: why for issue, why in outlook}
        pending = {i: t.plan.target for i, t in self.state.transitions.items()}
        self._notices.person_moves(self.board.update(issues, reasons, settings, pending))

    def _take_share(self, candidates: Sequence[Issue]) -> None:
        """In a fleet, how many agents this workflow may run now: its share of the pool,
        given how many of `candidates` it could start (`core.fleet`)."""
        if self.seat is None:
            return
        state, settings = self.state, self.settings
        if state.paused is not None or len(state.running) >= settings.agent.max_concurrent_agents:
            waiting = 0  # it starts nothing now whatever the fleet says: no need to count
        else:
            waiting = core.demand(
                state, candidates, settings, self.clock.wall(), self.clock.monotonic()
            )
        state.fleet_slots = self.seat.slots(waiting)
        state.hosts_busy_elsewhere = self.seat.hosts_busy_elsewhere()

    async def _process_retries(self) -> None:
        if self.health.workflow_error is not None or not self.settings.tracker.active_states:
            return  # dispatch is paused until WORKFLOW.md is valid again; retries wait
        due = core.due_retries(self.state, self.clock.monotonic())
        refreshed: list[Any] | None
        try:
            refreshed = await self._reads.read(
                "retries", self.tracker.fetch_issues_by_ids([r.issue_id for r in due])
            )
        except TrackerError as exc:
            log.warning("retry refresh failed", reason=str(exc))
            refreshed = None
        if self.seat is not None:
            self.state.fleet_slots = self.seat.slots(len(due))
            self.state.hosts_busy_elsewhere = self.seat.hosts_busy_elsewhere()
        effects = core.on_retries_refreshed(
            self.state, due, refreshed, self.settings, self.clock.monotonic(), self.clock.wall()
        )
        self._perform(effects)

    # Performing effects

    def _perform(self, effects: Sequence[core.Effect]) -> None:
        if effects:
            self._unsaved = True
            self._wake_stale = True  # a retry or a move may now be due sooner
        self._performer.perform(effects)

    # Saving and stopping

    def _save_pass(self) -> None:
        """Save at the end of a loop pass: at once when something a restart needs changed (a
        dispatch, an exit, a retry, a move, a new thread), else at most every
        `PROGRESS_SAVE_S` (a streaming agent's tokens and messages wake the loop hundreds of
        times a second, and a save per wake-up would double the daemon's CPU)."""
        now = self.clock.monotonic()
        if self._unsaved or now - self._saved_at >= PROGRESS_SAVE_S:
            self._save()
        elif self._progress_unsaved:
            # An agent's last progress is saved on time even if nothing wakes the loop again.
            self._ask_pass(PROGRESS_SAVE_S - (now - self._saved_at))

    def _save(self, *, keep_runs: bool = False) -> None:
        """Write this pass's changes to the store, with the notices they carry; a failing disk
        is reported, never fatal (the pass's records and notices wait for the next save)."""
        self._unsaved, self._saved_at = False, self.clock.monotonic()
        self._progress_unsaved = False
        notices = notifications.from_outcomes(self.state.new_outcomes, self.settings.machine)
        self._recent(notices)
        deliveries = [
            *notifications.route(notices, self.settings.notify),
            *self._unsaved_deliveries,
        ]
        if self.store is None:
            self.state.new_outcomes.clear()  # only a store keeps outcome records
            self._unsaved_deliveries.clear()
            self._notifier.hold(deliveries)
            return
        recorded = list(self.state.new_outcomes)
        try:
            self.store.save(
                self.state, self.clock.monotonic(), self.clock.wall(), keep_runs=keep_runs,
                deliveries=deliveries,
            )  # fmt: skip
        except Exception as exc:
            if self.health.store_error != str(exc):
                log.error("saving state failed; a restart would lose this pass", reason=str(exc))
            self.health.store_error = str(exc)
        else:
            self.health.store_error = None
            self.outcomes.add(recorded)  # new figures at the next poll
            self._unsaved_deliveries.clear()
            if deliveries:
                self._notifier.wake()

    def _recent(self, notices: Sequence[notifications.Notice]) -> None:
        """The newest notices, for the open dashboard's browser notifications."""
        for notice in notices:
            self._recent_notices[notice.key] = notice
        while len(self._recent_notices) > RECENT_NOTICES:
            del self._recent_notices[next(iter(self._recent_notices))]

    def _observe_health(self) -> None:
        """Notices of the daemon's own trouble: the tracker unreachable for a while, the store
        failing (sent from memory: the store cannot hold it), WORKFLOW.md rejected."""
        notify, health = self.settings.notify, self.health
        said = self._unhealthy.observe(
            {"tracker": health.tracker_error, "store": health.store_error,
             "workflow": health.workflow_error},
            self.clock.wall(),
            after={"tracker": timedelta(minutes=notify.unhealthy_after_minutes)},
        )  # fmt: skip
        if not said:
            return
        self._recent(said)
        for delivery in notifications.route(said, notify):
            if delivery.notice.key.startswith("unhealthy:store:"):
                self._notifier.hold([delivery])
            else:
                self._unsaved_deliveries.append(delivery)
        self._unsaved = True

    async def _shutdown(self) -> None:
        waiting = [t.identifier for t in self.state.transitions.values() if not t.in_flight]
        if waiting and self.store is None:
            # Kept in memory only: after a restart these tickets run their stage again.
            log.warning("stopping with decided moves not yet written", issue_identifiers=waiting)
        # Saved as running before they are stopped: the next daemon continues them.
        self._save()
        self._perform(core.stop_all(self.state))
        while self._performer.workers:
            self._handle(await self._queue.get())
        await self._performer.close()
        self._save(keep_runs=True)  # totals of the stopped runs; their rows stay for the restart
        self._notify()

    # Workflow reload and watches

    def _reload(self) -> None:
        """Re-read WORKFLOW.md; apply it when valid, otherwise keep the last good settings."""
        path = self.settings.workflow_path
        reload = reload_workflow(
            self.settings,
            self.tracker,
            self.environ,
            self.health.workflow_error_fingerprint,
            self._new_tracker,
        )
        if isinstance(reload, Unchanged):
            self._workflow.valid(path)
        elif isinstance(reload, Rejected):
            self._workflow.rejected(path, reload)
        elif isinstance(reload, Reloaded):
            self._apply(reload.settings, reload.tracker)
        else:
            assert isinstance(reload, StillRejected)

    def _apply(self, settings: Settings, tracker: Tracker) -> None:
        old, tracker_changed = self.settings, tracker is not self.tracker
        self.settings = settings
        # Running sessions keep the tracker they were started with (their tools stay bound).
        self.tracker = tracker
        self._mask_secrets()
        if tracker_changed:
            self._watch_tracker()
        if tracker_changed or (
            settings.workspace,
            settings.hooks,
            settings.worker,
            settings.repository,
            settings.sandbox,
            settings.agent.kind,
        ) != (old.workspace, old.hooks, old.worker, old.repository, old.sandbox, old.agent.kind):
            self._places = self._new_places(settings)
        if settings.polling != old.polling:
            self._next_tick = min(
                self._next_tick, self.clock.monotonic() + settings.polling.interval_ms / 1000
            )
        self._workflow.applied(old.workflow_path, old, settings)

    def reload(self) -> None:
        """Read WORKFLOW.md again in the loop (its watch, or SIGHUP); safe from signal
        handlers."""
        self._queue.put_nowait(WorkflowChanged())

    def _watch_tracker(self) -> None:
        """Watch the tracker's files (the local board), replacing the watch of the tracker a
        reload swapped out; trackers behind an API are polled only."""
        if self._tracker_watcher is not None:
            self._tracker_watcher.cancel()
            self._tracker_watcher = None
        tracker = self.tracker
        if not self._watch or self._tasks is None or not isinstance(tracker, Watchable):
            return
        self._tracker_watcher = self._tasks.create_task(
            watch_tracker(tracker, self.request_refresh)
        )

    async def _resolve_states(self) -> bool:
        """Ask the tracker for states the workflow left to it; False while they are unknown."""
        tracker_settings = self.settings.tracker
        if tracker_settings.active_states and tracker_settings.terminal_states:
            return True
        try:
            resolved = await self._reads.read(
                "states", resolve_states(tracker_settings, self.tracker)
            )
        except TrackerError as exc:
            self._reads.failed(exc, "tracker states unknown, polling paused")
            return bool(tracker_settings.active_states)
        self.settings = dataclasses.replace(self.settings, tracker=resolved)
        log.info(
            "tracker states resolved",
            active=list(resolved.active_states),
            terminal=list(resolved.terminal_states),
        )
        return True

    # Helpers

    def _new_tracker(self, settings: Settings) -> Tracker:
        return create_tracker(settings.tracker, TrackerContext(settings.workflow_dir, self.environ))

    def _new_places(self, settings: Settings) -> Places:
        secrets = self.tracker.secret_env_names()
        return Places(settings, self.environ, secrets, self.instance_id)

    def _mask_secrets(self) -> None:
        """Every secret the daemon knows is masked wherever text enters or leaves it: the
        tracker's, the repository's token, the server's, the notification channels', every
        credential the workflow names, and the daemon's own variables named like one (the
        agents' API keys among them)."""
        secrets = [self.environ.get(name, "") for name in self.tracker.secret_env_names()]
        repository = self.settings.repository
        self.masker.set(source=str(self.settings.workflow_path), values=[
            *secrets,
            repository.token if repository is not None else "",
            self.settings.server.auth_token or "",
            *(secret for channel in self.settings.notify.channels for secret in channel.secrets()),
            *self.settings.credentials,
            *credential_variables(self.environ),
        ])  # fmt: skip

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("status listener failed")

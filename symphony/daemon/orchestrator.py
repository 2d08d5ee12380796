"""The single authority over scheduling state, and the asyncio shell that performs its effects.

One task runs `Orchestrator.run`: it owns `SchedulerState`, consumes one event queue (agent
updates, worker exits, workflow changes, refresh requests) and wakes for poll ticks and due
retries. Decisions come from `symphony.core`; this module keeps the loop and performs what they
ask for. What it delegates has its own module here: the start-up order (`startup`), the tracker
reads of a pass (`polling`), the effects (`performer`, one `worker` per run), saving (`saving`),
reloads and file watches (`reload`), a person's actions (`actions`) and the read side the
surfaces hold (`view`). Workers report through the queue and never touch the state.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from symphony import core
from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.base.events import EventKind
from symphony.base.secrets import SecretMasker
from symphony.codehost.contract import create_code_host
from symphony.config.sections import Settings
from symphony.core.budgets import check_budgets
from symphony.daemon import events as ev
from symphony.daemon import reported, startup
from symphony.daemon.actions import PersonActions
from symphony.daemon.events import Clock
from symphony.daemon.follow import CodeHostFactory, CodeHosts, followed
from symphony.daemon.notices import Notices
from symphony.daemon.notify import Notifier, Sender, send_by_channel
from symphony.daemon.performer import Current, Performer
from symphony.daemon.polling import Polling
from symphony.daemon.reads import TrackerReads
from symphony.daemon.reload import Reloading
from symphony.daemon.saving import Saver
from symphony.daemon.view import DaemonView
from symphony.observability.activity import Activity
from symphony.observability.board import Board
from symphony.observability.figures import OutcomeFigures
from symphony.observability.health import Health, TrackerRequests
from symphony.store import Store
from symphony.tracker.contract import Tracker

log = structlog.get_logger("symphony.orchestrator")

SCAN_INTERVAL_S = 0.25
"""How often the loop looks over every session for stalls, budgets and due moves."""
AGENT_PASS_S = 0.1
"""How soon after agents' updates the loop makes a pass for them (saving, telling the surfaces):
streaming agents report hundreds of times a second, and a pass each would cost more."""


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
        notify_sender: Sender = send_by_channel,
    ) -> None:
        self.settings = settings
        self.masker = masker or SecretMasker()
        """The daemon's one masker: the command line gives the same one to the logs."""
        self.store = store
        self.instance_id = uuid.uuid4().hex[:16]
        """Which daemon this is: in every child's environment, and in the store."""
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.clock: Clock = clock or ev.SystemClock()
        self.state = core.SchedulerState()
        self.health = Health()
        self.activity = Activity()
        self.tracker_requests = TrackerRequests()
        self.board = Board()
        self.outcomes = OutcomeFigures()
        self.reads = TrackerReads(self.tracker_requests, self.health, self.activity, self.clock)
        self.notices = Notices(self.activity, self.clock)
        self.reloading = Reloading(self)
        self.tracker: Tracker = tracker or self.reloading.new_tracker(settings)
        self.reloading.mask_secrets()
        self.places = self.reloading.new_places(settings)
        self._code_hosts = CodeHosts(code_host_factory)
        self._queue: asyncio.Queue[ev.QueueEvent] = asyncio.Queue()
        self.served_at: str | None = None
        """The HTTP server's address once it listens (the review page messages link to)."""
        self.seat: ev.Seat | None = None
        """Its place in a fleet's shared pool of slots (`symphony.daemon.fleet`); None alone."""
        self._watch = watch
        self._connect(session_factory, notify_sender)
        self._stopping = False
        self._pass_at: float | None = None
        """When the loop pass asked for agents' updates comes (event loop time)."""
        self._spend_reported = False
        self._refresh_asked = False
        """A queued event asked for a tick while it was applied mid-pass (`absorb_queued`)."""
        self._targeted: set[str] = set()
        """Tickets webhooks named in this loop pass."""
        self._wake_stale = True
        """Something may have moved the next deadline: compute it again before sleeping."""
        self._next_tick = 0.0

    def _connect(
        self, session_factory: Callable[[AgentLaunch], AgentSession], notify_sender: Sender
    ) -> None:
        """The parts that perform, save, tell and show, each wired to this loop."""
        self._performer = Performer(
            self.state,
            lambda: Current(
                self.settings, self.tracker, self.places,
                self._code_hosts.for_repository(self.settings.repository),
            ),
            report=self._report, clock=self.clock, activity=self.activity, board=self.board,
            health=self.health, masker=self.masker, session_factory=session_factory,
            changed=self._notify,
        )  # fmt: skip
        self.actions = PersonActions(
            self.state, self.board, self.activity, self.clock, self.reads,
            lambda: (self.settings, self.tracker), masker=self.masker,
            perform=self._perform, changed=self._notify, refresh=self.request_refresh,
            code_host=lambda: self._code_hosts.for_repository(self.settings.repository),
        )  # fmt: skip
        self.notifier = Notifier(
            self.store, lambda: self.settings.notify, self.review_url, self.clock,
            self.activity, self.masker, sender=notify_sender,
        )  # fmt: skip
        self.saver = Saver(
            self.store, self.state, lambda: self.settings, self.clock, self.health,
            self.outcomes, self.notifier, self.activity,
        )  # fmt: skip
        self.polling = Polling(self)
        self.view = DaemonView(self)  # what the HTTP server, the fleet page and the terminal read

    # What the surfaces and the launch ask

    def stop(self) -> None:
        """Ask the loop to stop its workers and return (safe from signal handlers)."""
        self._stopping = True
        self._queue.put_nowait(ev.StopRequested())

    def reload(self) -> None:
        """Read WORKFLOW.md again in the loop (its watch, SIGHUP); safe from signal handlers."""
        self._queue.put_nowait(ev.WorkflowChanged())

    def poll_by(self, at: float) -> None:
        """Poll no later than `at` (monotonic): a reload shortened the interval."""
        self._next_tick = min(self._next_tick, at)

    def put(self, event: ev.QueueEvent) -> None:
        """Hand an event to the loop (the view's requests, the watches)."""
        self._queue.put_nowait(event)

    def request_refresh(self, ids: Sequence[str] | None = None) -> None:
        """Poll now rather than at the next interval; with `ids`, look at those tickets only
        (what a webhook names), which costs one read of them instead of a whole poll."""
        self._queue.put_nowait(ev.RefreshRequested(tuple(ids) if ids is not None else None))

    def snapshot(self) -> dict[str, Any]:
        """The read side's snapshot (`DaemonView.snapshot`), built afresh."""
        self.view.changed()
        return self.view.snapshot()

    def review_url(self) -> str | None:
        """Where messages link to: `notify.review_url`, else the server's own address."""
        return self.settings.notify.review_url or self.served_at

    async def run(self) -> None:
        """Start up (`symphony.daemon.startup`, in its order), loop until stopped, shut down."""
        await startup.prepare(self)
        async with asyncio.TaskGroup() as tasks:
            self._performer.start(tasks)
            if self._watch:
                self.reloading.watch(tasks)
            notifier = tasks.create_task(self.notifier.run())
            try:
                await self._loop()
            finally:
                await self._shutdown()
                notifier.cancel()  # what is not sent stays queued for the next daemon
                self.reloading.unwatch()
        await self.tracker.aclose()
        await self._code_hosts.aclose()
        await self.places.close()

    # The loop

    async def _loop(self) -> None:
        self._next_tick = self.clock.monotonic()
        next_scan, wake = 0.0, self._next_tick
        while not self._stopping:
            # Sleep to the next deadline, but never wake just to scan: a deadline closer than
            # the next scan waits for it (at most SCAN_INTERVAL_S), and an idle daemon sleeps
            # until its next poll.
            # What was handled mid-pass (`absorb_queued`) is acted on now, without a wait.
            refresh, self._refresh_asked = self._refresh_asked, False
            due = max(max(wake, next_scan) - self.clock.monotonic(), 0.0)
            refresh = await self._wait(0.0 if refresh or self._targeted else due) or refresh
            if self._stopping:
                break
            now = self.clock.monotonic()
            # The scans over every session run at most every SCAN_INTERVAL_S, not on each of
            # the hundreds of wake-ups a second that streaming agents cause; none of what they
            # look for (a stall, a budget, a due move) needs a finer clock.
            scanned = now >= next_scan or refresh
            self._scan(now, scanned)
            if scanned:
                next_scan = now + SCAN_INTERVAL_S
            await self._read_tracker(refresh, now)
            if scanned:
                self.saver.observe_health()
            if (delay := self.saver.save_pass()) is not None:
                self._ask_pass(delay)
            self._notify()
            if scanned or self._wake_stale:
                if not scanned:
                    # Decisions were made (a run ended, a move was decided): what they made
                    # due is looked at in the next pass, not after a scan interval.
                    next_scan = self.clock.monotonic()
                wake = core.next_wakeup(self.state, self._next_tick, self.settings)
                self._wake_stale = False

    async def _wait(self, timeout: float) -> bool:
        """The next events, or none within `timeout`; True when one asks for a poll now."""
        refresh = False
        try:
            # Not wait_for: it makes a task of every wait, hundreds a second here.
            if self._queue.empty():
                async with asyncio.timeout(timeout):
                    event = await self._queue.get()
            else:
                event = self._queue.get_nowait()
        except TimeoutError:
            return False
        refresh = self._handle(event)
        # Drain what else is queued so a burst of agent updates costs one pass.
        while not self._queue.empty():
            refresh = self._handle(self._queue.get_nowait()) or refresh
        return refresh

    def _scan(self, now: float, scanned: bool) -> None:
        """Look over every session: budgets, stalls, moves and pull-request reads now due."""
        if scanned or self._spend_reported:
            # Spend is looked at after every agents' pass too: a budget stops the turn
            # within AGENT_PASS_S of the report that crossed it, not a scan later.
            self._spend_reported = False
            self._perform(check_budgets(self.state, self.settings))
        if scanned:
            self._perform(core.limits.lift_due(self.state, self.clock.wall()))
            self._perform(core.detect_stalls(self.state, self.settings, now))
            self._perform(core.due_transitions(self.state, now))
            if self.settings.repository is not None:
                self._perform(core.follow.due_reads(self.state, self.settings, now))

    async def _read_tracker(self, refresh: bool, now: float) -> None:
        """The poll when due or asked for, else the tickets webhooks named; then due retries."""
        if refresh or now >= self._next_tick:
            self._targeted.clear()  # a whole poll reads them too
            await self.polling.tick()
            self._next_tick = self.clock.monotonic() + self.settings.polling.interval_ms / 1000
            self.saver.mark()
            self._wake_stale = True
        elif self._targeted:
            named = sorted(self._targeted)
            self._targeted.clear()
            await self.polling.refresh_named(named)
            self.saver.mark()
        if core.due_retries(self.state, self.clock.monotonic()):
            await self.polling.process_retries()
            self.saver.mark()

    def _report(self, event: ev.QueueEvent) -> None:
        """What workers, writes and the model gateway report. An agent's updates and the
        gateway's measures are folded into the state at once (the gateway's before the run's
        next call) and ask for one pass within `AGENT_PASS_S`, so a streaming agent does not
        wake the loop for every read; everything else is queued for the loop."""
        if isinstance(event, ev.AgentUpdate | ev.WireReport):
            self._handle(event)
            self.saver.progress_unsaved = True
            self._ask_pass(AGENT_PASS_S)
            return
        self._queue.put_nowait(event)

    def _ask_pass(self, delay_s: float) -> None:
        """A loop pass within `delay_s`, unless one is asked for that soon already."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(delay_s, 0.0)
        if self._pass_at is None or at < self._pass_at:
            self._pass_at = at
            loop.call_at(at, self._queue.put_nowait, ev.AgentsReported())

    def _handle(self, event: ev.QueueEvent) -> bool:
        """Apply one queued event; True when it asks for an immediate tick."""
        if isinstance(event, ev.AgentsReported):
            self._pass_at = None
            self._spend_reported = True
            return False
        if isinstance(event, ev.AgentUpdate):
            state, issue_id, wall = self.state, event.issue_id, event.at_wall
            pricing, headroom = self.settings.pricing, self.settings.agent.rate_limit_headroom
            for said in event.events:
                core.on_agent_event(state, issue_id, said, event.at, wall, pricing)
                entry = state.running.get(issue_id)
                if entry is not None and said.rate_limits is not None:  # before the wall
                    kind, limits = entry.agent_kind, said.rate_limits
                    self._perform(core.limits.near_the_wall(state, kind, limits, headroom, wall))
                if entry is not None and said.kind is EventKind.SESSION_STARTED:
                    self.saver.mark()  # the thread a restart would continue
                    self.notices.session_priced(entry)
            return False
        if isinstance(event, ev.OwnMove | ev.WireReport):
            self._perform(reported.fold(self.state, event, self.settings, self.clock.wall()))
            return False
        self.saver.mark()
        if isinstance(event, ev.WorkerExited):
            self._performer.exited(event.issue_id)
            entry = self.state.running.get(event.issue_id)
            self.health.failed(core.failure_reason(entry, event.result) if entry else None)
            now = self.clock.monotonic()
            self._perform(
                core.on_worker_exit(self.state, event.issue_id, event.result, self.settings, now)
            )
            return False
        if isinstance(event, ev.PullRead | ev.MergeAnswered | ev.FollowRequested):
            wall = self.clock.wall()
            self._perform(followed(self.state, event, self.settings, self.clock.monotonic(), wall))
            self._wake_stale = True  # the next reading is due at a new time
            return False
        if isinstance(event, ev.TransitionWritten):
            if event.pull is not None:
                core.follow.on_published(self.state, event.issue_id, event.pull, self.clock.wall())
            effects = core.on_transition_written(
                self.state, event.issue_id, event.result, event.detail, self.settings,
                self.clock.monotonic(), self.clock.wall(),
            )  # fmt: skip
            self._perform(effects)
            # A confirmed move may have freed a slot or made a ticket of the next stage ready.
            return event.result is not core.WriteResult.FAILED
        if isinstance(event, ev.WorkflowChanged):
            self.reloading.reload()
            return False
        if isinstance(event, ev.RefreshRequested) and event.ids is not None:
            self._targeted.update(event.ids)  # all named in this pass: one read
            return False
        return isinstance(event, ev.RefreshRequested)

    def absorb_queued(self) -> None:
        """Apply what was reported while a tracker read was in flight, before its answer is
        judged: a run's own move is reported before its write is sent, so a read that shows
        the new state always finds the move noted (`core.apply_refresh`)."""
        while not self._queue.empty():
            self._refresh_asked = self._handle(self._queue.get_nowait()) or self._refresh_asked

    # Performing effects

    def perform(self, effects: Sequence[core.Effect]) -> None:  # for polling and the actions
        self._perform(effects)

    def _perform(self, effects: Sequence[core.Effect]) -> None:
        if effects:
            self.saver.mark()
            self._wake_stale = True  # a retry or a move may now be due sooner
        self._performer.perform(effects)

    # Saving and stopping

    async def _shutdown(self) -> None:
        waiting = [t.identifier for t in self.state.transitions.values() if not t.in_flight]
        if waiting and self.store is None:
            # Kept in memory only: after a restart these tickets run their stage again.
            log.warning("stopping with decided moves not yet written", issue_identifiers=waiting)
        # Saved as running before they are stopped: the next daemon continues them.
        self.saver.save()
        self._perform(core.stop_all(self.state))
        while self._performer.workers:
            self._handle(await self._queue.get())
        await self._performer.close()
        # The totals of the stopped runs; their rows stay for the restart.
        self.saver.save(keep_runs=True)
        self._notify()

    def _notify(self) -> None:
        self.view.changed()
        for listener in self.view.listeners():
            try:
                listener()
            except Exception:
                log.exception("status listener failed")

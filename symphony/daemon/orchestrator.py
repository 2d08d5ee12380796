"""The single authority over scheduling state, and the asyncio shell that performs its effects.

One task runs `Orchestrator.run`: it owns `SchedulerState`, consumes one event queue (agent
updates, worker exits, workflow changes, refresh requests) and wakes for poll ticks and due
retries. Decisions come from `symphony.core`; this module only does the I/O they ask for:
tracker reads, worker tasks, workspace removal, workflow reloads and logs. Workers report through
the queue and never touch the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog

from symphony import core
from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import backend, open_session
from symphony.agents.tool_server import ToolServer
from symphony.base.errors import SymphonyError
from symphony.base.events import AgentEvent, EventKind
from symphony.base.hosts import LOCAL
from symphony.base.secrets import SecretMasker
from symphony.config.load import build_settings, workflow_fingerprint
from symphony.config.prompt import check_prompts
from symphony.config.sections import Settings
from symphony.config.workflow import read_workflow
from symphony.core.budgets import check_budgets
from symphony.core.outcomes import OutcomeRecord, outcome_report
from symphony.daemon.events import (
    AgentUpdate,
    Clock,
    OwnMove,
    QueueEvent,
    RefreshRequested,
    StopRequested,
    SystemClock,
    TransitionWritten,
    WorkerExited,
    WorkflowChanged,
)
from symphony.daemon.runner import AttemptContext, AttemptFailed, log_agent_event, run_attempt
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST
from symphony.hosts.ssh import SshHost
from symphony.memory import memory_of
from symphony.observability.activity import Activity
from symphony.observability.board import Board
from symphony.observability.metrics import TrackerRequests
from symphony.observability.snapshot import Health, daemon_snapshot, issue_detail
from symphony.store import Store
from symphony.store.recovery import (
    Recovered,
    orphan_groups,
    restore,
    stop_groups,
)
from symphony.tracker.contract import (
    TRACKER_INTERNAL,
    Tracker,
    TrackerContext,
    TrackerError,
    Watchable,
    create_tracker,
    resolve_states,
)
from symphony.tracker.webhooks import ReceivesWebhooks, WebhookReceiver
from symphony.tracker.writes import WriteResult, post_comment_once, write_transition
from symphony.workspace.editor import editor_words, open_command
from symphony.workspace.environment import (
    REMOTE_INSTANCE_VARIABLE,
    child_environment,
    remote_environment,
)
from symphony.workspace.facts import read_evidence_file, write_evidence_file
from symphony.workspace.local import WorkspaceManager, startup_prune
from symphony.workspace.remote import RemoteWorkspaces

log = structlog.get_logger("symphony.orchestrator")

T = TypeVar("T")

OUTCOME_WINDOW_DAYS = 7
"""The outcome figures (`outcomes.summary`, /metrics, the dashboard) cover this many days."""
OUTCOME_PLOT_DAYS = 14
"""The dashboard's plots show one point per day for this many days."""
OUTCOME_REFRESH_S = 600.0
"""Without new records, the figures are recomputed this often (the window moves on)."""
PROGRESS_SAVE_S = 1.0
"""How stale the store may let an agent's progress (tokens, turns, last message) get. A kill -9
loses at most this much of it, and a continued thread's usage catches up on its first report."""
SCAN_INTERVAL_S = 0.25
"""How often the loop looks over every session for stalls, budgets and due moves."""


def _write_evidence(
    workspaces: WorkspaceManager, identifier: str, evidence: Mapping[str, Any]
) -> None:
    """The hand-off's evidence as JSON in the workspace; a failure costs only the file."""
    path = workspaces.owned_path(identifier)
    if path is None:
        return
    try:
        write_evidence_file(path, evidence)
    except OSError as exc:
        log.warning("could not write the evidence file", workspace=str(path), reason=str(exc))


_STOPPED = core.Failure("worker", "stopped")
"""The exit of a worker the orchestrator stopped (its reason is in the running entry)."""


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
        self._session_factory = session_factory
        self._tool_server: ToolServer | None = None
        self.tracker: Tracker = tracker or self._new_tracker(settings)
        self._mask_tracker_secrets()
        self._workspaces = self._new_workspaces(settings)
        self._remote = self._new_remote_workspaces(settings)
        self._queue: asyncio.Queue[QueueEvent] = asyncio.Queue()
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._removals: dict[str, asyncio.Task[None]] = {}
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
        self._outcomes: dict[str, Any] | None = None
        self._outcome_log: list[OutcomeRecord] = []
        """The saved outcome records of the plot window, kept so a poll never re-reads them."""
        self._outcomes_at = float("-inf")
        self._held_for_review = 0
        self._unpriced_models: set[str] = set()
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
            outcomes=self._outcomes,
            held_for_review=self._held_for_review,
            host_roots={name: w.host.workspace_root for name, w in self._remote.items()},
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
        workspace = self._workspaces.owned_path(identifier)
        return read_evidence_file(workspace) if workspace is not None else None

    def workspace_path(self, identifier: str) -> Path:
        """Where the issue's workspace is (or would be) under the current settings."""
        return self._workspaces.path_for(identifier)

    def open_command(self, path: Path) -> str:
        """The command that opens `path` in the configured editor (`symphony.workspace.editor`)."""
        return open_command(editor_words(self.settings, self.environ), path)

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called after every state change (observability surfaces; must not block)."""
        self._listeners.append(listener)

    async def run(self) -> None:
        if self.store is not None:
            await self._recover(self.store)
        await self._resolve_states()
        await self._ensure_stage_states()
        await self._startup_cleanup()
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            watcher = tasks.create_task(self._watch_workflow()) if self._watch else None
            self._watch_tracker()
            try:
                await self._loop()
            finally:
                await self._shutdown()
                if watcher is not None:
                    watcher.cancel()
                if self._tracker_watcher is not None:
                    self._tracker_watcher.cancel()
        await self.tracker.aclose()

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
                event = await asyncio.wait_for(self._queue.get(), timeout)
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
            if scanned:
                self._perform(core.detect_stalls(self.state, self.settings, now))
                self._perform(check_budgets(self.state, self.settings))
                self._perform(core.due_transitions(self.state, now))
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
            self._save_pass()
            self._notify()
            if scanned or self._wake_stale:
                if not scanned:
                    # Decisions were made (a run ended, a move was decided): what they made
                    # due is looked at in the next pass, not after a scan interval.
                    next_scan = self.clock.monotonic()
                wake = core.next_wakeup(self.state, self._next_tick, self.settings)
                self._wake_stale = False

    def _handle(self, event: QueueEvent) -> bool:
        """Apply one queued event; True when it asks for an immediate tick."""
        if isinstance(event, AgentUpdate):
            core.on_agent_event(
                self.state,
                event.issue_id,
                event.event,
                event.at,
                event.at_wall,
                self.settings.pricing,
            )
            if event.event.kind is EventKind.SESSION_STARTED:
                self._unsaved = True  # the thread a restart would continue
                self._check_priced(event.issue_id)
            return False
        if isinstance(event, OwnMove):
            core.on_own_move(self.state, event.issue_id, event.target, event.phase)
            return False
        self._unsaved = True
        if isinstance(event, WorkerExited):
            self._workers.pop(event.issue_id, None)
            entry = self.state.running.get(event.issue_id)
            failed = core.failure_reason(entry, event.result) if entry is not None else None
            if failed is not None:
                self.health.failures[failed.value] = self.health.failures.get(failed.value, 0) + 1
            effects = core.on_worker_exit(
                self.state, event.issue_id, event.result, self.settings, self.clock.monotonic()
            )
            self._perform(effects)
            return False
        if isinstance(event, TransitionWritten):
            now = self.clock.monotonic()
            if event.result is WriteResult.FAILED:
                effects = core.on_transition_failed(
                    self.state, event.issue_id, event.detail or "failed", self.settings, now
                )
            else:
                effects = core.on_transition_confirmed(
                    self.state,
                    event.issue_id,
                    moved=event.result is WriteResult.MOVED,
                    wall=self.clock.wall(),
                    reason=event.detail,
                )
            self._perform(effects)
            # A confirmed move may have freed a slot or made a ticket of the next stage ready.
            return event.result is not WriteResult.FAILED
        if isinstance(event, WorkflowChanged):
            self._reload()
            return False
        if isinstance(event, RefreshRequested) and event.ids is not None:
            self._targeted.update(event.ids)  # all named in this pass: one read
            return False
        return isinstance(event, RefreshRequested)

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

    def _check_priced(self, issue_id: str) -> None:
        """Say once per model that its sessions have no price: their cost shows as unknown."""
        entry = self.state.running.get(issue_id)
        if entry is None or entry.price is not None:
            return
        model = entry.model or "(not named by the agent)"
        if model in self._unpriced_models:
            return
        self._unpriced_models.add(model)
        message = (
            f"no price for model {model}: its tokens are counted and its cost shows as "
            "unknown; add it under `pricing:` in WORKFLOW.md"
        )
        log.warning("model has no price", model=model, issue_identifier=entry.identifier)
        self.activity.add(
            self.clock.wall(), "unpriced_model", message, issue_identifier=entry.identifier,
            level="warning",
        )  # fmt: skip

    def _refresh_outcomes(self) -> None:
        """Recompute the outcome figures at a poll when records were added since, and every
        `OUTCOME_REFRESH_S` as the window moves on."""
        if self.store is None:
            return
        now = self.clock.monotonic()
        if self._outcomes is not None and now - self._outcomes_at < OUTCOME_REFRESH_S:
            return
        wall = self.clock.wall()
        cutoff = wall - timedelta(days=OUTCOME_PLOT_DAYS)
        self._outcome_log = [r for r in self._outcome_log if r.at >= cutoff]
        self._outcomes = outcome_report(
            self._outcome_log,
            end=wall,
            window_days=OUTCOME_WINDOW_DAYS,
            plot_days=OUTCOME_PLOT_DAYS,
        )
        self._outcomes_at = now

    async def _refresh_named(self, ids: list[str]) -> None:
        """A webhook named these tickets: read them, and reconcile the running ones and
        dispatch the ones now eligible exactly as a poll would (slots and order among them)."""
        if not ids or self.health.workflow_error is not None:
            return
        try:
            fresh = await self._read("webhook", self.tracker.fetch_issues_by_ids(ids))
        except TrackerError as exc:
            log.warning("webhook refresh failed; the next poll looks again", reason=str(exc))
            return
        self._absorb_queued()
        running = [i for i in ids if i in self.state.running]
        kept = [i for i in ids if i in self.state.kept_workspaces]
        self._perform(core.apply_refresh(self.state, fresh, running, self.settings))
        self._perform(
            core.sweep_kept_workspaces(self.state, fresh, kept, self.settings, self.clock.wall())
        )
        candidates = [i for i in fresh if self.settings.tracker.is_active(i.state)]
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
            refreshed = await self._read("reconcile", self.tracker.fetch_issues_by_ids(ids + kept))
        except TrackerError as exc:
            log.warning("reconcile skipped, runs kept", reason=str(exc))
            return
        self._absorb_queued()
        self._perform(core.apply_refresh(self.state, refreshed, ids, self.settings))
        self._perform(
            core.sweep_kept_workspaces(
                self.state, refreshed, kept, self.settings, self.clock.wall()
            )
        )

    async def _dispatch_candidates(self) -> None:
        settings = self.settings
        tracker_settings = settings.tracker
        states = core.polled_states(settings)
        try:
            issues = await self._read("candidates", self.tracker.fetch_issues_by_states(states))
        except TrackerError as exc:
            self._tracker_failed(exc, "candidate fetch failed, dispatch skipped")
            return
        if self.health.tracker_error is not None:
            log.info("tracker recovered")
            self.activity.add(self.clock.wall(), "tracker_recovered", "tracker reads work again")
            self.health.tracker_error = None
        candidates = [issue for issue in issues if tracker_settings.is_active(issue.state)]
        core.observe_review_queue(self.state, issues, settings)
        core.prune_footprints(self.state, issues)
        self._held_for_review = core.held_for_review(self.state, candidates, settings)
        effects = core.select_dispatches(
            self.state, candidates, settings, self.clock.monotonic(), self.clock.wall()
        )
        self._perform(effects)
        reasons = dict(
            (issue.id, why)
            for issue, why in core.explain_dispatch(
                self.state, candidates, settings, self.clock.wall()
            )
        )
        pending = {i: t.plan.target for i, t in self.state.transitions.items()}
        for move in self.board.update(issues, reasons, settings, pending):
            log.info(
                "ticket moved by a person",
                issue_identifier=move.identifier,
                from_state=move.from_state,
                state=move.to_state,
            )
            self.activity.add(
                self.clock.wall(),
                "moved_by_person",
                f"a person moved it from {move.from_state} to {move.to_state}",
                issue_identifier=move.identifier,
            )

    async def _process_retries(self) -> None:
        if self.health.workflow_error is not None or not self.settings.tracker.active_states:
            return  # dispatch is paused until WORKFLOW.md is valid again; retries wait
        due = core.due_retries(self.state, self.clock.monotonic())
        refreshed: list[Any] | None
        try:
            refreshed = await self._read(
                "retries", self.tracker.fetch_issues_by_ids([r.issue_id for r in due])
            )
        except TrackerError as exc:
            log.warning("retry refresh failed", reason=str(exc))
            refreshed = None
        effects = core.on_retries_refreshed(
            self.state, due, refreshed, self.settings, self.clock.monotonic(), self.clock.wall()
        )
        self._perform(effects)

    # Effects

    def _perform(self, effects: Sequence[core.Effect]) -> None:
        if effects:
            self._unsaved = True
            self._wake_stale = True  # a retry or a move may now be due sooner
        for effect in effects:
            self.activity.add_effect(self.clock.wall(), effect)
            if isinstance(effect, core.StartWorker):
                self._start_worker(effect)
            elif isinstance(effect, core.PerformTransition):
                self._start_transition(effect)
            elif isinstance(effect, core.PostComment):
                self._post_comment(effect)
            elif isinstance(effect, core.TransitionDone):
                log.info(
                    "ticket moved" if effect.confirmed else "move abandoned",
                    issue_id=effect.issue_id,
                    issue_identifier=effect.identifier,
                    stage=effect.from_stage,
                    outcome=effect.outcome,
                    state=effect.target,
                )
                if effect.confirmed:
                    self.board.moved(effect.issue_id, effect.target)
            elif isinstance(effect, core.TransitionRetry):
                log.warning(
                    "move failed, retrying",
                    issue_id=effect.issue_id,
                    issue_identifier=effect.identifier,
                    state=effect.target,
                    attempt=effect.attempt,
                    delay_s=round(effect.delay_s, 3),
                    error=effect.error,
                )
            elif isinstance(effect, core.StopWorker):
                log.info(
                    "stopping run",
                    issue_id=effect.issue_id,
                    issue_identifier=effect.identifier,
                    reason=effect.reason.value,
                    detail=effect.detail,
                )
                task = self._workers.get(effect.issue_id)
                if task is not None:
                    task.cancel()
            elif isinstance(effect, core.RemoveWorkspace):
                self._remove_workspace(effect.identifier, effect.host)
            elif isinstance(effect, core.HostMarkedDown):
                log.warning(
                    "host marked down",
                    host=effect.host,
                    failures=effect.failures,
                    cooloff_s=effect.cooloff_s,
                    reason=effect.error,
                )
                self.activity.add(
                    self.clock.wall(),
                    "host_down",
                    f"{effect.host} failed to connect {effect.failures} times in a row; no new "
                    f"work there for {effect.cooloff_s:.0f} s ({effect.error})",
                )
            elif isinstance(effect, core.RetryScheduled):
                entry = effect.entry
                log.info(
                    "retrying" if entry.kind is core.RetryKind.FAILURE else "continuing",
                    issue_id=entry.issue_id,
                    issue_identifier=entry.identifier,
                    attempt=entry.attempt,
                    delay_s=round(effect.delay_s, 3),
                    error=entry.error,
                )
            elif isinstance(effect, core.Released):
                log.info(
                    "released",
                    issue_id=effect.issue_id,
                    issue_identifier=effect.identifier,
                    reason=effect.reason,
                )

    def _start_worker(self, start: core.StartWorker) -> None:
        assert self._tasks is not None
        issue, attempt = start.issue, start.attempt
        machine = self.settings.machine
        stage = machine.stage_named(start.stage) if machine is not None else None
        workspaces = self._workspaces_on(start.host)
        host: Host
        if isinstance(workspaces, RemoteWorkspaces):
            # A host gets one environment for all (its own basics are its own).
            host, child_env = workspaces.host, self._remote_env(self.settings)
            agent_env = child_env
        else:
            host, child_env = LOCAL_HOST, self._child_env(self.settings)
            agent_env = self._child_env(self.settings, backend(start.agent_kind).env_names)
        ctx = AttemptContext(
            settings=self.settings,
            tracker=self.tracker,
            workspaces=workspaces,
            agent_env=agent_env,
            child_env=child_env,
            masker=self.masker,
            host=host,
            open_session=self._session_factory,
            agent_kind=start.agent_kind,
            tool_server=self._tool_server_for(start.agent_kind),
            stage=stage,
            turns_used=start.turns_used,
            resume_thread_id=start.resume_thread_id,
            last_message=start.last_message,
            memory=memory_of(self.settings, self.masker),
            open_tickets=self._open_identifiers,
        )
        self.health.dispatched += 1
        log.info(
            "dispatching", issue_id=issue.id, issue_identifier=issue.identifier, attempt=attempt
        )
        task = self._tasks.create_task(self._worker(issue, attempt, ctx))
        self._workers[issue.id] = task
        task.add_done_callback(functools.partial(self._worker_done, issue.id))

    def _open_identifiers(self) -> list[str]:
        """Tickets with work under way or waiting for a person: running, retrying, being
        moved, or released with their workspace kept."""
        state = self.state
        return list(
            dict.fromkeys(
                [
                    *(entry.identifier for entry in state.running.values()),
                    *(retry.identifier for retry in state.retry_attempts.values()),
                    *(move.identifier for move in state.transitions.values()),
                    *state.kept_workspaces.values(),
                ]
            )
        )

    def _worker_done(self, issue_id: str, task: asyncio.Task[None]) -> None:
        # A worker cancelled before it ever ran never reaches its `finally`, so nothing would
        # report its exit and shutdown would wait for it forever: report it here.
        if task.cancelled() and self._workers.get(issue_id) is task:
            self._queue.put_nowait(WorkerExited(issue_id, core.WorkerExit(False, _STOPPED)))

    async def _worker(self, issue: Any, attempt: int | None, ctx: AttemptContext) -> None:
        def on_event(event: AgentEvent) -> None:
            log_agent_event(event)
            now, wall = self.clock.monotonic(), self.clock.wall()
            self._queue.put_nowait(AgentUpdate(issue.id, event, now, wall))

        def on_move(target: str | None, phase: core.MovePhase) -> None:
            self._queue.put_nowait(OwnMove(issue.id, target, phase))

        # Bound in this task's context only: every record the attempt writes (hooks, agent
        # session, tool calls) carries the issue and reaches its per-issue log file.
        structlog.contextvars.bind_contextvars(issue_id=issue.id, issue_identifier=issue.identifier)
        result = core.WorkerExit(False, _STOPPED)
        try:
            removal = self._removals.get(issue.identifier)
            if removal is not None:
                await asyncio.shield(removal)
            end = await run_attempt(issue, attempt, ctx, on_event, on_move)
            result = core.WorkerExit(
                True,
                report=end.report,
                stuck=end.stuck,
                verification=end.verification,
                facts=end.facts,
                footprint=end.footprint,
            )
            log.info("completed")
        except AttemptFailed as exc:
            result = core.WorkerExit(False, exc.failure)
            log.warning("failed", reason=str(exc))
        except asyncio.CancelledError:
            # Stopped by the orchestrator: the stop reason is already recorded in its state.
            log.info("stopped")
        except Exception as exc:  # a bug must cost one attempt, never the daemon
            result = core.WorkerExit(
                False, core.Failure("internal error", repr(exc), reason=core.FailureReason.INTERNAL)
            )
            log.exception("failed", reason="internal error")
        finally:
            self._queue.put_nowait(WorkerExited(issue.id, result))

    def _start_transition(self, perform: core.PerformTransition) -> None:
        assert self._tasks is not None
        pending = self.state.transitions.get(perform.issue_id)
        if pending is None:
            return
        tracker, workspaces = self.tracker, self._workspaces
        own = core.moves_from(pending, self.settings)

        async def write() -> None:
            structlog.contextvars.bind_contextvars(
                issue_id=perform.issue_id, issue_identifier=perform.identifier
            )
            if pending.plan.evidence is not None:
                _write_evidence(workspaces, pending.identifier, pending.plan.evidence)
            try:
                result, detail = await write_transition(tracker, pending, own)
            except TrackerError as exc:
                result, detail = WriteResult.FAILED, str(exc)
            except Exception as exc:  # an adapter bug costs one try, never the daemon
                log.exception("transition write failed unexpectedly")
                result, detail = WriteResult.FAILED, f"internal error: {exc!r}"
            self._queue.put_nowait(TransitionWritten(perform.issue_id, result, detail))

        self._tasks.create_task(write())

    def _post_comment(self, post: core.PostComment) -> None:
        """Best effort, once: a comment that cannot be written is logged, never retried."""
        assert self._tasks is not None
        tracker = self.tracker

        async def write() -> None:
            try:
                await post_comment_once(tracker, post.issue, post.kind, post.key, post.body)
            except Exception as exc:
                log.warning(
                    "comment not posted",
                    issue_identifier=post.issue.identifier,
                    kind=post.kind,
                    reason=str(exc),
                )

        self._tasks.create_task(write())

    def _remove_workspace(self, identifier: str, host: str = LOCAL) -> None:
        assert self._tasks is not None
        workspaces = self._workspaces_on(host)

        async def remove() -> None:
            try:
                removed = await workspaces.remove(identifier)
                if removed:
                    log.info("workspace removed", issue_identifier=identifier)
            except SymphonyError as exc:
                log.error("workspace removal failed", issue_identifier=identifier, reason=str(exc))
            finally:
                self._removals.pop(identifier, None)
                self._notify()

        self._removals[identifier] = self._tasks.create_task(remove())

    # Startup and shutdown

    async def _startup_cleanup(self) -> None:
        await startup_prune(self._workspaces)
        try:
            terminal = await self._read(
                "startup_cleanup",
                self.tracker.fetch_issues_by_states(self.settings.tracker.terminal_states),
            )
        except TrackerError as exc:
            log.warning("startup cleanup skipped", reason=str(exc))
            return
        for issue in terminal:
            # A workspace on an SSH host is known by the store; every other one is here.
            host = self.state.workspace_hosts.get(issue.id, LOCAL)
            try:
                if await self._workspaces_on(host).remove(issue.identifier):
                    log.info(
                        "workspace removed", issue_identifier=issue.identifier, reason="terminal",
                        host=host,
                    )  # fmt: skip
                self.state.workspace_hosts.pop(issue.id, None)
            except SymphonyError as exc:
                log.warning(
                    "startup cleanup failed", issue_identifier=issue.identifier, reason=str(exc)
                )

    async def _recover(self, store: Store) -> None:
        """Carry on where the last daemon stopped (symphony.store.recovery), before any poll."""
        wall, mono = self.clock.wall(), self.clock.monotonic()
        previous = store.register_instance(self.instance_id, os.getpid(), wall)
        if self.settings.state is not None:
            keep = timedelta(days=self.settings.state.keep_days)
            if forgotten := store.forget_before(wall - keep):
                log.info("forgot the totals of long-quiet tickets", tickets=forgotten)
        saved = store.load(wall)
        stopped = await stop_groups(orphan_groups(previous))
        if stopped:
            log.warning("stopped agents an earlier daemon left running", process_groups=stopped)
        stopped += await self._stop_remote_orphans(previous)
        restore(self.state, saved, mono, wall)
        recovered = Recovered(len(saved.runs), len(saved.retries), len(saved.transitions), stopped)
        if saved.runs or saved.retries or saved.transitions or stopped:
            log.info("recovered", summary=recovered.summary())
            self.activity.add(wall, "recovered", recovered.summary())
        self._save()
        self._outcome_log = store.outcomes(wall - timedelta(days=OUTCOME_PLOT_DAYS))
        self._refresh_outcomes()

    async def _stop_remote_orphans(self, previous: Sequence[str]) -> int:
        """What earlier daemons left running on the SSH hosts, found there by their instance
        ids; a host that cannot be reached is reported and skipped."""
        if not previous or not self._remote:
            return 0

        async def on(workspaces: RemoteWorkspaces) -> int:
            host = workspaces.host
            done = await host.stop_marked(REMOTE_INSTANCE_VARIABLE, previous)
            if done.returncode != 0:
                log.warning("orphans on host not checked", host=host.name, reason=done.reason())
                return 0
            count = int(done.out.strip() or 0) if done.out.strip().isdigit() else 0
            if count:
                log.warning(
                    "stopped agents an earlier daemon left running", host=host.name,
                    processes=count,
                )  # fmt: skip
            return count

        return sum(await asyncio.gather(*(on(w) for w in self._remote.values())))

    def _save_pass(self) -> None:
        """Save at the end of a loop pass: at once when something a restart needs changed (a
        dispatch, an exit, a retry, a move, a new thread), else at most every
        `PROGRESS_SAVE_S` (a streaming agent's tokens and messages wake the loop hundreds of
        times a second, and a save per wake-up would double the daemon's CPU)."""
        now = self.clock.monotonic()
        if self._unsaved or now - self._saved_at >= PROGRESS_SAVE_S:
            self._save()

    def _save(self, *, keep_runs: bool = False) -> None:
        """Write this pass's changes to the store; a failing disk is reported, never fatal."""
        self._unsaved, self._saved_at = False, self.clock.monotonic()
        if self.store is None:
            self.state.new_outcomes.clear()  # only a store keeps outcome records
            return
        recorded = list(self.state.new_outcomes)
        try:
            self.store.save(
                self.state, self.clock.monotonic(), self.clock.wall(), keep_runs=keep_runs
            )
        except Exception as exc:
            if self.health.store_error != str(exc):
                log.error("saving state failed; a restart would lose this pass", reason=str(exc))
            self.health.store_error = str(exc)
        else:
            self.health.store_error = None
            if recorded:
                self._outcome_log += recorded
                self._outcomes_at = float("-inf")  # new figures at the next poll

    async def _ensure_stage_states(self) -> None:
        """Stage mode: make the tracker able to hold every state the daemon moves tickets to
        (labels-as-states trackers create the missing labels)."""
        machine = self.settings.machine
        if machine is None:
            return
        try:
            created = await self._read(
                "states", self.tracker.ensure_states((*machine.states, *machine.targets()))
            )
        except TrackerError as exc:
            log.warning("could not prepare the stages' states on the tracker", reason=str(exc))
            return
        if created:
            log.info("created the stages' states on the tracker", states=created)

    async def _shutdown(self) -> None:
        waiting = [t.identifier for t in self.state.transitions.values() if not t.in_flight]
        if waiting and self.store is None:
            # Kept in memory only: after a restart these tickets run their stage again.
            log.warning("stopping with decided moves not yet written", issue_identifiers=waiting)
        # Saved as running before they are stopped: the next daemon continues them.
        self._save()
        self._perform(core.stop_all(self.state))
        while self._workers:
            self._handle(await self._queue.get())
        for task in list(self._removals.values()):
            with contextlib.suppress(Exception):
                await task
        self._save(keep_runs=True)  # totals of the stopped runs; their rows stay for the restart
        if self._tool_server is not None:
            await self._tool_server.close()
        self._notify()

    def _tool_server_for(self, kind: str) -> ToolServer | None:
        """The MCP tool server, started for the first agent that takes its tools that way."""
        if not backend(kind).tools_over_mcp:
            return None
        if self._tool_server is None:
            self._tool_server = ToolServer()
        return self._tool_server

    # Workflow reload

    def _reload(self) -> None:
        """Re-read WORKFLOW.md; apply it when valid, otherwise keep the last good settings."""
        path = self.settings.workflow_path
        try:
            workflow = read_workflow(path)
        except SymphonyError as exc:
            self._reject(str(exc), None)
            return
        fingerprint = workflow_fingerprint(workflow)
        if fingerprint == self.settings.fingerprint:
            self._accept_current()
            return
        if fingerprint == self.health.workflow_error_fingerprint:
            return  # already rejected, already said so
        try:
            settings = build_settings(workflow, self.environ)
            check_prompts(settings)
            tracker = (
                self.tracker
                if settings.tracker == self.settings.tracker
                else self._new_tracker(settings)
            )
        except SymphonyError as exc:
            self._reject(str(exc), fingerprint)
            return
        except Exception as exc:  # an adapter bug rejects the reload, never the daemon
            log.exception("workflow reload failed unexpectedly")
            self._reject(f"internal error: {exc!r}", fingerprint)
            return
        old, tracker_changed = self.settings, tracker is not self.tracker
        self.settings = settings
        # Running sessions keep the tracker they were started with (their tools stay bound).
        self.tracker = tracker
        if tracker_changed:
            self._mask_tracker_secrets()
            self._watch_tracker()
        if tracker_changed or (settings.workspace, settings.hooks, settings.worker) != (
            old.workspace,
            old.hooks,
            old.worker,
        ):
            self._workspaces = self._new_workspaces(settings)
            self._remote = self._new_remote_workspaces(settings)
        if settings.polling != old.polling:
            self._next_tick = min(
                self._next_tick, self.clock.monotonic() + settings.polling.interval_ms / 1000
            )
        self._accept_current()
        log.info("workflow reloaded", path=str(path))
        for warning in settings.warnings:
            if warning not in old.warnings:
                log.warning(warning, path=str(path))
        self.activity.add(self.clock.wall(), "workflow_reloaded", f"{path.name} applied")

    def _accept_current(self) -> None:
        if self.health.workflow_error is not None:
            log.info(
                "workflow valid again, dispatch resumed", path=str(self.settings.workflow_path)
            )
            self.activity.add(
                self.clock.wall(), "workflow_valid", "WORKFLOW.md is valid again, dispatch resumed"
            )
        self.health.workflow_error = None
        self.health.workflow_error_fingerprint = None

    def _reject(self, message: str, fingerprint: str | None) -> None:
        if self.health.workflow_error != message:
            log.error(
                "workflow reload rejected; keeping last good settings, dispatch paused",
                path=str(self.settings.workflow_path),
                reason=message,
            )
            self.activity.add(self.clock.wall(), "workflow_rejected", message, level="error")
        self.health.workflow_error = message
        self.health.workflow_error_fingerprint = fingerprint

    def _watch_tracker(self) -> None:
        """Watch the tracker's files (the local board), replacing the watch of the tracker a
        reload swapped out; trackers behind an API are polled only."""
        if self._tracker_watcher is not None:
            self._tracker_watcher.cancel()
            self._tracker_watcher = None
        tracker = self.tracker
        if not self._watch or self._tasks is None or not isinstance(tracker, Watchable):
            return
        self._tracker_watcher = self._tasks.create_task(self._watch_paths(tracker))

    async def _watch_paths(self, tracker: Watchable) -> None:
        from watchfiles import awatch

        try:
            # Short debounce: a person's save is one or two events, and each costs one look.
            watch = awatch(*tracker.watch_paths(), debounce=30, step=10, recursive=False)
            tracker.watching(True)
            async for _ in watch:
                tracker.note_change()
                self.request_refresh()
        except Exception as exc:  # polling still sees every change
            log.warning("tracker watcher stopped; changes seen at the next poll", reason=str(exc))
        finally:
            tracker.watching(False)

    async def _watch_workflow(self) -> None:
        from watchfiles import awatch

        path = self.settings.workflow_path
        try:
            async for changes in awatch(path.parent, debounce=200, recursive=False):
                if any(Path(changed).name == path.name for _, changed in changes):
                    self._queue.put_nowait(WorkflowChanged())
        except Exception as exc:  # the per-tick check still catches every change
            log.warning("workflow watcher stopped; changes seen at the next tick", reason=str(exc))

    async def _resolve_states(self) -> bool:
        """Ask the tracker for states the workflow left to it; False while they are unknown."""
        tracker_settings = self.settings.tracker
        if tracker_settings.active_states and tracker_settings.terminal_states:
            return True
        try:
            resolved = await self._read("states", resolve_states(tracker_settings, self.tracker))
        except TrackerError as exc:
            self._tracker_failed(exc, "tracker states unknown, polling paused")
            return bool(tracker_settings.active_states)
        self.settings = dataclasses.replace(self.settings, tracker=resolved)
        log.info(
            "tracker states resolved",
            active=list(resolved.active_states),
            terminal=list(resolved.terminal_states),
        )
        return True

    # Helpers

    def _tracker_failed(self, exc: TrackerError, consequence: str) -> None:
        """Report a failing tracker once per distinct error; health shows it until it recovers."""
        if self.health.tracker_error != str(exc):
            log.error(consequence, reason=str(exc))
            self.activity.add(self.clock.wall(), "tracker_failed", str(exc), level="error")
        self.health.tracker_error = str(exc)

    async def _read(self, operation: str, request: Awaitable[T]) -> T:
        """A timed tracker read; an adapter bug becomes a tracker error that costs one poll."""
        started = time.perf_counter()
        try:
            result = await request
        except TrackerError as exc:
            self.tracker_requests.record(operation, time.perf_counter() - started, exc.category)
            raise
        except Exception as exc:
            self.tracker_requests.record(operation, time.perf_counter() - started, TRACKER_INTERNAL)
            log.exception("tracker adapter failed unexpectedly")
            raise TrackerError(TRACKER_INTERNAL, f"adapter failed: {exc!r}") from exc
        self.tracker_requests.record(operation, time.perf_counter() - started)
        return result

    def _new_tracker(self, settings: Settings) -> Tracker:
        return create_tracker(settings.tracker, TrackerContext(settings.workflow_dir, self.environ))

    def _mask_tracker_secrets(self) -> None:
        self.masker.set(self.environ.get(name, "") for name in self.tracker.secret_env_names())

    def _new_workspaces(self, settings: Settings) -> WorkspaceManager:
        return WorkspaceManager(
            settings.workspace.root,
            settings.hooks,
            env=self._child_env(settings),
            worktrees=settings.workspace.worktrees,
        )

    def _new_remote_workspaces(self, settings: Settings) -> dict[str, RemoteWorkspaces]:
        """The workspaces of each SSH worker host; what crosses is the remote environment."""
        worker = settings.worker
        env = self._remote_env(settings)
        root = str(settings.workspace.root)
        return {
            spec.name: RemoteWorkspaces(
                SshHost(spec, worker.ssh, self.environ, root), settings.hooks, env=env
            )
            for spec in worker.hosts
        }

    def _workspaces_on(self, host: str) -> WorkspaceManager | RemoteWorkspaces:
        """The workspaces of `host` (this machine's for `local` or a host no longer listed)."""
        return self._remote.get(host, self._workspaces) if host != LOCAL else self._workspaces

    def _remote_env(self, settings: Settings) -> dict[str, str]:
        return remote_environment(
            self.environ, settings, self.tracker.secret_env_names(), self.instance_id
        )

    def _child_env(self, settings: Settings, agent_names: Sequence[str] = ()) -> dict[str, str]:
        return child_environment(
            self.environ,
            settings,
            self.tracker.secret_env_names(),
            self.instance_id,
            extra_names=agent_names,
        )

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("status listener failed")

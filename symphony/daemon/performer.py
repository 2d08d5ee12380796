"""Carries out the effects the core decides: worker tasks, moves, comments, workspace removals.

The orchestrator hands every list of effects here, in order. Each effect becomes a log record,
an activity row (`symphony.observability`) and, where it asks for I/O, a task in the loop's task
group: a worker (`symphony.daemon.worker`), or one of the writes in `symphony.daemon.writes`,
whose answer comes back through the queue. The performer keeps the tasks it started (so a stop
can cancel a worker, and a new worker waits for its ticket's old workspace to be removed) and
the MCP tool server, started for the first agent that takes its tools that way, and the model
gateway, started for the first agent that holds an API key. It reads the scheduling state, and
never changes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import structlog

from symphony import core
from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import backend
from symphony.base.fences import new_marks
from symphony.base.hosts import LOCAL
from symphony.base.secrets import SecretMasker
from symphony.codehost.contract import CodeHost
from symphony.config.sections import Settings
from symphony.daemon import follow, writes
from symphony.daemon.events import Clock, PullRead, QueueEvent, RefreshRequested, WorkerExited
from symphony.daemon.places import Places
from symphony.daemon.publish import Publisher
from symphony.daemon.reported import admission
from symphony.daemon.runner import AttemptContext
from symphony.daemon.worker import STOPPED, work
from symphony.hosts.serve import LOOPBACK, Listen
from symphony.memory import memory_of
from symphony.observability.activity import Activity
from symphony.observability.board import Board
from symphony.observability.effect_log import log_effect
from symphony.observability.health import Health
from symphony.telemetry import (
    UNTRACED,
    Span,
    StepTrace,
    Tracer,
    export_headers,
    tracer_from_env,
)
from symphony.tracker.contract import Tracker

if TYPE_CHECKING:
    from symphony.agents.tool_server import ToolServer
    from symphony.gateway.server import ModelGateway

log = structlog.get_logger("symphony.orchestrator")

T = TypeVar("T")
KEPT_CANARIES = 20
KEPT_TRACES = 500


class Current(NamedTuple):
    """What the orchestrator runs on now; a reload replaces each."""

    settings: Settings
    tracker: Tracker
    places: Places
    code_host: CodeHost | None
    """The client of the workflow's `repository:`; None when it publishes nothing."""


class Performer:
    def __init__(
        self,
        state: core.SchedulerState,
        current: Callable[[], Current],
        *,
        report: Callable[[QueueEvent], None],
        clock: Clock,
        activity: Activity,
        board: Board,
        health: Health,
        masker: SecretMasker,
        session_factory: Callable[[AgentLaunch], AgentSession],
        changed: Callable[[], None],
    ) -> None:
        self._state = state
        self._current = current
        self._report = report
        self._clock = clock
        self._activity = activity
        self._board = board
        self._health = health
        self._masker = masker
        self._session_factory = session_factory
        self._changed = changed
        self.workers: dict[str, asyncio.Task[None]] = {}
        """The running workers' tasks, by issue id."""
        self._removals: dict[str, asyncio.Task[None]] = {}
        self._tasks: asyncio.TaskGroup | None = None
        self._tool_server: ToolServer | None = None
        self._gateway: ModelGateway | None = None
        self._tracer: Tracer | None = None
        """Where runs' spans go: made at the first run from `telemetry:` and the
        `OTEL_EXPORTER_OTLP_*` variables, flushed at close."""
        self._led: dict[str, Span] = {}
        """Per ticket, the span its next steps on the code host follow from: its last run's
        root, then the publication of its hand-off (the newest `KEPT_TRACES` tickets). Kept
        in memory: after a restart a ticket's readings start traces that link to nothing."""
        self._canaries: dict[str, list[str]] = {}
        """The canaries of each ticket's runs since the daemon started (the newest
        `KEPT_CANARIES`): what it publishes for the ticket must carry none. Kept in memory
        only, as a canary must never be written anywhere."""

    def gateway(self) -> ModelGateway:
        """The workflow's model gateway, made (and its server loaded) for the first run whose
        agent holds an API key; it listens from its first grant."""
        if self._gateway is None:
            from symphony.gateway.server import ModelGateway

            def settings() -> Settings:
                return self._current().settings

            self._gateway = ModelGateway(
                admission(self._state, settings, self._clock), self._report,
                wall=self._clock.wall, listen=lambda: listen_for(settings(), tools=False),
            )  # fmt: skip
        return self._gateway

    def start(self, tasks: asyncio.TaskGroup) -> None:
        """Start what effects ask for in `tasks` from now on (the loop's task group)."""
        self._tasks = tasks

    def perform(self, effects: Sequence[core.Effect]) -> None:
        for effect in effects:
            self._activity.add_effect(self._clock.wall(), effect)
            log_effect(effect)
            if isinstance(effect, core.StartWorker):
                self._start_worker(effect)
            elif isinstance(effect, core.PerformTransition):
                self._start_transition(effect)
            elif isinstance(effect, core.PostComment):
                self._spawn(writes.comment(self._current().tracker, effect))
            elif isinstance(effect, core.TransitionDone) and effect.confirmed:
                self._board.moved(effect.issue_id, effect.target)
            elif isinstance(effect, core.StopWorker):
                task = self.workers.get(effect.issue_id)
                if task is not None:
                    task.cancel()
            elif isinstance(effect, core.RemoveWorkspace):
                self._remove_workspace(effect.identifier, effect.host)
            elif isinstance(effect, core.ReadPullRequest | core.MergePullRequest):
                self._follow(effect)
            elif isinstance(effect, core.AgentResumed):
                # The tickets that waited for the agent start now, not at the next poll.
                self._report(RefreshRequested(None))

    def exited(self, issue_id: str) -> None:
        """The worker of `issue_id` reported its exit."""
        self.workers.pop(issue_id, None)

    async def close(self) -> None:
        """After the last worker exited: let the removals finish, stop the tool server."""
        for task in list(self._removals.values()):
            with contextlib.suppress(Exception):
                await task
        if self._tool_server is not None:
            await self._tool_server.close()
        if self._tracer is not None:
            # Every run has ended its spans by now; the flush is bounded by the exporter's.
            await asyncio.to_thread(self._tracer.shutdown)
        if self._gateway is not None:
            await self._gateway.close()

    def _start_worker(self, start: core.StartWorker) -> None:
        assert self._tasks is not None
        issue, attempt = start.issue, start.attempt
        settings, tracker, places, _ = self._current()
        machine = settings.machine
        agent = backend(start.agent_kind)
        stage = machine.stage_named(start.stage) if machine is not None else None
        sandbox = settings.sandbox_for(stage)
        place = places.for_run(
            settings, start.host, agent.env_names, ticket=issue.identifier,
            run=uuid.uuid4().hex[:12], sandbox=sandbox, agent_kind=start.agent_kind,
            issue_id=issue.id,
        )  # fmt: skip
        marks = new_marks()
        kept = self._canaries.setdefault(issue.id, [])
        kept[:] = [*kept, marks.canary][-KEPT_CANARIES:]
        ctx = AttemptContext(
            settings=settings,
            tracker=tracker,
            workspaces=place.workspaces,
            agent_env=place.agent_env,
            child_env=place.child_env,
            masker=self._masker,
            host=place.host,
            open_session=self._session_factory,
            agent_kind=start.agent_kind,
            tool_server=self._tool_server_for(agent.tools_over_mcp),
            gateway=self.gateway,
            stage=stage,
            turns_used=start.turns_used,
            resume_thread_id=start.resume_thread_id,
            last_message=start.last_message,
            review=start.review,
            hold_state=start.hold_state,
            label=start.label,
            run_kind=start.run_kind,
            memory=memory_of(settings, self._masker),
            open_tickets=self._state.open_identifiers,
            marks=marks,
            tracer=self._tracer_for(settings),
            tracer_text=settings.telemetry.capture_text,
            traced=functools.partial(self._lead, issue.id),
            trace_headers=_agent_headers(settings),
            canaries=tuple(kept),
        )
        self._health.dispatched += 1
        log.info(
            "dispatching", issue_id=issue.id, issue_identifier=issue.identifier, attempt=attempt,
            run=start.label,
        )  # fmt: skip
        removal = self._removals.get(issue.identifier)
        task = self._tasks.create_task(
            work(issue, attempt, ctx, report=self._report, clock=self._clock, removal=removal)
        )
        self.workers[issue.id] = task
        task.add_done_callback(functools.partial(self._worker_done, issue.id))

    def _tracer_for(self, settings: Settings) -> Tracer:
        if self._tracer is None:
            self._tracer = tracer_from_env(os.environ, endpoint=settings.telemetry.endpoint)
        return self._tracer

    def _lead(self, issue_id: str, opened: Span) -> None:
        self._led.pop(issue_id, None)
        self._led[issue_id] = opened
        while len(self._led) > KEPT_TRACES:
            del self._led[next(iter(self._led))]

    def _trace(self, issue_id: str, *, leads: bool = False) -> StepTrace:
        """Where the span of a step after `issue_id`'s run goes; the step's span leads the
        ticket's next steps when `leads` (a publication)."""
        tracer = self._tracer_for(self._current().settings)
        opened = functools.partial(self._lead, issue_id) if leads else UNTRACED.opened
        return StepTrace(tracer, self._led.get(issue_id), opened)

    def _worker_done(self, issue_id: str, task: asyncio.Task[None]) -> None:
        # A worker cancelled before it ever ran never reaches its `finally`, so nothing would
        # report its exit and shutdown would wait for it forever: report it here.
        if task.cancelled() and self.workers.get(issue_id) is task:
            self._report(WorkerExited(issue_id, core.WorkerExit(False, STOPPED)))

    def _start_transition(self, perform: core.PerformTransition) -> None:
        pending = self._state.transitions.get(perform.issue_id)
        if pending is not None:
            settings, tracker, places, host = self._current()
            own = core.moves_from(pending, settings)
            publisher = None
            if host is not None and settings.repository is not None:
                git_env = places.child_env(settings)
                canaries = tuple(self._canaries.get(perform.issue_id, ()))
                publisher = Publisher(
                    host, settings.repository, git_env, self._masker, canaries=canaries
                )
            # The ticket's workspace is where its run was: here, or its SSH host.
            where = self._state.workspace_hosts.get(perform.issue_id, LOCAL)
            trace = self._trace(perform.issue_id, leads=True)
            move = writes.move(tracker, places.on(where), pending, own, publisher, trace)
            self._spawn(move, then=self._report)

    def _follow(self, effect: core.ReadPullRequest | core.MergePullRequest) -> None:
        host = self._current().code_host
        if host is None:  # a reload removed `repository:`: the reading fails, and says why
            self._report(PullRead(effect.issue_id, None, "the workflow names no repository"))
        elif isinstance(effect, core.ReadPullRequest):
            trace = self._trace(effect.issue_id)
            self._spawn(follow.read(host, effect, self._masker, trace), then=self._report)
        else:
            trace = self._trace(effect.issue_id)
            self._spawn(follow.merge(host, effect, self._masker, trace), then=self._report)

    def _remove_workspace(self, identifier: str, host: str) -> None:
        def removed(_: None) -> None:
            self._removals.pop(identifier, None)
            self._changed()

        workspaces = self._current().places.on(host)
        removal = self._spawn(writes.remove_workspace(workspaces, identifier), then=removed)
        self._removals[identifier] = removal

    def _spawn(
        self, write: Coroutine[Any, Any, T], then: Callable[[T], None] | None = None
    ) -> asyncio.Task[None]:
        """Run `write` beside the loop, then hand its result to `then`."""
        assert self._tasks is not None

        async def run() -> None:
            result = await write
            if then is not None:
                then(result)

        return self._tasks.create_task(run())

    def _tool_server_for(self, over_mcp: bool) -> ToolServer | None:
        if not over_mcp:
            return None
        if self._tool_server is None:
            from symphony.agents.tool_server import ToolServer  # only MCP agents need it

            self._tool_server = ToolServer(lambda: listen_for(self._current().settings, tools=True))
        return self._tool_server


def listen_for(settings: Settings, *, tools: bool) -> Listen:
    """Where the tool server (`tools`) or the model gateway listens: on loopback, or where the
    workflow's pods reach the daemon (`worker.kubernetes.daemon_address`)."""
    cluster = settings.worker.kubernetes
    daemon = cluster.daemon if cluster is not None else None
    if daemon is None:
        return LOOPBACK
    port = daemon.tool_port if tools else daemon.gateway_port
    return Listen(daemon.listen, port, daemon.address)


def _agent_headers(settings: Settings) -> dict[str, str]:
    """The daemon's export headers for the agent's own exporter: only where the workflow says
    `telemetry.agent_headers: true` (they may hold the collector's key)."""
    headers = export_headers(os.environ) if settings.telemetry.agent_headers else None
    return {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": headers} if headers else {}

"""One run attempt for one ticket: workspace, prompt, agent session, turn loop, hooks.

The runner reports agent events through a callback and ends by returning (a normal exit) or by
raising `AttemptFailed` with a concise reason. It never touches scheduling state: what happens
after it ends is the orchestrator's decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import structlog

from symphony.agents import AgentError, AgentLaunch, AgentSession, EventSink, Grant, TurnResult
from symphony.agents.registry import backend, open_session
from symphony.base.errors import SymphonyError
from symphony.base.events import AgentEvent, EventKind, TokenUsage
from symphony.base.fences import RunMarks, framed, handle, new_marks, quoted, redacted, seal
from symphony.base.hosts import HOST_UNREACHABLE
from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.prompt import (
    StageContext,
    continuation_prompt,
    render_material,
    stage_continuation_prompt,
)
from symphony.config.sections import Settings
from symphony.config.stages import Report, Stage, StageOutcome
from symphony.config.trust import TrustSettings
from symphony.core.evidence import WorkspaceFacts
from symphony.core.footprint import Footprint, files_named
from symphony.core.injection import carries
from symphony.core.markers import marker_of, unforgeable, unmarked
from symphony.core.runs import (
    GateStep,
    TurnLimits,
    TurnVerdict,
    after_gates,
    before_first_turn,
    next_turn,
    turn_limits,
)
from symphony.core.stage_outcomes import RunPush
from symphony.core.state import Failure, FailureReason, MovePhase, RunKind
from symphony.core.trust import material
from symphony.core.verification import GateRound, Verification
from symphony.daemon.publish import push_before_end
from symphony.daemon.sandbox import attempt_sandbox, protected_paths, runs_root
from symphony.gateway.tokens import routes
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST
from symphony.memory import (
    RECORD_LEARNING,
    Memory,
    Ticket,
    gate_lessons,
    parse_learning,
    record_learning_spec,
)
from symphony.telemetry import NO_SPAN, NO_TRACER, Attribute, Span, Tracer, span
from symphony.tracker.contract import (
    TRACKER_RATE_LIMITED,
    Comment,
    NewTicket,
    Tracker,
    TrackerError,
)
from symphony.tracker.stage_tools import (
    CREATE_FOLLOW_UP,
    MAX_FOLLOW_UPS_PER_RUN,
    REPORT_OUTCOME,
    parse_follow_up,
    parse_report,
    stage_tool_specs,
)
from symphony.workspace.contract import Workspaces
from symphony.workspace.facts import changed_files, merge_checks, workspace_facts
from symphony.workspace.gates import run_gates
from symphony.workspace.local import Workspace

log = structlog.get_logger("symphony.runner")

if TYPE_CHECKING:
    from symphony.agents.tool_server import ToolServer
    from symphony.gateway.server import ModelGateway, ModelGrant

T = TypeVar("T")

# A tool call blocks the agent's turn; a hung tracker must not hold it for the turn timeout.
TOOL_TIMEOUT_S = 120.0
# A rate-limited refresh after a turn waits for the provider's reset when it is this close,
# rather than failing an attempt that did nothing wrong.
RATE_LIMIT_WAIT_MAX_S = 30.0
# After a restart: what a resumed thread is told, and what a new one learns of the old run.
RESUMED_GUIDANCE = (
    "The daemon was restarted while you were working on {identifier}; this thread continues. "
    "Check the state of the workspace, then pick up where you left off."
)
# After the model's provider refused a turn and its limit has reset.
LIMIT_RESUMED_GUIDANCE = (
    "Your model's provider refused the last request on {identifier} because of a usage or rate "
    "limit; it has reset and this thread continues. Check the state of the workspace, then "
    "pick up where you left off."
)
REVIEW_NOTE = "\n\n## What this run addresses\n\n{review}\n"

INTERRUPTED_NOTE = (
    "\n\nA previous session on this ticket was interrupted by a restart of the daemon; the "
    "workspace keeps what it did. Its last message was:\n\n{said}\n"
)
# Stage prompts get at most this many comments (the newest), each cut to this many characters.
MAX_PROMPT_COMMENTS = 100
MAX_COMMENT_CHARS = 10_000


MoveSink = Callable[[str | None, MovePhase], None]
ToolAnswer = Callable[[Any], Awaitable[ToolResult]]
"""A tool call the daemon answers itself, given the call's arguments."""
"""Told of each of the run's own tool calls that moves its ticket: the state it names (None
when it names none), as it starts and as it ends, so that the daemon can tell the move that
call made from anyone else's."""


def _no_moves(target: str | None, phase: MovePhase) -> None:
    pass


class AttemptFailed(Exception):
    """The attempt ended abnormally; `failure` says at which step and why."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(str(failure))
        self.failure = failure


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What one attempt runs with, captured at dispatch: a reload never changes it midway."""

    settings: Settings
    tracker: Tracker
    workspaces: Workspaces
    agent_env: Mapping[str, str]
    """The agent's environment (`symphony.workspace.environment`), its backend's variables too."""
    child_env: Mapping[str, str]
    """What gates and git queries in the workspace get: the agent's, without the backend's."""
    masker: SecretMasker
    """The daemon's masker: tool results and gate output reach the agent through it."""
    open_session: Callable[[AgentLaunch], AgentSession] = open_session
    agent_kind: str = "codex"
    tool_server: ToolServer | None = None
    """Serves the tools over MCP to agents that take them that way (`tools_over_mcp`)."""
    gateway: Callable[[], ModelGateway] | None = None
    """The workflow's model gateway, made when first asked for: an agent given an API key
    calls its model through it."""
    stage: Stage | None = None
    """Stage mode: the stage this attempt works in."""
    turns_used: int = 0
    """Turns already started in the stage by earlier attempts (the progress guard)."""
    resume_thread_id: str | None = None
    """A run a restart interrupted: its thread, continued when its workspace survived."""
    last_message: str | None = None
    """That run's agent's last message, told to a new thread when the old one cannot go on."""
    memory: Memory | None = None
    """The notes folder: `{{ memory }}` and the `record_learning` tool; None turns both off."""
    host: Host = LOCAL_HOST
    """Where the run happens: its workspace, hooks, gates and agent are there."""
    open_tickets: Callable[[], Sequence[str]] = tuple
    """The identifiers of the other open tickets now (running, retrying, in review), whose
    branches a hand-off is checked against."""
    review: str | None = None
    """What the run addresses (`{{ review }}`): its pull request's review, failed checks or a
    conflict."""
    hold_state: str | None = None
    """A fix run: the review state its ticket waits in, which does not end the run."""
    label: str = "first run"
    """What the run is, with its count (`conflict fix 1/2`): in its log lines and evidence."""
    run_kind: RunKind = RunKind.FIRST
    """What started it (a thread it continues is told why it went quiet)."""
    marks: RunMarks = dataclasses.field(default_factory=new_marks)
    """The run's fence and canary (`symphony.base.fences`): never logged, never shown."""
    tracer: Tracer = NO_TRACER
    """Where the run's spans go (`symphony.telemetry`): nowhere unless telemetry is on."""
    tracer_text: bool = False
    """Whether turn spans carry the prompt and the agent's last message (off by default)."""
    traced: Callable[[Span], None] = lambda root: None
    """Told the run's root span as it opens: the ticket's publication hangs from it."""
    trace_headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The daemon's export headers as the agent's `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, where
    `telemetry.agent_headers` lets the agent have them; else empty."""
    canaries: tuple[str, ...] = ()
    """The canaries of the ticket's runs this daemon started, this one's too: a push at the
    hand-off (`outlives_run` false) sends no commit that carries one."""


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How a normal attempt ended. In stage mode: the agent's report, or `stuck` when the
    stage's turn budget ran out without one; both unset means the stage continues. A `done`
    report in a stage with gates comes with the `verification` the daemon ran, and a stage
    with evidence with the workspace's git `facts`."""

    report: Report | None = None
    stuck: bool = False
    verification: Verification | None = None
    facts: WorkspaceFacts | None = None
    footprint: Footprint | None = None
    """The files the ticket's plan names and its branch changed, as the attempt ended."""
    pushed: RunPush | None = None
    """The branch a publishing hand-off pushed before the workspace ended with the run."""


async def run_attempt(
    issue: Issue,
    attempt: int | None,
    ctx: AttemptContext,
    on_event: EventSink,
    on_move: MoveSink = _no_moves,
) -> AttemptEnd:
    """Run one attempt at `issue` in its workspace: prepare it, run turns until the ticket
    leaves the run or the core says stop, and finish with the ticket's footprint. Raises
    `AttemptFailed` naming the step that failed."""
    with span(ctx.tracer, "symphony.run", None, _run_attributes(issue, attempt, ctx)) as root:
        ctx.traced(root)
        run = _Attempt(issue, attempt, ctx, on_event, on_move, root)
        with span(ctx.tracer, "symphony.workspace", root):
            await run.open_workspace()
        try:
            end = await run.run()
        finally:
            await run.close()
        # A run that ended without a decision is measured after its after_run hook.
        return end if end is not None else await run.finish(AttemptEnd())


def _run_attributes(issue: Issue, attempt: int | None, ctx: AttemptContext) -> dict[str, Attribute]:
    """The root span's attributes: the ticket, the run and the GenAI system and model."""
    block = ctx.settings.agent_block(ctx.stage, ctx.agent_kind)
    model = getattr(block, "model", None)
    found: dict[str, Attribute] = {
        "symphony.ticket": issue.identifier,
        "symphony.run": ctx.label,
        "symphony.attempt": attempt or 0,
        "gen_ai.system": ctx.agent_kind,
    }
    if ctx.stage is not None:
        found["symphony.stage"] = ctx.stage.name
    if isinstance(model, str) and model:
        found["gen_ai.request.model"] = model
    return found


class _Attempt:
    """One attempt's working state, shared by its steps: the workspace and the tools it is
    given (prepare), the agent's turns and what the core says after each (turns), and the
    footprint the attempt leaves (finish)."""

    def __init__(
        self,
        issue: Issue,
        attempt: int | None,
        ctx: AttemptContext,
        on_event: EventSink,
        on_move: MoveSink,
        root: Span = NO_SPAN,
    ) -> None:
        self.issue = self.current = issue
        self.root = root
        self.attempt = attempt
        self.ctx = ctx
        self.settings = ctx.settings
        self.stage = ctx.stage
        self.marks = ctx.marks
        self.on_event = _redacting(self._observe_event(on_event), self.marks.canary)
        self.on_move = on_move
        self.log = log.bind(
            attempt=attempt, stage=self.stage.name if self.stage else None, run=ctx.label
        )
        self.variables: StageContext | None = None
        self.follow_up_states: tuple[str, ...] = ()
        self.follow_ups_made = 0
        self.movers: dict[str, ToolSpec] = {}
        """The tracker's tools that move the ticket: a call is the run's own move."""
        self.answers: dict[str, ToolAnswer] = {}
        """The tools the daemon answers itself, by name, declared where they are offered
        (`prepare`); every other call goes to the tracker."""
        self.turn_report: Report | None = None
        self.grant: Grant | None = None
        self.model_grant: ModelGrant | None = None
        self.model_gateway: ModelGateway | None = None
        self.workspace_env: dict[str, str] = {}
        self.resources = contextlib.AsyncExitStack()
        """What the attempt holds until it closes: its sandbox."""
        self.refusal: str | None = None
        """A write of the agent's that carried the run's canary: what it was. The run stops."""
        self.stopping = asyncio.Event()
        self.turn_span: Span | None = None
        self.usage = TokenUsage()

    # Prepare

    async def open_workspace(self) -> None:
        self.workspace = await _step(
            "workspace",
            FailureReason.WORKSPACE,
            self.ctx.workspaces.prepare(
                self.issue.identifier, branch=self.issue.branch_name, on_status=self.waiting
            ),
        )

    def waiting(self, what: str) -> None:
        """What the run waits for before its workspace exists (a pod's room in the cluster),
        as its status: an event, so a long wait is never taken for a stall."""
        self.on_event(AgentEvent(EventKind.NOTIFICATION, message=what))

    async def prepare(self) -> AgentLaunch:
        """The hook before the run, the stage's context and the tools the agent gets."""
        ctx, stage, issue = self.ctx, self.stage, self.issue
        await _step(
            "before_run hook", FailureReason.HOOK, ctx.workspaces.before_run(self.workspace)
        )
        tools = ctx.tracker.agent_tools()
        if stage is not None:
            assert self.settings.machine is not None
            read = await _step(
                "comments", FailureReason.TRACKER,
                stage_context(ctx.tracker, issue, stage, self.settings.trust),
            )  # fmt: skip
            variables = ctx.masker.mask_fields(read)  # the ticket's comments enter here
            # What the run addresses: a review or failed checks, and a conflict with the
            # target its worktree could not be brought up to (both sides, for the agent).
            note = self.workspace.note
            asked = [ctx.review] if ctx.review else []
            asked += [quoted(note, "what git says of the worktree")] if note else []
            self.variables = dataclasses.replace(variables, review="\n\n".join(asked) or None)
            # A ticket an agent creates starts where every ticket does: before the first
            # checkpoint (a plan a person approves), never in a later stage's state.
            self.follow_up_states = self.settings.machine.stages[0].states
            tools = [t for t in tools if not t.moves_ticket]
            tools += stage_tool_specs(stage.name, self.follow_up_states)
        self.movers = {t.name: t for t in ctx.tracker.agent_tools() if t.moves_ticket}
        self.answers = self._answers(stage is not None, ctx.memory)
        if ctx.memory is not None:
            tools = [*tools, record_learning_spec()]
        _check_cwd(ctx.workspaces, self.workspace)
        ticket_env = {
            "SYMPHONY_ISSUE_IDENTIFIER": issue.identifier,
            "SYMPHONY_WORKSPACE": str(self.workspace.path),
        }
        self.workspace_env = {**ctx.child_env, **ticket_env}
        return AgentLaunch(
            workspace=self.workspace.path,
            settings=self.settings.agent_block(stage, ctx.agent_kind),
            kind=ctx.agent_kind,
            env={**ctx.agent_env, **ticket_env, **self.trace_env()},
            tools=tools,
            handle_tool=self.handle_tool,
            on_event=self.on_event,
            # A thread refers to files in its workspace: one made afresh cannot be continued.
            resume_thread_id=None if self.workspace.created_now else ctx.resume_thread_id,
            host=ctx.host,
        )

    def trace_env(self) -> dict[str, str]:
        """The run's W3C trace context for the agent (`TRACEPARENT`), so spans it exports join
        the run's trace; nothing when telemetry is off."""
        parent = self.root.traceparent()
        return {"TRACEPARENT": parent} if parent is not None else {}

    def exporting(self, launch: AgentLaunch) -> AgentLaunch:
        """The launch with the agent told to export its own spans to the daemon's collector,
        where they join the run's trace (`TRACEPARENT`); as it was when telemetry is off or
        `telemetry.agents` is. The export headers go only where the user let them."""
        endpoint = self.ctx.tracer.endpoint
        if endpoint is None or not self.settings.telemetry.agents or not self.trace_env():
            return launch
        settings, env = backend(launch.kind).traces_to(launch.settings, endpoint)
        env = {**launch.env, **env, **self.ctx.trace_headers}
        return dataclasses.replace(launch, settings=settings, env=env)

    async def through_gateway(self, launch: AgentLaunch) -> AgentLaunch:
        """The launch with its API keys swapped for a token of the model gateway, where the
        agent holds a key; else as it was (a subscription login). An agent on another host
        reaches the gateway over a forward on its own connection."""
        if self.ctx.gateway is None or not routes(launch.env):
            return launch
        self.model_gateway = self.ctx.gateway()
        self.model_grant = await self.model_gateway.grant(self.issue.id, launch.kind, launch.env)
        if self.model_grant is None:
            return launch
        host, there = launch.host.reach(self.model_grant.base_url)
        env = self.model_grant.env_at(there)
        settings = backend(launch.kind).through_gateway(launch.settings, env)
        return dataclasses.replace(launch, host=host, env=env, settings=settings)

    async def sandbox(self, launch: AgentLaunch) -> AgentLaunch:
        """The launch moved into the stage's sandbox, with the tool server carried in; the
        gates run where the agent does."""
        settings = self.settings.sandbox_for(self.stage)
        if not settings.enabled:
            return launch
        agent = backend(launch.kind)
        there = launch.host.sandboxed(settings, agent.sandbox_home)
        if there is not None:  # built on the host, from its own folders
            return dataclasses.replace(
                launch, host=there, settings=agent.inside_sandbox(launch.settings)
            )
        run = await self.resources.enter_async_context(
            attempt_sandbox(
                kind=launch.kind,
                env=launch.env,
                protected=protected_paths(self.settings, self.ctx.agent_env),
                on_refused=self.refused,
                root=runs_root(self.settings),
                gateway=self.model_grant is not None,
            )
        )
        if self.grant is not None:
            await run.forward(_port_of(self.grant.url))
        host = await run.host(settings)
        return dataclasses.replace(
            launch, host=host, settings=agent.inside_sandbox(launch.settings)
        )

    def refused(self, host: str, port: int) -> None:
        target = f"{host}:{port}"
        self.log.warning("sandbox refused a connection", target=target)
        self.on_event(AgentEvent(
            EventKind.PERMISSION_DENIED,
            message=f"sandbox refused a connection to {target} (not in sandbox.allow_hosts)",
        ))  # fmt: skip

    def _answers(self, staged: bool, memory: Memory | None) -> dict[str, ToolAnswer]:
        """Which tools the daemon answers itself: the stage tools in stage mode, where the
        tracker's move tools are withheld (moves are the daemon's), and the memory's."""
        answers: dict[str, ToolAnswer] = {}
        if staged:
            answers |= dict.fromkeys(self.movers, _withheld)
            answers[REPORT_OUTCOME] = self._report_outcome
            answers[CREATE_FOLLOW_UP] = self._create_follow_up
        if memory is not None:
            answers[RECORD_LEARNING] = functools.partial(self._record_learning, memory)
        return answers

    async def handle_tool(self, name: str, arguments: Any) -> ToolResult:
        parent = self.turn_span or self.root
        with span(self.ctx.tracer, f"symphony.tool {name}", parent, {
            "gen_ai.tool.name": name, "gen_ai.operation.name": "execute_tool"
        }) as called:  # fmt: skip
            result = await self._handle_tool(name, arguments)
            called.set("symphony.tool.success", result.success)
            return result

    async def _handle_tool(self, name: str, arguments: Any) -> ToolResult:
        if self.refusal is not None or carries(arguments, (self.marks.canary,)):
            # Whatever the tool, a call carrying the canary sends words the agent was told
            # never to repeat: it is following planted text. Nothing more goes out of this run.
            self.refusal = self.refusal or f"a `{name}` call"
            self.stopping.set()
            self.log.warning("agent write refused: suspected injection", tool=name)
            return ToolResult.failure("refused", "this write was refused; the run is stopped")
        answer = self.answers.get(name)
        if answer is not None:
            return await answer(arguments)
        mover = self.movers.get(name)
        target = mover.target_of(arguments) if mover is not None else None
        if mover is not None:
            self.on_move(target, MovePhase.STARTED)
        try:
            async with asyncio.timeout(TOOL_TIMEOUT_S):
                result = await self.ctx.tracker.execute_tool(
                    name, unforged(arguments), self.current
                )
        except TimeoutError:
            # The write may still land: the move stays the run's own.
            return ToolResult.failure(
                "tool_timeout", f"{name} did not finish within {TOOL_TIMEOUT_S:.0f}s"
            )
        if mover is not None:
            self.on_move(target, MovePhase.SUCCEEDED if result.success else MovePhase.FAILED)
        # A provider error that echoes a credential must not hand it to the agent.
        return ToolResult(result.success, self.ctx.masker.mask_value(result.output))

    async def _report_outcome(self, arguments: Any) -> ToolResult:
        report = parse_report(arguments)
        if isinstance(report, ToolResult):
            return report
        self.turn_report = report
        return ToolResult(
            True,
            {
                "recorded": report.outcome.value,
                "note": "the daemon moves the ticket when this turn ends",
            },
        )

    async def _create_follow_up(self, arguments: Any) -> ToolResult:
        if self.follow_ups_made >= MAX_FOLLOW_UPS_PER_RUN:
            return ToolResult.failure(
                "follow_up_limit",
                f"a run creates at most {MAX_FOLLOW_UPS_PER_RUN} tickets; name the rest "
                "in your report for a person",
            )
        made = await _follow_up(
            self.ctx.tracker, unforged(arguments), self.follow_up_states, self.current,
            self.ctx.masker,
        )  # fmt: skip
        self.follow_ups_made += made.success
        return made

    async def _record_learning(self, memory: Memory, arguments: Any) -> ToolResult:
        return await _record_learning(memory, arguments, self.current)

    def take_report(self) -> Report | None:
        """The report of the turn that just ended, and a clean slate for the next."""
        report, self.turn_report = self.turn_report, None
        return report

    # Turns

    async def run(self) -> AttemptEnd | None:
        """The attempt's turns; None when they ended without a decision (the ticket left the
        run, or max_turns): the caller finishes it after the after_run hook."""
        ctx = self.ctx
        launch = await self.prepare()
        limits = turn_limits(self.settings, self.stage, ctx.turns_used)
        first = before_first_turn(limits)
        if first.verdict is TurnVerdict.STUCK:
            self.log.info("worker done", reason=first.reason)
            return await self.finish(AttemptEnd(stuck=True))
        if ctx.tool_server is not None and backend(ctx.agent_kind).tools_over_mcp and launch.tools:
            self.grant = await ctx.tool_server.grant(launch.tools, self.handle_tool)
            launch = _with_tools(launch, self.grant)
        launch = self.exporting(launch)
        launch = await self.through_gateway(launch)
        launch = await _step("sandbox", FailureReason.AGENT_STARTUP, self.sandbox(launch))
        session = ctx.open_session(launch)
        try:
            await _step("agent startup", FailureReason.AGENT_STARTUP, session.start())
            end = await self.turns(session, launch, limits)
        finally:
            await session.stop()
        return await self._before_workspace_ends(end)

    async def turns(
        self, session: AgentSession, launch: AgentLaunch, limits: TurnLimits
    ) -> AttemptEnd | None:
        turn = 1
        while True:
            prompt = await self.prompt(session, turn, limits.max_turns)
            title = f"{self.current.identifier}: {self.current.title}"
            self.turn_report = None
            result = await self.turn(session, f"turn {turn}", prompt, title)
            self.log.info("turn completed", session_id=result.session_id, turn=turn)
            report = self.take_report()
            if report is not None and self.stage is not None:
                return await self.reported(report, self.stage, session, launch)
            refreshed = await _step(
                "issue refresh", FailureReason.TRACKER, _refresh(self.ctx.tracker, self.issue.id)
            )
            match = next((i for i in refreshed if i.id == self.issue.id), None)
            after = next_turn(
                match, turn=turn, limits=limits, stage=self.stage, settings=self.settings,
                hold_state=self.ctx.hold_state,
            )  # fmt: skip
            if after.verdict is not TurnVerdict.CONTINUE:
                self.log.info("worker done", reason=after.reason)
                if after.verdict is TurnVerdict.STUCK:
                    return await self.finish(AttemptEnd(stuck=True))
                return None
            assert match is not None
            self.current = match
            turn += 1

    async def prompt(self, session: AgentSession, turn: int, max_turns: int) -> str:
        ctx, stage, current = self.ctx, self.stage, self.current
        if turn == 1 and session.resumed:
            after_limit = ctx.run_kind is RunKind.AFTER_LIMIT
            guidance = LIMIT_RESUMED_GUIDANCE if after_limit else RESUMED_GUIDANCE
            return framed(guidance.format(identifier=current.identifier), self.marks)
        if turn == 1:
            template = stage.prompt_template if stage else self.settings.prompt_template
            notes = None
            if ctx.memory is not None and not ctx.memory.is_empty():
                files = await _changed(ctx, self.workspace, self.workspace_env)
                plan = self.variables.plan if self.variables is not None else None
                notes = await asyncio.to_thread(
                    ctx.memory.for_prompt, Ticket.of(current, files, plan)
                )
            ticket = ctx.masker.mask_fields(current)  # its description, as the tracker has it
            prompt = _render(template, ticket, self.attempt, self.variables, notes)
            review = self.variables.review if self.variables is not None else ctx.review
            if review is not None and "review" not in template:
                # The daemon's reason for this run reaches the agent even where the stage's
                # prompt does not place `{{ review }}`.
                prompt += REVIEW_NOTE.format(review=review)
            if ctx.resume_thread_id is not None:
                said = ctx.last_message
                told = quoted(said, "last message of the interrupted session") if said else None
                prompt += INTERRUPTED_NOTE.format(said=told or "(nothing was reported)")
            return framed(prompt, self.marks)
        if stage is not None:
            return stage_continuation_prompt(current, stage.name, turn, max_turns)
        return continuation_prompt(current, turn, max_turns)

    def _observe_event(self, sink: EventSink) -> EventSink:
        """The sink, with the thread's model, token totals and cost noted on the run's spans."""

        def observe(event: AgentEvent) -> None:
            if event.model:
                self.root.set("gen_ai.request.model", event.model)
            if event.usage is not None:
                self.usage = event.usage
                self.root.set("gen_ai.usage.input_tokens", event.usage.input_tokens)
                self.root.set("gen_ai.usage.output_tokens", event.usage.output_tokens)
            if event.reported_cost_usd is not None:
                self.root.set("symphony.cost_usd", event.reported_cost_usd)
            sink(event)

        return observe

    async def turn(self, session: AgentSession, what: str, prompt: str, title: str) -> TurnResult:
        """One turn in its span, with the tokens it used."""
        before = self.usage
        attributes: dict[str, Attribute] = {"gen_ai.operation.name": "chat"}
        if self.ctx.tracer_text:
            attributes["gen_ai.prompt"] = prompt
        with span(self.ctx.tracer, f"symphony.{what}", self.root, attributes) as turned:
            self.turn_span = turned
            try:
                result = await self._turn(session, what, prompt, title)
            finally:
                self.turn_span = None
                used = self.usage
                turned.set("gen_ai.usage.input_tokens", used.input_tokens - before.input_tokens)
                turned.set("gen_ai.usage.output_tokens", used.output_tokens - before.output_tokens)
            if self.ctx.tracer_text and result.message:
                turned.set("gen_ai.completion", result.message)
            return result

    async def _turn(self, session: AgentSession, what: str, prompt: str, title: str) -> TurnResult:
        """One turn (or fix turn), every quoted piece of `prompt` sealed with the run's
        fence; a write refused for the canary stops it at once."""
        running = asyncio.ensure_future(
            session.run_turn(seal(prompt, self.marks.fence), title=title)
        )
        refused = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((running, refused), return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
            if not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await running
        if self.refusal is not None:
            raise AttemptFailed(Failure(
                what, self.refusal, "suspected_injection", FailureReason.SUSPECTED_INJECTION
            ))  # fmt: skip
        return await _step(what, FailureReason.AGENT_TURN, running)

    async def reported(
        self, report: Report, stage: Stage, session: AgentSession, launch: AgentLaunch
    ) -> AttemptEnd:
        """A stage report ends the attempt: verified by the daemon's gates when the stage has
        them, with the workspace's git facts when it has evidence."""
        ctx, current = self.ctx, self.current
        verification = None
        if stage.verify and report.outcome is StageOutcome.DONE:

            def fix_turn(what: str, prompt: str) -> Awaitable[object]:
                return self.turn(session, what, prompt, f"{current.identifier}: {current.title}")

            report, verification = await _verify(
                stage, report, current, fix_turn, launch, self.workspace_env, self.settings,
                self.take_report, ctx.masker,
                contained=lambda: _check_cwd(ctx.workspaces, self.workspace),
                tracer=ctx.tracer, parent=self.root,
            )  # fmt: skip
            if ctx.memory is not None:
                await _record_gate_lessons(ctx.memory, verification, stage, current)
        facts = None
        if (
            stage.evidence
            and report.outcome is StageOutcome.DONE
            and (verification is None or verification.passed)
        ):
            facts = await workspace_facts(
                self.workspace.path,
                base_ref=self.settings.workspace.base_ref,
                start_commit=self.workspace.base,
                env=self.workspace_env,
                git=ctx.workspaces.git,
            )
            if facts is not None and facts.head is not None:
                facts = await _with_merges(facts, ctx, self.workspace, self.workspace_env)
        self.log.info("worker done", reason=f"reported {report.outcome.value}")
        return await self.finish(AttemptEnd(report=report, verification=verification, facts=facts))

    async def _before_workspace_ends(self, end: AttemptEnd | None) -> AttemptEnd | None:
        """A `done` hand-off from a workspace that ends with the run (a pod's), once the agent
        has stopped: every process the run left there is ended (none may read the push's
        environment), the branch's diff is kept for the review page, and, when the stage
        publishes, the branch is pushed now, while the workspace is there: its publication
        opens the pull request from it."""
        ctx, stage, repository = self.ctx, self.stage, self.settings.repository
        report, facts = (end.report, end.facts) if end is not None else (None, None)
        if (
            end is None
            or ctx.workspaces.outlives_run
            or stage is None
            or report is None
            or report.outcome is not StageOutcome.DONE
            or (end.verification is not None and not end.verification.passed)
        ):
            return end
        await ctx.workspaces.end_leftovers()
        if facts is not None and facts.base is not None:
            await ctx.workspaces.keep_for_review(
                self.issue.identifier, self.workspace, facts.base, self.workspace_env
            )
        if stage.publish is None or repository is None:
            return end
        pushed = await push_before_end(
            repository, self.workspace.path, facts.head if facts is not None else None,
            base=stage.publish.base, git=ctx.workspaces.git, env=self.workspace_env,
            masker=ctx.masker, canaries=ctx.canaries or (self.marks.canary,),
        )  # fmt: skip
        return dataclasses.replace(end, pushed=pushed)

    # Finish

    async def finish(self, end: AttemptEnd) -> AttemptEnd:
        """The end, with the ticket's footprint as the attempt leaves it."""
        known_plan = self.variables.plan if self.variables is not None else None
        plan = end.report.plan if end.report is not None and end.report.plan else known_plan
        changed = await _changed(self.ctx, self.workspace, self.workspace_env)
        footprint = Footprint(self.issue.identifier, files_named(plan), changed)
        return dataclasses.replace(end, footprint=footprint)

    async def close(self) -> None:
        if self.model_grant is not None and self.model_gateway is not None:
            self.model_gateway.revoke(self.model_grant)  # at once: not another model call
        if self.grant is not None and self.ctx.tool_server is not None:
            self.ctx.tool_server.revoke(self.grant)  # the session is over: its token opens nothing
        try:
            await self.ctx.workspaces.after_run(self.workspace)
        finally:
            await self.resources.aclose()


async def _verify(
    stage: Stage,
    report: Report,
    issue: Issue,
    fix_turn: Callable[[str, str], Awaitable[object]],
    launch: AgentLaunch,
    gate_env: Mapping[str, str],
    settings: Settings,
    take_report: Callable[[], Report | None],
    masker: SecretMasker,
    *,
    contained: Callable[[], None] = lambda: None,
    tracer: Tracer = NO_TRACER,
    parent: Span | None = None,
) -> tuple[Report, Verification]:
    """Run the stage's gates after a `done` report; while they fail and fix turns are left,
    give the agent a fix turn on the same thread with what failed, then run them again.
    Returns the report that stands (a fix turn may report anew, `blocked` ends it) and every
    round that ran."""
    rounds: list[GateRound] = []
    fix_turns = 0
    take_report()
    while True:
        after = after_gates(
            rounds, fix_turns, report, max_fix_turns=stage.max_fix_turns,
            identifier=issue.identifier,
        )  # fmt: skip
        if after.step is GateStep.DONE:
            break
        if after.step is GateStep.RUN_GATES:
            contained()  # the agent may have swapped its workspace for a link: never run there
            with span(tracer, "symphony.gates", parent, {"symphony.round": len(rounds) + 1}) as ran:
                rounds.append(await run_gates(
                    stage.verify, cwd=launch.workspace, env=gate_env,
                    default_timeout_ms=settings.hooks.timeout_ms,
                    output_chars=stage.verify_output_chars, masker=masker, host=launch.host,
                ))  # fmt: skip
                ran.set("symphony.gates.failed", ",".join(r.name for r in rounds[-1].failures))
            continue
        log.info("verification failed, fix turn", fix_turn=after.fix_turn, gates=[
            r.name for r in rounds[-1].failures
        ])  # fmt: skip
        await fix_turn(f"fix turn {after.fix_turn}", after.prompt)
        fix_turns += 1
        report = take_report() or report
    verification = Verification(tuple(rounds))
    log.info(
        "verification passed" if verification.passed else "verification gave up",
        rounds=len(rounds),
        fix_turns=verification.fix_turns,
    )
    return report, verification


async def stage_context(
    tracker: Tracker, issue: Issue, stage: Stage, trust: TrustSettings
) -> StageContext:
    """The stage-mode prompt variables: the newest plan the daemon posted (as a person may have
    edited it since) and every comment, oldest first, each quoted under its author's name
    (an untrusted author's labelled so, or left out: `core.trust`)."""
    comments = await tracker.list_comments(issue)
    plan = None
    for comment in comments:
        marker = marker_of(comment.body)
        if marker is not None and marker[0] == "plan":
            plan = unmarked(comment.body)
    # A long discussion must not make a prompt of megabytes: the newest comments matter most.
    rows = (_comment_row(comment, trust) for comment in comments[-MAX_PROMPT_COMMENTS:])
    return StageContext(stage.name, plan, tuple(row for row in rows if row is not None))


def _comment_row(comment: Comment, trust: TrustSettings) -> dict[str, Any] | None:
    """One comment for `{{ comments }}`: its author as a plain handle, its body quoted."""
    body = _bounded(unmarked(comment.body), MAX_COMMENT_CHARS)
    if marker_of(comment.body) is not None:
        quoted_body: str | None = quoted(body, "comment posted by the daemon")
    else:
        quoted_body = material(body, "comment", comment.author, comment.author_member, trust)
    if quoted_body is None:
        return None
    return {**comment.to_template(), "author": handle(comment.author), "body": quoted_body}


def _redacting(sink: EventSink, canary: str) -> EventSink:
    """`sink` with the run's canary blotted out of what an event says: events reach the log,
    the store, the dashboard and an escalation's "last output"."""

    def report(event: AgentEvent) -> None:
        if event.message and canary in event.message:
            event = dataclasses.replace(event, message=redacted(event.message, canary))
        sink(event)

    return report


async def _withheld(arguments: Any) -> ToolResult:
    return ToolResult.failure(
        "not_allowed", "in this workflow the daemon moves tickets: call report_outcome instead"
    )


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"


def unforged(arguments: Any) -> Any:
    """An agent's tool arguments with no text that reads as the daemon's own marker: what it
    writes on the ticket is never taken for a comment of the daemon's (`core.markers`)."""
    if isinstance(arguments, dict):
        return {k: unforgeable(v) if isinstance(v, str) else v for k, v in arguments.items()}
    return arguments


async def _follow_up(
    tracker: Tracker, arguments: Any, states: Sequence[str], parent: Issue, masker: SecretMasker
) -> ToolResult:
    parsed = parse_follow_up(arguments, states)
    if isinstance(parsed, ToolResult):
        return parsed
    title, description, blocked_by, state = parsed
    try:
        async with asyncio.timeout(TOOL_TIMEOUT_S):
            created = await tracker.create_issue(
                NewTicket(title, description, state, blocked_by, parent)
            )
    except TimeoutError:
        return ToolResult.failure(
            "tool_timeout", f"creating the ticket took over {TOOL_TIMEOUT_S:.0f}s"
        )
    except TrackerError as exc:
        return ToolResult.failure(exc.category, masker.mask(exc.message))
    log.info("follow-up created", created=created.identifier, blocked_by=list(blocked_by) or None)
    return ToolResult(
        True,
        {
            "identifier": created.identifier,
            "state": created.state,
            "url": created.url,
            "blocked_by": [b.identifier for b in created.blocked_by],
        },
    )


async def _refresh(tracker: Tracker, issue_id: str) -> list[Issue]:
    try:
        return await tracker.fetch_issues_by_ids([issue_id])
    except TrackerError as exc:
        wait = exc.retry_after_s
        if exc.category != TRACKER_RATE_LIMITED or wait is None or wait > RATE_LIMIT_WAIT_MAX_S:
            raise
        log.info("issue refresh rate limited; waiting for the reset", wait_s=round(wait, 1))
        await asyncio.sleep(wait)
        return await tracker.fetch_issues_by_ids([issue_id])


async def _with_merges(
    facts: WorkspaceFacts, ctx: AttemptContext, workspace: Workspace, env: Mapping[str, str]
) -> WorkspaceFacts:
    """The facts with whether the branch merges onto its base branch and which other open
    tickets' branches it conflicts with."""
    base_ref = ctx.settings.workspace.base_ref
    target = (base_ref, base_ref) if base_ref else await ctx.workspaces.merge_target()
    others = await ctx.workspaces.peer_paths(
        [identifier for identifier in ctx.open_tickets() if identifier != workspace.identifier]
    )
    merge, conflicts = await merge_checks(
        workspace.path, base=target, others=others, env=env, git=ctx.workspaces.git
    )
    return dataclasses.replace(facts, merge=merge, conflicts_with=conflicts)


async def _changed(
    ctx: AttemptContext, workspace: Workspace, env: Mapping[str, str]
) -> frozenset[str]:
    """The files the ticket's branch changed, asked where its workspace is."""
    return await changed_files(
        workspace.path, _base(ctx.settings, workspace), env, ctx.workspaces.git
    )


def _base(settings: Settings, workspace: Workspace) -> str | None:
    """What the ticket's changes are measured from: `workspace.base_ref`, else where the
    workspace started."""
    return settings.workspace.base_ref or workspace.base


async def _record_learning(memory: Memory, arguments: Any, issue: Issue) -> ToolResult:
    parsed = parse_learning(arguments)
    if isinstance(parsed, ToolResult):
        return parsed
    topic, text, files = parsed
    try:
        note = await asyncio.to_thread(
            memory.record, topic, text, ticket=issue.identifier, labels=issue.labels, files=files
        )
    except OSError as exc:
        log.warning("learning not recorded", error=str(exc))
        return ToolResult.failure("memory_unavailable", f"the note was not saved: {exc.strerror}")
    log.info("learning recorded", topic=note.topic, note=note.path.name)
    return ToolResult(True, {"recorded": note.path.name, "topic": note.topic})


async def _record_gate_lessons(
    memory: Memory, verification: Verification, stage: Stage, issue: Issue
) -> None:
    """The daemon's own notes: each gate that failed, and how the fix went."""
    for topic, text in gate_lessons(verification, stage.name):
        try:
            await asyncio.to_thread(
                memory.record, topic, text, ticket=issue.identifier, labels=issue.labels,
                source="daemon",
            )  # fmt: skip
        except OSError as exc:
            log.warning("gate lesson not recorded", error=str(exc))
            return


def _render(
    template: str,
    issue: Issue,
    attempt: int | None,
    stage: StageContext | None = None,
    memory: str | None = None,
) -> str:
    try:
        return render_material(template, issue, attempt, stage, memory=memory)
    except SymphonyError as exc:
        raise AttemptFailed(_failure("prompt", FailureReason.PROMPT, exc)) from None


def _check_cwd(workspaces: Workspaces, workspace: Workspace) -> None:
    try:
        workspaces.check_agent_cwd(workspace)
    except SymphonyError as exc:
        raise AttemptFailed(_failure("workspace", FailureReason.WORKSPACE, exc)) from None


def _with_tools(launch: AgentLaunch, grant: Grant) -> AgentLaunch:
    """The launch with its session's tool grant, at the address the agent reaches the tool
    server at from its host (on an SSH host, a forward on the run's own connection)."""
    host, there = launch.host.reach(grant.url)
    return dataclasses.replace(launch, host=host, tool_grant=dataclasses.replace(grant, url=there))


def _port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, f"the tool server's address {url} names no port"
    return port


async def _step(what: str, reason: FailureReason, awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except SymphonyError as exc:
        raise AttemptFailed(_failure(what, reason, exc)) from None


def _failure(step: str, reason: FailureReason, exc: SymphonyError) -> Failure:
    # A lost SSH host fails whatever step it happens in; it is counted as what it is.
    if exc.category == HOST_UNREACHABLE:
        reason = FailureReason.HOST_UNREACHABLE
    limit = exc.limit if isinstance(exc, AgentError) else None
    return Failure(step, exc.message, exc.category, reason, limit=limit)


_QUIET_EVENTS = frozenset({EventKind.NOTIFICATION, EventKind.TOKEN_USAGE, EventKind.RATE_LIMITS})
"""Too frequent for the log: the snapshot and the store keep what they say."""


def log_agent_event(event: AgentEvent) -> None:
    """Log an agent's lifecycle events; issue context comes from the worker's context."""
    if event.kind in _QUIET_EVENTS:
        return
    log.info(
        f"agent {event.kind}",
        session_id=event.session_id,
        thread_id=event.thread_id,
        pid=event.pid,
        detail=event.message,
    )

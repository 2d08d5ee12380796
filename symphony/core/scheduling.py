"""Scheduling decisions: which ticket runs, what a tracker change means for a run, when to retry.

Every function here is synchronous and does no I/O. Each takes the scheduler state, its input
(tracker snapshots, a worker's exit, an agent event), the settings in force and the monotonic time
`now` in seconds, updates the state and returns the effects the orchestrator shell must perform.
Tests drive them with a fake clock.

One rule keeps runs and slots honest: a running entry is removed only when its worker has really
exited. Stopping a run marks the entry with a `stop_reason` and asks the shell to stop the worker;
the claim, the slot and the workspace stay until `on_worker_exit`, which then releases the claim,
schedules the retry or removes the workspace as the reason requires.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from symphony.base.events import RESUMED, AgentEvent, EventKind
from symphony.base.hosts import HOST_UNREACHABLE, LOCAL
from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.config.pricing import Price, Pricing
from symphony.config.sections import AgentSettings, OverlapMode, Settings, TrackerSettings
from symphony.config.stages import Outcome, Report, Stage
from symphony.core.costs import UNKNOWN_MODEL, Spend, budget_exceeded_text, day_key, usd
from symphony.core.evidence import WorkspaceFacts, build_evidence
from symphony.core.footprint import Footprint, overlap
from symphony.core.outcomes import CLOSED, ESCALATED, GATE, HANDOFF, REWORK, OutcomeRecord
from symphony.core.transitions import PlannedComment, TransitionPlan, plan_transition
from symphony.core.verification import Verification

CONTINUATION_DELAY_S = 1.0
FAILURE_BASE_DELAY_S = 10.0
RECENT_EVENTS = 20


class StopReason(enum.Enum):
    TERMINAL = "terminal"
    INACTIVE = "inactive"
    UNROUTABLE = "unroutable"
    MISSING = "missing"
    STALLED = "stalled"
    SHUTDOWN = "shutdown"
    STAGE_CHANGED = "stage_changed"
    """Stage mode: a person moved the ticket to a state of another stage."""
    BUDGET = "budget"
    """The ticket spent its budget window (`budget.per_ticket_usd`)."""


class MovePhase(enum.Enum):
    """Where a run's own tool call that moves its ticket is: the worker reports it starting
    before the write is sent, so no read can see the new state before the daemon knows."""

    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RetryKind(enum.Enum):
    CONTINUATION = "continuation"
    FAILURE = "failure"


TRANSITION_BASE_DELAY_S = 5.0
"""A failed tracker write is tried again after 5 s, doubling up to `agent.max_retry_backoff_ms`."""


@dataclass(slots=True)
class RecentEvent:
    at_wall: datetime
    kind: str
    message: str | None


@dataclass(slots=True)
class RunningEntry:
    issue: Issue
    attempt: int | None
    started_at: float
    started_at_wall: datetime
    session_id: str | None = None
    thread_id: str | None = None
    pid: int | None = None
    last_event: str | None = None
    last_event_at: float | None = None
    last_event_at_wall: datetime | None = None
    last_message: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    turn_count: int = 0
    stop_reason: StopReason | None = None
    recent_events: deque[RecentEvent] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    stage: str | None = None
    """The stage this run works in (stage mode), captured at dispatch."""
    resumed: bool = False
    """It asked to continue a thread a restart interrupted; its token fields start at that
    thread's totals until the session says whether it really resumed."""
    model: str | None = None
    """The model the agent said its thread runs."""
    price: Price | None = None
    """The model's price, fixed when the session started; None: its cost is unknown."""
    cost_usd: float = 0.0
    """What this run's usage cost (of the usage that had a price)."""
    unpriced_tokens: int = 0
    """Tokens of this run without a price: its cost is unknown, not zero."""
    agent_kind: str = "codex"
    """Which agent runs it; its block's `stall_timeout_ms` applies."""
    cache_write_tokens: int = 0
    """Of its input, what was written to the prompt cache (priced apart; not kept)."""
    agent_cost_usd: float | None = None
    """The cost the agent reported for its process, if it reports one."""
    host: str = LOCAL
    """Where it runs: `local`, or an SSH worker host's name."""
    remote_pgid: int | None = None
    """Its agent's process group on that host, once reported (for a restart's cleanup)."""
    own_moves: list[str | None] = field(default_factory=list)
    """The states its own tool calls are moving, or moved, the ticket to (normalized), until a
    read shows the move; None for a call that can move it without naming a state (a GraphQL
    mutation)."""
    own_states: set[str] = field(default_factory=set)
    """States reads showed the ticket in after its own calls moved it (normalized)."""

    @property
    def identifier(self) -> str:
        return self.issue.identifier


@dataclass(slots=True)
class RetryEntry:
    issue_id: str
    identifier: str
    attempt: int
    due_at: float
    kind: RetryKind
    error: str | None = None
    url: str | None = None
    resume_thread_id: str | None = None
    """A run a restart interrupted: the thread to continue, when the agent can resume it."""
    last_message: str | None = None
    """What that run's agent last said, for a new thread when the old one cannot resume."""
    resume_tokens: tuple[int, int, int, int] = (0, 0, 0, 0)
    """The interrupted thread's totals (input, output, total, cached input) when it stopped: a
    resumed thread reports from there on, so only what grows beyond them is new."""


@dataclass(slots=True)
class StageProgress:
    """Turns started in the stage a ticket is in, across its attempts (the progress guard)."""

    stage: str
    turns: int = 0
    entered_at: datetime | None = None
    """When the ticket was first dispatched into the stage (time to hand-off)."""


@dataclass(slots=True)
class PendingTransition:
    """A stage outcome the daemon has decided and is writing to the tracker.

    The ticket stays claimed until the move is confirmed by reading it back, so it is never
    dispatched while the write is in flight; a failed write is tried again with backoff.
    """

    issue: Issue
    plan: TransitionPlan
    key: str
    """Idempotency key of the transition's comments: a retried write never posts twice."""
    turns_used: int
    attempts: int = 0
    due_at: float = 0.0
    in_flight: bool = False
    error: str | None = None

    @property
    def identifier(self) -> str:
        return self.issue.identifier


@dataclass(slots=True)
class TicketTotals:
    """Tokens, cost and agent time of one ticket across all its attempts, stages and restarts,
    and where it stands against its budget."""

    identifier: str
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    seconds: float = 0.0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    """The cost of its priced usage."""
    unpriced_tokens: int = 0
    """Tokens of models without a price: while any, its cost is unknown."""
    cost_by_stage: dict[str, float] = field(default_factory=dict)
    """Cost per stage (`run` in spec mode), for the budget comments."""
    budget_base_usd: float = 0.0
    """Its cost when the current budget window opened (a person renews it by moving the
    ticket back after the daemon stopped it)."""
    budget_window: int = 1
    budget_warned: bool = False
    budget_exceeded: bool = False

    @property
    def known_cost_usd(self) -> float | None:
        """The cost, or None while some of its tokens have no price."""
        return None if self.unpriced_tokens else self.cost_usd

    @property
    def window_spent_usd(self) -> float:
        return self.cost_usd - self.budget_base_usd


@dataclass(slots=True)
class Totals:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    ended_seconds: float = 0.0
    """Runtime of sessions that have ended; live ones are added at snapshot time."""


@dataclass(slots=True)
class SchedulerState:
    running: dict[str, RunningEntry] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    retry_attempts: dict[str, RetryEntry] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)
    kept_workspaces: dict[str, str] = field(default_factory=dict)
    """Released issues whose workspace was kept (id -> identifier), watched until terminal."""
    totals: Totals = field(default_factory=Totals)
    rate_limits: Mapping[str, Any] | None = None
    stage_progress: dict[str, StageProgress] = field(default_factory=dict)
    transitions: dict[str, PendingTransition] = field(default_factory=dict)
    transition_seq: int = 0
    ticket_totals: dict[str, TicketTotals] = field(default_factory=dict)
    changed_totals: set[str] = field(default_factory=set)
    """Tickets whose totals changed since the store last saved them (kept small, per pass)."""
    handed_off: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Stage mode: the review states (normalized) the daemon handed each ticket to, in order."""
    in_review: int = 0
    """Stage mode: tickets in review states at the last poll (`observe_review_queue`)."""
    new_outcomes: list[OutcomeRecord] = field(default_factory=list)
    """Outcome records not yet in the store (the store takes them at its next save)."""
    daily_costs: dict[str, Spend] = field(default_factory=dict)
    """The fleet's spend per UTC day (`YYYY-MM-DD`)."""
    model_costs: dict[str, Spend] = field(default_factory=dict)
    """The fleet's spend per model (`unknown` when the agent named none)."""
    footprints: dict[str, Footprint] = field(default_factory=dict)
    """The files each open ticket touches or will touch, as its last run left them
    (`agent.overlap`)."""
    workspace_hosts: dict[str, str] = field(default_factory=dict)
    """The SSH host each ticket's workspace is on (tickets on this machine are not listed)."""
    host_health: dict[str, HostHealth] = field(default_factory=dict)
    """SSH hosts that failed to connect lately."""


@dataclass(slots=True)
class HostHealth:
    failures: int = 0
    """Connection failures in a row."""
    down_until: float | None = None
    """Marked down until then (monotonic): no new work starts there."""
    error: str | None = None
    """The last connection failure, for people."""

    def is_down(self, now: float | None) -> bool:
        return self.down_until is not None and (now is None or now < self.down_until)


# Effects: what the shell must do. Plain values, compared in tests.


@dataclass(frozen=True, slots=True)
class StartWorker:
    issue: Issue
    attempt: int | None
    stage: str | None = None
    turns_used: int = 0
    """Turns already started in `stage` (the progress guard counts across attempts)."""
    resume_thread_id: str | None = None
    last_message: str | None = None
    agent_kind: str = "codex"
    """Which agent runs it (`agent_kind_for`)."""
    host: str = LOCAL
    """Where it runs (`worker.ssh_hosts`), its workspace there."""


@dataclass(frozen=True, slots=True)
class StopWorker:
    issue_id: str
    identifier: str
    reason: StopReason
    detail: str


@dataclass(frozen=True, slots=True)
class RemoveWorkspace:
    identifier: str
    host: str = LOCAL


@dataclass(frozen=True, slots=True)
class HostMarkedDown:
    """An SSH host failed to connect `failures` times in a row: no new work for `cooloff_s`."""

    host: str
    failures: int
    cooloff_s: float
    error: str


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    entry: RetryEntry
    delay_s: float


@dataclass(frozen=True, slots=True)
class Released:
    issue_id: str
    identifier: str
    reason: str


@dataclass(frozen=True, slots=True)
class PerformTransition:
    """Write the pending transition of `issue_id` to the tracker (comments, move, read-back)."""

    issue_id: str
    identifier: str
    target: str
    attempt: int


@dataclass(frozen=True, slots=True)
class TransitionDone:
    """A transition was confirmed, or given up because a person moved the ticket meanwhile."""

    issue_id: str
    identifier: str
    from_stage: str
    target: str
    outcome: str
    confirmed: bool


@dataclass(frozen=True, slots=True)
class TransitionRetry:
    issue_id: str
    identifier: str
    target: str
    attempt: int
    delay_s: float
    error: str


@dataclass(frozen=True, slots=True)
class PostComment:
    """Post a comment on the ticket once: `kind` and `key` make its marker, so a repeat is a
    no-op (the budget warning)."""

    issue: Issue
    kind: str
    key: str
    body: str


Effect = (
    StartWorker
    | HostMarkedDown
    | PostComment
    | StopWorker
    | RemoveWorkspace
    | RetryScheduled
    | Released
    | PerformTransition
    | TransitionDone
    | TransitionRetry
)


class FailureReason(enum.Enum):
    """What kind of failure ended a run: the bounded label of `symphony_failures_total`."""

    WORKSPACE = "workspace"
    HOOK = "hook"
    PROMPT = "prompt"
    TRACKER = "tracker"
    """Reading the ticket's comments or the ticket itself during the run."""
    HOST_UNREACHABLE = "host_unreachable"
    AGENT_STARTUP = "agent_startup"
    AGENT_TURN = "agent_turn"
    """A turn or a fix turn failed, timed out or was cancelled, or the agent exited."""
    AGENT_STALLED = "agent_stalled"
    INTERNAL = "internal_error"


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a worker ended abnormally: the step that failed (`turn 2`, `prompt`, `workspace`,
    `agent startup`), the error's category when it had one (`turn_failed`,
    `response_timeout`), what a person reads, and the kind of failure it counts as."""

    step: str
    message: str
    category: str | None = None
    reason: FailureReason = FailureReason.INTERNAL

    def __str__(self) -> str:
        if self.category is None:
            return f"{self.step}: {self.message}"
        return f"{self.step}: {self.category}: {self.message}"


def failure_reason(entry: RunningEntry, result: WorkerExit) -> FailureReason | None:
    """What a worker's exit counts as among failures, or None when it is none: a run that
    ended well, or one the daemon stopped on purpose (the ticket moved, a shutdown, a budget).
    A stalled run counts as `agent_stalled`, whatever its worker said while being stopped."""
    if entry.stop_reason is StopReason.STALLED:
        return FailureReason.AGENT_STALLED
    if result.ok or entry.stop_reason is not None:
        return None
    return result.failure.reason if result.failure is not None else FailureReason.INTERNAL


@dataclass(frozen=True, slots=True)
class WorkerExit:
    """How a worker ended: `ok` after a normal turn loop, else `failure` says why.

    In stage mode a normal end may carry the agent's `report` (its last valid `report_outcome`
    in a turn that completed) or `stuck` (the stage's turn budget ran out without one).
    """

    ok: bool
    failure: Failure | None = None
    report: Report | None = None
    stuck: bool = False
    verification: Verification | None = None
    """The gates the daemon ran after a `done` report, round by round."""
    facts: WorkspaceFacts | None = None
    """The workspace's git facts, for the evidence of a hand-off."""
    footprint: Footprint | None = None
    """The files its plan names and its branch changed, as the run ended."""


# Eligibility and ordering


def polled_states(settings: Settings) -> tuple[str, ...]:
    """The states each poll reads: the active ones, and in stage mode the checkpoints too
    (Plan Review, Human Review, ...), for the board: where every ticket the workflow knows is."""
    states = settings.tracker.active_states
    if settings.machine is not None:
        states += settings.machine.checkpoint_states(settings.tracker.terminal_states)
    return states


def is_routable(issue: Issue, tracker: TrackerSettings) -> bool:
    """Adapter says dispatchable and every required label is present (blank ones never match)."""
    return issue.dispatchable and all(
        label and label in issue.labels for label in tracker.required_labels
    )


def has_required_fields(issue: Issue) -> bool:
    return all(
        isinstance(value, str) and value.strip()
        for value in (issue.id, issue.identifier, issue.title, issue.state)
    )


_LAST_PRIORITY = 5
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def dispatch_sort_key(issue: Issue) -> tuple[int, bool, datetime, str]:
    """Priority 1..4 first (ascending), then oldest `created_at` (null last), then identifier.

    Kept cheap: it runs for every candidate on every tick. Timestamps are always aware (the
    Issue guarantees it), so they compare directly.
    """
    priority = issue.priority
    created = issue.created_at
    return (
        priority if priority is not None and 1 <= priority <= 4 else _LAST_PRIORITY,
        created is None,
        created or _EPOCH,
        issue.identifier,
    )


def sort_for_dispatch(issues: Iterable[Issue]) -> list[Issue]:
    return sorted(issues, key=dispatch_sort_key)


def retry_delay_s(attempt: int, kind: RetryKind, agent: AgentSettings) -> float:
    """1 s after a clean exit; `min(10 s * 2^(attempt-1), max_retry_backoff_ms)` after a failure."""
    if kind is RetryKind.CONTINUATION:
        return CONTINUATION_DELAY_S
    exponent = max(attempt - 1, 0)
    cap_s = agent.max_retry_backoff_ms / 1000
    # Cap the exponent first so a long failure streak cannot overflow the float.
    delay: float = FAILURE_BASE_DELAY_S * 2 ** min(exponent, 64)
    return min(delay, cap_s)


def _running_in_state(state: SchedulerState, state_key: str) -> int:
    return sum(
        1 for entry in state.running.values() if normalize_state(entry.issue.state) == state_key
    )


def has_slot(state: SchedulerState, agent: AgentSettings, issue_state: str) -> bool:
    """A global slot and a slot for the issue's state (the per-state limit defaults to global)."""
    if len(state.running) >= agent.max_concurrent_agents:
        return False
    key = normalize_state(issue_state)
    limit = agent.max_concurrent_agents_by_state.get(key)
    return limit is None or _running_in_state(state, key) < limit


# Decisions


class Wait(enum.Enum):
    """Why a candidate is not dispatched now (see `describe_wait` for the words)."""

    INCOMPLETE = "incomplete"
    NOT_ACTIVE = "not_active"
    BLOCKED = "blocked"
    NOT_DISPATCHABLE = "not_dispatchable"
    MISSING_LABELS = "missing_labels"
    RUNNING = "running"
    CLAIMED = "claimed"
    STATE_LIMIT = "state_limit"
    NO_SLOT = "no_slot"
    REVIEW_FULL = "review_full"
    DAILY_BUDGET = "daily_budget"
    OVERLAP = "overlap"
    NO_HOST = "no_host"
    HOST_WAIT = "host_wait"


@dataclass(frozen=True, slots=True)
class Overlap:
    """Another open ticket that touches some of the same files."""

    identifier: str
    status: str
    """`running`, `in progress` (a retry or a move pending) or `waiting for a person`."""
    files: frozenset[str]

    def describe(self, limit: int = 3) -> str:
        names = sorted(self.files)
        shown = ", ".join(f"`{name}`" for name in names[:limit])
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        return f"{self.identifier} ({self.status}) on {shown}{more}"


def _holders(state: SchedulerState) -> dict[str, tuple[str, Footprint]]:
    """The tickets a new one must not overlap, with their status: claimed ones (running,
    retrying, being moved) with any files known, and released ones whose workspace was kept
    with changes on their branch (in review, or parked by a person)."""
    holders: dict[str, tuple[str, Footprint]] = {}
    for issue_id, footprint in state.footprints.items():
        if issue_id in state.running:
            status = "running"
        elif issue_id in state.claimed:
            status = "in progress"
        elif issue_id in state.kept_workspaces and footprint.changed:
            status = "waiting for a person"
        else:
            continue
        if footprint.files:
            holders[issue_id] = (status, footprint)
    return holders


def overlaps_of(
    issue: Issue, state: SchedulerState, holders: Mapping[str, tuple[str, Footprint]]
) -> list[Overlap]:
    """The open tickets whose files overlap the ones this ticket touches or plans to."""
    mine = state.footprints.get(issue.id)
    if mine is None or not mine.files:
        return []
    found = []
    for other_id, (status, footprint) in holders.items():
        if other_id == issue.id:
            continue
        shared = overlap(mine.files, footprint.files)
        if shared:
            found.append(Overlap(footprint.identifier, status, shared))
    return sorted(found, key=lambda o: o.identifier)


class _HostSlots:
    """The SSH hosts' load during one decision: which host a ticket would run on, or why it
    waits for one. Without `worker.ssh_hosts` everything runs here."""

    def __init__(self, state: SchedulerState, settings: Settings, now: float | None) -> None:
        self._worker = settings.worker
        self._state = state
        self._now = now
        fallback = settings.agent.max_concurrent_agents
        self._capacity = {h.name: self._worker.capacity(h) or fallback for h in self._worker.hosts}
        self.load = {host.name: 0 for host in self._worker.hosts}
        for entry in state.running.values():
            if entry.host in self.load:
                self.load[entry.host] += 1

    def is_down(self, name: str) -> bool:
        health = self._state.host_health.get(name)
        return health is not None and health.is_down(self._now)

    def usable(self, name: str) -> bool:
        return not self.is_down(name) and self.load[name] < self._capacity[name]

    def choose(self, issue_id: str) -> tuple[str | None, Wait | None]:
        """The host for the ticket: the one holding its workspace when it can take it (or,
        with `worker.retry_on_same_host`, only that one), else the least loaded one."""
        if not self._worker.hosts:
            return LOCAL, None
        preferred = self._state.workspace_hosts.get(issue_id)
        if preferred in self.load:
            if self.usable(preferred):
                return preferred, None
            if self._worker.retry_on_same_host:
                return None, Wait.HOST_WAIT
        options = [host.name for host in self._worker.hosts if self.usable(host.name)]
        if not options:
            return None, Wait.NO_HOST
        return min(options, key=lambda name: self.load[name] / self._capacity[name]), None

    def take(self, name: str) -> None:
        if name in self.load:
            self.load[name] += 1


def _plan(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    wall: datetime | None = None,
    overlaps: dict[str, list[Overlap]] | None = None,
    now: float | None = None,
    hosts_chosen: dict[str, str] | None = None,
) -> Iterator[tuple[Issue, Wait | None]]:
    """Each candidate in dispatch order with why it waits, or None when it would be dispatched.

    The plan counts the dispatches it proposes itself, so a caller may dispatch each proposal as
    it comes (`select_dispatches`) or only look (`explain_dispatch`); both see the same plan.
    Reasons are codes, not text: this runs for every candidate on every tick. `overlaps`, when
    given, receives the overlaps of each candidate held for them or dispatched despite them;
    `hosts_chosen` the host of each proposed dispatch (`now` tells which hosts are down).
    """
    tracker, agent = settings.tracker, settings.agent
    free = agent.max_concurrent_agents - len(state.running)
    # Per-state counts kept incrementally: one pass over `running` per tick, not per candidate.
    per_state: dict[str, int] = {}
    for entry in state.running.values():
        key = normalize_state(entry.issue.state)
        per_state[key] = per_state.get(key, 0) + 1
    review_full = _review_full(state, settings)
    spent_today = wall is not None and daily_budget_spent(state, settings, wall)
    holders = _holders(state) if agent.overlap is not OverlapMode.OFF and state.footprints else {}
    hosts = _HostSlots(state, settings, now)
    for issue in sort_for_dispatch(candidates):
        if not has_required_fields(issue):
            yield issue, Wait.INCOMPLETE
        elif not tracker.is_active(issue.state):
            yield issue, Wait.NOT_ACTIVE
        elif not issue.dispatchable:
            yield issue, Wait.BLOCKED if open_blockers(issue, tracker) else Wait.NOT_DISPATCHABLE
        elif not is_routable(issue, tracker):
            yield issue, Wait.MISSING_LABELS
        elif issue.id in state.running:
            yield issue, Wait.RUNNING
        elif issue.id in state.claimed:
            yield issue, Wait.CLAIMED
        elif free <= 0:
            yield issue, Wait.NO_SLOT
        elif spent_today:
            yield issue, Wait.DAILY_BUDGET
        elif review_full is not None and _adds_to_review(issue, state, settings, review_full):
            yield issue, Wait.REVIEW_FULL
        else:
            key = normalize_state(issue.state)
            limit = agent.max_concurrent_agents_by_state.get(key)
            if limit is not None and per_state.get(key, 0) >= limit:
                yield issue, Wait.STATE_LIMIT
                continue
            found = overlaps_of(issue, state, holders) if holders else []
            if found and overlaps is not None:
                overlaps[issue.id] = found
            if found and agent.overlap is OverlapMode.SERIALIZE:
                yield issue, Wait.OVERLAP
                continue
            host, host_wait = hosts.choose(issue.id)
            if host is None:
                yield issue, host_wait
                continue
            hosts.take(host)
            if hosts_chosen is not None:
                hosts_chosen[issue.id] = host
            per_state[key] = per_state.get(key, 0) + 1
            free -= 1
            footprint = state.footprints.get(issue.id)
            if agent.overlap is not OverlapMode.OFF and footprint is not None and footprint.files:
                holders[issue.id] = ("starting now", footprint)  # later candidates see it
            yield issue, None


def _review_full(state: SchedulerState, settings: Settings) -> frozenset[str] | None:
    """The review states when `agent.max_in_review` is reached, else None."""
    limit, machine = settings.agent.max_in_review, settings.machine
    if limit is None or machine is None or state.in_review < limit:
        return None
    return frozenset(
        normalize_state(s) for s in machine.review_states(settings.tracker.terminal_states)
    )


def _adds_to_review(
    issue: Issue, state: SchedulerState, settings: Settings, review: frozenset[str]
) -> bool:
    """A new ticket whose stage hands over to review; one handed to review before (rework,
    or on to its next stage) goes on."""
    assert settings.machine is not None
    stage = settings.machine.stage_for(issue.state)
    return (
        stage is not None
        and normalize_state(stage.on_success) in review
        and not state.handed_off.get(issue.id)
    )


def observe_review_queue(state: SchedulerState, polled: Iterable[Issue], settings: Settings) -> int:
    """Count the polled tickets that wait in a review state (the queue `max_in_review` caps)."""
    machine = settings.machine
    if machine is None:
        state.in_review = 0
        return 0
    review = {normalize_state(s) for s in machine.review_states(settings.tracker.terminal_states)}
    state.in_review = sum(1 for issue in polled if normalize_state(issue.state) in review)
    return state.in_review


def daily_budget_spent(state: SchedulerState, settings: Settings, wall: datetime) -> bool:
    """The fleet spent `budget.per_day_usd` today (UTC): no new work starts until tomorrow."""
    limit = settings.budget.per_day_usd
    today = state.daily_costs.get(day_key(wall))
    return limit is not None and today is not None and today.usd >= limit


def held_for_review(state: SchedulerState, candidates: Iterable[Issue], settings: Settings) -> int:
    """How many candidates wait only because the review queue is full."""
    return sum(1 for _, wait in _plan(state, candidates, settings) if wait is Wait.REVIEW_FULL)


def select_dispatches(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """Claim and start eligible candidates in dispatch order while slots remain."""
    effects: list[Effect] = []
    if len(state.running) >= settings.agent.max_concurrent_agents:
        return effects  # no slot: skip the sort, the common case of a busy fleet
    overlaps: dict[str, list[Overlap]] = {}
    hosts: dict[str, str] = {}
    for issue, wait in _plan(state, candidates, settings, wall, overlaps, now, hosts):
        if wait is None:
            effects.append(_dispatch(state, issue, None, now, wall, settings, host=hosts[issue.id]))
            if issue.id in overlaps:
                effects.append(_overlap_warning(issue, overlaps[issue.id]))
        elif wait is Wait.NO_SLOT:
            break  # every later candidate would wait for a slot too
    return effects


def _overlap_warning(issue: Issue, found: Sequence[Overlap]) -> PostComment:
    """`agent.overlap: warn`: one comment per set of overlapping tickets."""
    lines = "\n".join(f"- {o.describe(limit=10)}" for o in found)
    return PostComment(
        issue,
        "overlap",
        "+".join(o.identifier for o in found),
        f"Started although other open tickets touch the same files, so their branches may "
        f"conflict:\n\n{lines}\n\nWith `agent.overlap: serialize` the daemon would hold "
        "this ticket until they are done.",
    )


def explain_dispatch(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    wall: datetime | None = None,
    now: float | None = None,
) -> list[tuple[Issue, str | None]]:
    """What the next dispatch would do with each candidate, in order, without doing it: None
    for a dispatch, else why it waits, in words. With `wall`, today's spend counts too."""
    overlaps: dict[str, list[Overlap]] = {}
    return [
        (
            issue,
            None
            if wait is None
            else describe_wait(issue, wait, state, settings, overlaps.get(issue.id, ())),
        )
        for issue, wait in _plan(state, candidates, settings, wall, overlaps, now)
    ]


def open_blockers(issue: Issue, tracker: TrackerSettings) -> list[BlockerRef]:
    """The issue's blockers that are not in a terminal state (state unknown counts as open)."""
    return [b for b in issue.blocked_by if b.state is None or not tracker.is_terminal(b.state)]


def describe_wait(
    issue: Issue,
    wait: Wait,
    state: SchedulerState,
    settings: Settings,
    overlaps: Sequence[Overlap] = (),
) -> str:
    tracker, agent = settings.tracker, settings.agent
    if wait is Wait.OVERLAP:
        return "waits for " + "; ".join(o.describe() for o in overlaps) + " (agent.overlap)"
    if wait is Wait.NO_HOST:
        return (
            f"waits for a host: all {len(settings.worker.hosts)} SSH hosts are busy or down "
            "(worker.ssh_hosts)"
        )
    if wait is Wait.HOST_WAIT:
        host = state.workspace_hosts.get(issue.id, "?")
        health = state.host_health.get(host)
        why = "down" if health is not None and health.down_until is not None else "busy"
        return f"waits for {host}, where its workspace is ({why}; worker.retry_on_same_host)"
    if wait is Wait.BLOCKED:
        names = ", ".join(
            f"{b.identifier or b.id or '?'} ({b.state or 'state unknown'})"
            for b in open_blockers(issue, tracker)
        )
        return f"blocked by {names}"
    if wait is Wait.MISSING_LABELS:
        missing = [label for label in tracker.required_labels if label not in issue.labels]
        return "lacks required label " + ", ".join(repr(label) for label in missing)
    if wait is Wait.STATE_LIMIT:
        key = normalize_state(issue.state)
        limit = agent.max_concurrent_agents_by_state.get(key)
        return (
            f"waits for a slot: at most {limit} at once in {issue.state!r} "
            "(agent.max_concurrent_agents_by_state)"
        )
    if wait is Wait.NO_SLOT:
        return (
            f"waits for a slot: all {agent.max_concurrent_agents} agents busy "
            "(agent.max_concurrent_agents)"
        )
    if wait is Wait.CLAIMED:
        retry = state.retry_attempts.get(issue.id)
        return "waits for its retry" if retry is not None else "claimed"
    if wait is Wait.DAILY_BUDGET:
        return (
            f"waits for tomorrow (UTC): the fleet spent its {usd(settings.budget.per_day_usd)} "
            "for today (budget.per_day_usd)"
        )
    if wait is Wait.REVIEW_FULL:
        return (
            f"waits for reviewers: {state.in_review} tickets wait for review "
            f"(agent.max_in_review: {agent.max_in_review})"
        )
    return {
        Wait.INCOMPLETE: "lacks an id, identifier, title or state",
        Wait.NOT_ACTIVE: f"state {issue.state!r} is not active",
        Wait.NOT_DISPATCHABLE: "the tracker marks it not dispatchable (blocked there)",
        Wait.RUNNING: "already running",
    }[wait]


def _dispatch(
    state: SchedulerState,
    issue: Issue,
    attempt: int | None,
    now: float,
    wall: datetime,
    settings: Settings,
    retry: RetryEntry | None = None,
    *,
    host: str = LOCAL,
) -> StartWorker:
    stage = settings.machine.stage_for(issue.state) if settings.machine is not None else None
    state.retry_attempts.pop(issue.id, None)
    resume = retry.resume_thread_id if retry is not None else None
    last_message = retry.last_message if retry is not None else None
    kind = agent_kind_for(issue, stage, settings)
    entry = state.running[issue.id] = RunningEntry(
        issue=issue,
        attempt=attempt,
        started_at=now,
        started_at_wall=wall,
        stage=stage.name if stage is not None else None,
        resumed=resume is not None,
        agent_kind=kind,
        host=host,
    )
    if host != LOCAL:
        state.workspace_hosts[issue.id] = host
    if retry is not None and resume is not None:
        (
            entry.input_tokens,
            entry.output_tokens,
            entry.total_tokens,
            entry.cached_input_tokens,
        ) = retry.resume_tokens
    state.claimed.add(issue.id)
    state.kept_workspaces.pop(issue.id, None)
    totals = state.ticket_totals.get(issue.id)
    if totals is not None and totals.budget_exceeded:
        # The daemon stopped it at its budget and a person moved it back: one more window.
        totals.budget_base_usd = totals.cost_usd
        totals.budget_window += 1
        totals.budget_warned = totals.budget_exceeded = False
        state.changed_totals.add(issue.id)
    if stage is None:
        return StartWorker(
            issue, attempt, resume_thread_id=resume, last_message=last_message, agent_kind=kind,
            host=host,
        )  # fmt: skip
    progress = state.stage_progress.get(issue.id)
    if progress is None or progress.stage != stage.name:
        # A new entry into the stage starts the count again.
        progress = state.stage_progress[issue.id] = StageProgress(stage.name, entered_at=wall)
        if normalize_state(stage.on_success) in state.handed_off.get(issue.id, ()):
            # Back for more work in a stage that handed it to review before: a rework round.
            state.new_outcomes.append(
                OutcomeRecord(wall, REWORK, issue.id, issue.identifier, {"stage": stage.name})
            )
    return StartWorker(issue, attempt, stage.name, progress.turns, resume, last_message, kind, host)


AGENT_LABEL = "agent:"
"""With `agent.label_override`, a ticket labelled `agent:<kind>` runs on that agent."""


def agent_kind_for(issue: Issue, stage: Stage | None, settings: Settings) -> str:
    """The agent that runs this ticket now: a label `agent:<kind>` when the workflow lets
    labels choose (and names a kind it knows), else the stage's `agent`, else `agent.kind`."""
    if settings.agent.label_override:
        for label in issue.labels:
            if label.startswith(AGENT_LABEL):
                kind = label[len(AGENT_LABEL) :].strip()
                if kind in settings.agents:
                    return kind
    if stage is not None and stage.agent is not None:
        return stage.agent
    return settings.agent.kind


def detect_stalls(state: SchedulerState, settings: Settings, now: float) -> list[Effect]:
    """Stop runs with no agent activity for longer than their agent's `stall_timeout_ms`
    (<= 0: off)."""
    effects: list[Effect] = []
    for issue_id, entry in state.running.items():
        timeout_ms = _stall_timeout_ms(entry, settings)
        if entry.stop_reason is not None or timeout_ms <= 0:
            continue
        since = entry.last_event_at if entry.last_event_at is not None else entry.started_at
        idle_s = now - since
        if idle_s * 1000 > timeout_ms:
            entry.stop_reason = StopReason.STALLED
            effects.append(
                StopWorker(
                    issue_id,
                    entry.identifier,
                    StopReason.STALLED,
                    f"no agent activity for {idle_s:.0f}s (stall_timeout_ms={timeout_ms})",
                )
            )
    return effects


def apply_refresh(
    state: SchedulerState, refreshed: Sequence[Issue], requested: Iterable[str], settings: Settings
) -> list[Effect]:
    """Reconcile running entries with fresh tracker snapshots of the ids in `requested`."""
    tracker = settings.tracker
    by_id = {issue.id: issue for issue in refreshed}
    effects: list[Effect] = []
    for issue_id in requested:
        entry = state.running.get(issue_id)
        if entry is None or entry.stop_reason is not None:
            continue
        issue = by_id.get(issue_id)
        if issue is None:
            reason, detail = StopReason.MISSING, "no longer visible in the tracker"
        elif _moved_itself(entry, issue, tracker) and is_routable(issue, tracker):
            # Its agent is still in the turn that made the move: the tool's answer has to
            # reach the model, which may comment or link after it. The turn ends, and the
            # worker after it, as when any turn ends with the ticket no longer active.
            entry.issue = issue
            continue
        elif tracker.is_terminal(issue.state):
            reason, detail = StopReason.TERMINAL, f"state is terminal ({issue.state})"
        elif not tracker.is_active(issue.state):
            reason, detail = StopReason.INACTIVE, f"state is not active ({issue.state})"
        elif not is_routable(issue, tracker):
            reason, detail = (
                StopReason.UNROUTABLE,
                "no longer dispatchable or lacks a required label",
            )
        elif entry.stage is not None and _stage_name(settings, issue.state) != entry.stage:
            reason = StopReason.STAGE_CHANGED
            detail = f"moved to {issue.state}, stage {_stage_name(settings, issue.state)}"
        else:
            entry.issue = issue
            continue
        if issue is not None:
            entry.issue = issue
        entry.stop_reason = reason
        effects.append(StopWorker(issue_id, entry.identifier, reason, detail))
    return effects


def on_own_move(state: SchedulerState, issue_id: str, target: str | None, phase: MovePhase) -> None:
    """Note a run's own tool call moving its ticket to `target` (None: a call that may move it
    without naming a state). A call that failed moved nothing; one that started but never said
    how it ended may have, and stays noted."""
    entry = state.running.get(issue_id)
    if entry is None:
        return
    key = normalize_state(target) if target is not None else None
    if phase is MovePhase.STARTED:
        entry.own_moves.append(key)
    elif phase is MovePhase.FAILED and key in entry.own_moves:
        entry.own_moves.remove(key)


def _moved_itself(entry: RunningEntry, issue: Issue, tracker: TrackerSettings) -> bool:
    """Whether the state `issue` is in now is one the run's own tool calls moved it to.

    A noted call explains the first read that shows its state. An adapter spells a state the
    workflow does not configure its own way (a GitHub label `status:human-review` for `Human
    Review`), so an unconfigured state is explained by a call that named an unconfigured one;
    a call that named none explains any change. A configured state no call named is someone
    else's move, and stops the run as usual.
    """
    key = normalize_state(issue.state)
    if key in entry.own_states:
        return True
    if key == normalize_state(entry.issue.state):
        return False

    def configured(name: str) -> bool:
        return tracker.is_active(name) or tracker.is_terminal(name)

    for index, target in enumerate(entry.own_moves):
        if target == key or target is None or not (configured(target) or configured(issue.state)):
            del entry.own_moves[index]
            entry.own_states.add(key)
            return True
    return False


def _stage_name(settings: Settings, issue_state: str) -> str | None:
    if settings.machine is None:
        return None
    stage = settings.machine.stage_for(issue_state)
    return stage.name if stage is not None else None


def sweep_kept_workspaces(
    state: SchedulerState,
    refreshed: Sequence[Issue],
    requested: Iterable[str],
    settings: Settings,
    wall: datetime,
) -> list[Effect]:
    """Remove the kept workspace of a released issue once it turns terminal.

    A ticket handed off for review is released with its workspace kept; when a person later
    moves it to a terminal state, nothing is running to notice, so the workspace would wait for
    the next restart's cleanup. Watching released ids closes that gap. An issue that vanished
    or became active again is no longer watched (the latter is dispatched as usual).
    """
    by_id = {issue.id: issue for issue in refreshed}
    effects: list[Effect] = []
    for issue_id in requested:
        identifier = state.kept_workspaces.get(issue_id)
        if identifier is None:
            continue
        issue = by_id.get(issue_id)
        if issue is None or settings.tracker.is_active(issue.state):
            del state.kept_workspaces[issue_id]
            if issue is None:
                state.footprints.pop(issue_id, None)
        elif settings.tracker.is_terminal(issue.state):
            del state.kept_workspaces[issue_id]
            state.footprints.pop(issue_id, None)
            effects.append(_remove_workspace(state, issue_id, issue.identifier))
            _record_closed(state, issue, wall)
    return effects


def _record_closed(state: SchedulerState, issue: Issue, wall: datetime) -> None:
    """A ticket the daemon handed to review reached a terminal state: it was accepted, at once
    when no review state saw it twice."""
    handed = state.handed_off.pop(issue.id, None)
    if not handed:
        return
    totals = state.ticket_totals.get(issue.id)
    data = {
        "first_pass": len(set(handed)) == len(handed),
        "handoffs": len(handed),
        "state": issue.state,
        "tokens": totals.total_tokens if totals is not None else 0,
        "cost_usd": totals.known_cost_usd if totals is not None else None,
    }
    state.new_outcomes.append(OutcomeRecord(wall, CLOSED, issue.id, issue.identifier, data))


def stop_all(state: SchedulerState) -> list[Effect]:
    """Shutdown: stop every worker; nothing is retried afterwards."""
    effects: list[Effect] = []
    for issue_id, entry in state.running.items():
        # Runs already stopping keep their reason: a terminal ticket's workspace still goes.
        if entry.stop_reason is None:
            entry.stop_reason = StopReason.SHUTDOWN
            effects.append(StopWorker(issue_id, entry.identifier, StopReason.SHUTDOWN, "shutdown"))
    return effects


def on_worker_exit(
    state: SchedulerState, issue_id: str, result: WorkerExit, settings: Settings, now: float
) -> list[Effect]:
    """Remove the running entry and decide what follows: release, cleanup, or a retry; and
    what the run says of its SSH host's health."""
    entry = state.running.get(issue_id)
    effects = _after_exit(state, issue_id, result, settings, now)
    if entry is not None and entry.host != LOCAL:
        marked = _observe_host(state, entry.host, result, settings, now)
        if marked is not None:
            effects.insert(0, marked)
    return effects


def _observe_host(
    state: SchedulerState, host: str, result: WorkerExit, settings: Settings, now: float
) -> HostMarkedDown | None:
    """A run that reached its host clears the host's failures; one that could not counts, and
    `worker.ssh.max_failures` in a row mark the host down for `worker.ssh.cooloff_s`."""
    failure = result.failure
    if failure is None or failure.category != HOST_UNREACHABLE:
        state.host_health.pop(host, None)
        return None
    health = state.host_health.setdefault(host, HostHealth())
    health.failures += 1
    health.error = failure.message
    ssh = settings.worker.ssh
    if health.failures < ssh.max_failures:
        return None
    health.down_until = now + ssh.cooloff_s
    return HostMarkedDown(host, health.failures, ssh.cooloff_s, failure.message)


def _after_exit(
    state: SchedulerState, issue_id: str, result: WorkerExit, settings: Settings, now: float
) -> list[Effect]:
    entry = state.running.pop(issue_id, None)
    if entry is None:
        return []
    ran = max(now - entry.started_at, 0.0)
    state.totals.ended_seconds += ran
    _ticket_totals(state, entry).seconds += ran
    state.changed_totals.add(issue_id)
    if result.footprint is not None:
        _record_footprint(state, issue_id, result.footprint)
    if result.verification is not None:
        at = entry.started_at_wall + timedelta(seconds=ran)
        state.new_outcomes.extend(
            OutcomeRecord(
                at, GATE, issue_id, entry.identifier,
                {"gate": gate.name, "passed": gate.passed, "stage": entry.stage},
            )
            for round_ in result.verification.rounds
            for gate in round_.results
        )  # fmt: skip
    reason = entry.stop_reason
    if reason is StopReason.SHUTDOWN:
        state.claimed.discard(issue_id)
        return []
    if reason is StopReason.BUDGET:
        return [_budget_transition(state, entry, settings, now)]
    if reason in (
        StopReason.TERMINAL,
        StopReason.INACTIVE,
        StopReason.UNROUTABLE,
        StopReason.MISSING,
        StopReason.STAGE_CHANGED,
    ):
        state.claimed.discard(issue_id)
        state.stage_progress.pop(issue_id, None)
        effects: list[Effect] = [
            Released(issue_id, entry.identifier, f"run stopped: {reason.value}")
        ]
        if reason in (StopReason.TERMINAL, StopReason.MISSING):
            state.footprints.pop(issue_id, None)
        if reason is StopReason.TERMINAL:
            effects.append(_remove_workspace(state, issue_id, entry.identifier))
        elif reason not in (StopReason.MISSING, StopReason.STAGE_CHANGED):
            state.kept_workspaces[issue_id] = entry.identifier
        return effects
    if reason is None and result.ok:
        state.completed.add(issue_id)
        transition = _stage_outcome(state, entry, result, settings, now)
        if transition is not None:
            return [transition]
        return [_schedule_retry(state, entry.issue, 1, RetryKind.CONTINUATION, None, settings, now)]
    # A stalled run is a failure whatever its worker said while being stopped.
    if reason is StopReason.STALLED:
        error = "stalled: no agent activity"
    else:
        error = str(result.failure) if result.failure is not None else "worker failed"
    attempt = _next_attempt(entry.attempt)
    return [_schedule_retry(state, entry.issue, attempt, RetryKind.FAILURE, error, settings, now)]


def prune_footprints(state: SchedulerState, polled: Iterable[Issue]) -> None:
    """Forget the files of tickets the daemon no longer follows: not claimed, not kept, and
    not among the tickets the last poll saw (moved away by a person, say, then closed)."""
    if not state.footprints:
        return
    seen = {issue.id for issue in polled}
    for issue_id in list(state.footprints):
        if not (
            issue_id in seen
            or issue_id in state.claimed
            or issue_id in state.running
            or issue_id in state.kept_workspaces
        ):
            del state.footprints[issue_id]


def _remove_workspace(state: SchedulerState, issue_id: str, identifier: str) -> RemoveWorkspace:
    """Remove the ticket's workspace wherever it is; the daemon forgets where it was."""
    return RemoveWorkspace(identifier, state.workspace_hosts.pop(issue_id, LOCAL))


def _record_footprint(state: SchedulerState, issue_id: str, seen: Footprint) -> None:
    """What a run saw of the ticket's files: its newest plan's (or the last one known when it
    saw none) and its branch's changes now."""
    known = state.footprints.get(issue_id)
    planned = seen.planned or (known.planned if known is not None else frozenset())
    footprint = Footprint(seen.identifier, planned, seen.changed)
    if footprint.files:
        state.footprints[issue_id] = footprint
    else:
        state.footprints.pop(issue_id, None)


def _stage_outcome(
    state: SchedulerState, entry: RunningEntry, result: WorkerExit, settings: Settings, now: float
) -> PerformTransition | None:
    """The transition a finished stage run asks for, now pending (claim kept); None when the
    stage simply continues (spec mode, or no report with turns left)."""
    machine = settings.machine
    if machine is None or entry.stage is None:
        return None
    stage = machine.stage_named(entry.stage)
    if stage is None:
        return None  # a reload removed the stage: its tickets are judged afresh
    progress = state.stage_progress.get(entry.issue.id)
    turns = progress.turns if progress is not None and progress.stage == stage.name else 0
    plan = plan_transition(
        stage,
        result.report,
        stuck=result.stuck,
        turns_used=turns,
        last_message=entry.last_message,
        verification=result.verification,
        evidence=_evidence(state, entry, stage, result, turns),
    )
    if plan is None:
        return None
    review = {normalize_state(s) for s in machine.review_states(settings.tracker.terminal_states)}
    if plan.outcome is Outcome.DONE and normalize_state(plan.target) in review:
        plan = dataclasses.replace(plan, hands_off=True)
    return _pend(state, entry, plan, turns=turns, now=now)


def _pend(
    state: SchedulerState, entry: RunningEntry, plan: TransitionPlan, *, turns: int, now: float
) -> PerformTransition:
    """Keep `plan` pending, the ticket claimed, and start writing it."""
    state.transition_seq += 1
    state.transitions[entry.issue.id] = PendingTransition(
        issue=entry.issue,
        plan=plan,
        key=f"{plan.stage}-{state.transition_seq}",
        turns_used=turns,
        due_at=now,
        in_flight=True,
        attempts=1,
    )
    state.claimed.add(entry.issue.id)
    return PerformTransition(entry.issue.id, entry.identifier, plan.target, 1)


def _evidence(
    state: SchedulerState, entry: RunningEntry, stage: Stage, result: WorkerExit, turns: int
) -> dict[str, Any] | None:
    """The evidence bundle of a verified (or unverified) `done` in a stage with evidence."""
    report, verification = result.report, result.verification
    if (
        not stage.evidence
        or report is None
        or report.outcome is not Outcome.DONE
        or (verification is not None and not verification.passed)
    ):
        return None
    totals = state.ticket_totals.get(entry.issue.id) or TicketTotals(entry.identifier)
    handed = state.handed_off.get(entry.issue.id, ())
    return build_evidence(
        identifier=entry.identifier,
        stage=stage.name,
        target=stage.on_success,
        report=report,
        verification=verification,
        facts=result.facts,
        turns=turns,
        tokens=(totals.input_tokens, totals.output_tokens, totals.total_tokens),
        agent_seconds=totals.seconds,
        hand_off=handed.count(normalize_state(stage.on_success)) + 1,
        cost_usd=totals.known_cost_usd,
        agent=entry.agent_kind,
        model=entry.model,
    )


def _budget_transition(
    state: SchedulerState, entry: RunningEntry, settings: Settings, now: float
) -> PerformTransition:
    """A run stopped at its ticket's budget: to `budget.on_exceeded`, with the breakdown."""
    budget = settings.budget
    totals = _ticket_totals(state, entry)
    totals.budget_exceeded = True
    state.changed_totals.add(entry.issue.id)
    limit = budget.per_ticket_usd or 0.0
    body = budget_exceeded_text(
        totals.window_spent_usd, limit, budget.on_exceeded, totals.cost_usd, totals.cost_by_stage
    )
    plan = TransitionPlan(
        entry.stage or "run",
        Outcome.BUDGET_EXCEEDED,
        budget.on_exceeded,
        (PlannedComment("budget_exceeded", body),),
    )
    return _pend(state, entry, plan, turns=0, now=now)


def moves_from(pending: PendingTransition, settings: Settings) -> frozenset[str]:
    """The states (normalized) a pending transition still moves its ticket from: where the run
    found it and its stage's states (a budget stop: every active state). In any other state
    but the target a person moved the ticket meanwhile, and the daemon gives way."""
    states = {normalize_state(pending.issue.state)}
    machine = settings.machine
    stage = machine.stage_named(pending.plan.stage) if machine is not None else None
    if pending.plan.outcome is Outcome.BUDGET_EXCEEDED:
        states.update(normalize_state(s) for s in settings.tracker.active_states)
    elif stage is not None:
        states.update(normalize_state(s) for s in stage.states)
    return frozenset(states)


def due_transitions(state: SchedulerState, now: float) -> list[Effect]:
    """Start the writes of pending transitions whose retry is due."""
    effects: list[Effect] = []
    for issue_id, pending in state.transitions.items():
        if not pending.in_flight and pending.due_at <= now:
            pending.in_flight = True
            pending.attempts += 1
            effects.append(
                PerformTransition(
                    issue_id, pending.identifier, pending.plan.target, pending.attempts
                )
            )
    return effects


def on_transition_confirmed(
    state: SchedulerState,
    issue_id: str,
    *,
    moved: bool,
    wall: datetime,
    reason: str | None = None,
) -> list[Effect]:
    """The tracker shows the ticket in its target (`moved`), or a person moved it elsewhere
    first (`moved=False`): either way the daemon is done with it until a person acts."""
    pending = state.transitions.pop(issue_id, None)
    if pending is None:
        return []
    state.claimed.discard(issue_id)
    progress = state.stage_progress.pop(issue_id, None)
    if moved:
        _record_move(state, pending, progress, wall)
    # The workspace stays for the next stage (or the reviewer) until the ticket turns terminal.
    state.kept_workspaces[issue_id] = pending.identifier
    plan = pending.plan
    return [
        TransitionDone(
            issue_id, pending.identifier, plan.stage, plan.target, plan.outcome.value, moved
        ),
        Released(
            issue_id,
            pending.identifier,
            f"moved to {plan.target} ({plan.stage}: {plan.outcome.value})"
            if moved
            else reason or "moved by a person meanwhile",
        ),
    ]


def _record_move(
    state: SchedulerState,
    pending: PendingTransition,
    progress: StageProgress | None,
    wall: datetime,
) -> None:
    plan, issue_id = pending.plan, pending.issue.id
    if plan.hands_off:
        target = normalize_state(plan.target)
        before = state.handed_off.get(issue_id, ())
        state.handed_off[issue_id] = (*before, target)
        totals = state.ticket_totals.get(issue_id)
        entered = progress.entered_at if progress is not None else None
        data: dict[str, Any] = {
            "stage": plan.stage,
            "state": plan.target,
            "rework": target in before,
            "tokens": totals.total_tokens if totals is not None else 0,
        }
        if entered is not None:
            data["seconds"] = round(max((wall - entered).total_seconds(), 0.0), 1)
        state.new_outcomes.append(OutcomeRecord(wall, HANDOFF, issue_id, pending.identifier, data))
    elif plan.outcome is not Outcome.DONE:
        state.new_outcomes.append(
            OutcomeRecord(
                wall, ESCALATED, issue_id, pending.identifier,
                {"stage": plan.stage, "outcome": plan.outcome.value, "state": plan.target},
            )
        )  # fmt: skip


def on_transition_failed(
    state: SchedulerState, issue_id: str, error: str, settings: Settings, now: float
) -> list[Effect]:
    """The write failed: keep the claim and try again after a backoff."""
    pending = state.transitions.get(issue_id)
    if pending is None:
        return []
    exponent = max(pending.attempts - 1, 0)
    delay = min(
        TRANSITION_BASE_DELAY_S * 2 ** min(exponent, 64),
        max(settings.agent.max_retry_backoff_ms / 1000, TRANSITION_BASE_DELAY_S),
    )
    pending.in_flight = False
    pending.due_at = now + delay
    pending.error = error
    return [
        TransitionRetry(
            issue_id, pending.identifier, pending.plan.target, pending.attempts + 1, delay, error
        )
    ]


def _next_attempt(attempt: int | None) -> int:
    return (attempt or 0) + 1


def _schedule_retry(
    state: SchedulerState,
    issue: Issue,
    attempt: int,
    kind: RetryKind,
    error: str | None,
    settings: Settings,
    now: float,
) -> RetryScheduled:
    delay = retry_delay_s(attempt, kind, settings.agent)
    entry = RetryEntry(
        issue_id=issue.id,
        identifier=issue.identifier,
        attempt=attempt,
        due_at=now + delay,
        kind=kind,
        error=error,
        url=issue.url,
    )
    # Replacing the entry is what "cancel the old timer" means here: due times live in state.
    state.retry_attempts[issue.id] = entry
    state.claimed.add(issue.id)
    return RetryScheduled(entry, delay)


def due_retries(state: SchedulerState, now: float) -> list[RetryEntry]:
    """Retry entries whose time has come, oldest due first; they stay queued until handled."""
    return sorted(
        (entry for entry in state.retry_attempts.values() if entry.due_at <= now),
        key=lambda entry: (entry.due_at, entry.identifier),
    )


def on_retries_refreshed(
    state: SchedulerState,
    due: Sequence[RetryEntry],
    refreshed: Sequence[Issue] | None,
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """Re-dispatch, requeue or release each due retry given fresh snapshots (None: fetch failed)."""
    effects: list[Effect] = []
    tracker = settings.tracker
    by_id = {issue.id: issue for issue in refreshed} if refreshed is not None else {}
    hosts = _HostSlots(state, settings, now)
    for retry in due:
        if state.retry_attempts.get(retry.issue_id) is not retry:
            continue  # replaced or dispatched meanwhile
        del state.retry_attempts[retry.issue_id]
        if refreshed is None:
            effects.append(_requeue(state, retry, "retry refresh failed", settings, now))
            continue
        issue = by_id.get(retry.issue_id)
        if issue is None or not tracker.is_active(issue.state):
            state.stage_progress.pop(retry.issue_id, None)
        if issue is None:
            state.claimed.discard(retry.issue_id)
            effects.append(Released(retry.issue_id, retry.identifier, "no longer visible"))
        elif tracker.is_terminal(issue.state):
            state.claimed.discard(retry.issue_id)
            effects.append(Released(retry.issue_id, retry.identifier, f"terminal ({issue.state})"))
            effects.append(_remove_workspace(state, retry.issue_id, issue.identifier))
        elif not tracker.is_active(issue.state) or not is_routable(issue, tracker):
            state.claimed.discard(retry.issue_id)
            effects.append(
                Released(retry.issue_id, retry.identifier, f"no longer eligible ({issue.state})")
            )
            state.kept_workspaces[retry.issue_id] = issue.identifier
        elif retry.issue_id in state.running:
            effects.append(_requeue(state, retry, "previous run still stopping", settings, now))
        elif not has_slot(state, settings.agent, issue.state):
            effects.append(_requeue(state, retry, "no available orchestrator slots", settings, now))
        elif daily_budget_spent(state, settings, wall):
            effects.append(_requeue(state, retry, "the daily budget is spent", settings, now))
        elif (chosen := hosts.choose(issue.id))[0] is None:
            why = describe_wait(issue, chosen[1] or Wait.NO_HOST, state, settings)
            effects.append(_requeue(state, retry, why, settings, now))
        else:
            host = chosen[0]
            hosts.take(host)
            effects.append(
                _dispatch(state, issue, retry.attempt, now, wall, settings, retry, host=host)
            )
    return effects


def _requeue(
    state: SchedulerState, retry: RetryEntry, error: str, settings: Settings, now: float
) -> RetryScheduled:
    attempt = retry.attempt + 1
    delay = retry_delay_s(attempt, RetryKind.FAILURE, settings.agent)
    entry = RetryEntry(
        issue_id=retry.issue_id,
        identifier=retry.identifier,
        attempt=attempt,
        due_at=now + delay,
        kind=RetryKind.FAILURE,
        error=error,
        url=retry.url,
        resume_thread_id=retry.resume_thread_id,
        last_message=retry.last_message,
        resume_tokens=retry.resume_tokens,
    )
    state.retry_attempts[retry.issue_id] = entry
    return RetryScheduled(entry, delay)


def on_agent_event(
    state: SchedulerState,
    issue_id: str,
    event: AgentEvent,
    now: float,
    wall: datetime,
    pricing: Pricing | None = None,
) -> None:
    """Fold one agent update into the live session fields, token and cost totals, and rate
    limits. `pricing` prices the model a starting session names."""
    entry = state.running.get(issue_id)
    if entry is None:
        return
    entry.last_event = event.kind
    entry.last_event_at = now
    entry.last_event_at_wall = wall
    if event.message is not None:
        entry.last_message = event.message
    if event.pid is not None:
        entry.pid = event.pid
    if event.remote_pgid is not None:
        entry.remote_pgid = event.remote_pgid
    if event.thread_id is not None:
        entry.thread_id = event.thread_id
    if event.session_id is not None:
        entry.session_id = event.session_id
    if event.kind is EventKind.SESSION_STARTED:
        if event.model is not None:
            entry.model = event.model
        entry.price = pricing.price_for(entry.model) if pricing is not None else None
        if entry.resumed:
            entry.resumed = False
            if event.message != RESUMED:
                # A new thread after all: it counts from zero.
                entry.input_tokens = entry.output_tokens = entry.total_tokens = 0
                entry.cached_input_tokens = entry.cache_write_tokens = 0
    if event.kind is EventKind.TURN_STARTED:
        entry.turn_count += 1
        progress = state.stage_progress.get(issue_id)
        if progress is not None and progress.stage == entry.stage:
            progress.turns += 1
    if event.kind not in ("token_usage", "rate_limits"):
        entry.recent_events.append(RecentEvent(wall, event.kind, event.message))
    usage = event.usage
    if usage is not None:
        # Absolute thread totals: add only what grew since the last report. A total lower than
        # the last one means a new thread started counting from zero. A thread resumed after a
        # restart reports what it used before it too: its entry starts at the totals saved for
        # it (`_dispatch`), so only what it used beyond them counts.
        totals = state.totals
        ticket = _ticket_totals(state, entry)
        deltas: dict[str, int] = {}
        for name in ("input_tokens", "output_tokens", "total_tokens", "cached_input_tokens"):
            new = getattr(usage, name)
            old = getattr(entry, name)
            delta = deltas[name] = new - old if new >= old else new
            if name != "cached_input_tokens":
                setattr(totals, name, getattr(totals, name) + delta)
            setattr(ticket, name, getattr(ticket, name) + delta)
            setattr(entry, name, new)
        written = usage.cache_write_tokens
        old_written = entry.cache_write_tokens
        deltas["cache_write_tokens"] = written - old_written if written >= old_written else written
        entry.cache_write_tokens = written
        _add_cost(state, entry, ticket, deltas, wall)
        state.changed_totals.add(issue_id)
    if event.rate_limits is not None:
        state.rate_limits = event.rate_limits
    if event.reported_cost_usd is not None:
        entry.agent_cost_usd = event.reported_cost_usd


def _add_cost(
    state: SchedulerState,
    entry: RunningEntry,
    ticket: TicketTotals,
    deltas: Mapping[str, int],
    wall: datetime,
) -> None:
    """Price what a usage report added, onto the run, the ticket, the day and the model."""
    tokens = deltas["total_tokens"]
    if tokens <= 0 and deltas["input_tokens"] <= 0 and deltas["output_tokens"] <= 0:
        return
    day = state.daily_costs.setdefault(day_key(wall), Spend())
    model = state.model_costs.setdefault(entry.model or UNKNOWN_MODEL, Spend())
    if entry.price is None:
        entry.unpriced_tokens += tokens
        ticket.unpriced_tokens += tokens
        day.add(None, tokens)
        model.add(None, tokens)
        return
    written = deltas.get("cache_write_tokens", 0)
    cost = entry.price.cost_usd(
        deltas["input_tokens"] - written,
        deltas["cached_input_tokens"],
        deltas["output_tokens"],
        written,
    )
    entry.cost_usd += cost
    ticket.cost_usd += cost
    stage = entry.stage or "run"
    ticket.cost_by_stage[stage] = ticket.cost_by_stage.get(stage, 0.0) + cost
    day.add(cost, tokens)
    model.add(cost, tokens)


def _ticket_totals(state: SchedulerState, entry: RunningEntry) -> TicketTotals:
    totals = state.ticket_totals.get(entry.issue.id)
    if totals is None:
        totals = state.ticket_totals[entry.issue.id] = TicketTotals(entry.identifier)
    return totals


def next_wakeup(state: SchedulerState, next_tick_at: float, settings: Settings) -> float:
    """The earliest of the next poll tick, the next due retry and the next possible stall."""
    soonest = next_tick_at
    for retry in state.retry_attempts.values():
        soonest = min(soonest, retry.due_at)
    for pending in state.transitions.values():
        if not pending.in_flight:
            soonest = min(soonest, pending.due_at)
    for entry in state.running.values():
        timeout_ms = _stall_timeout_ms(entry, settings)
        if entry.stop_reason is None and timeout_ms > 0:
            since = entry.last_event_at if entry.last_event_at is not None else entry.started_at
            soonest = min(soonest, since + timeout_ms / 1000)
    return soonest


def _stall_timeout_ms(entry: RunningEntry, settings: Settings) -> int:
    """The stall timeout of the run's agent, from the block the run started with."""
    stage = settings.machine.stage_named(entry.stage) if settings.machine is not None else None
    return settings.agent_block(stage, entry.agent_kind).stall_timeout_ms

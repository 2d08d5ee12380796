"""The scheduler's state: what runs, waits, retries and is being moved, and what it cost.

One `SchedulerState` is owned by the orchestrator and changed only by the decisions of the
core (`dispatch`, `runs`, `transitions`, `accounting`). One rule keeps runs and slots honest: a
running entry is removed only when its worker has really exited. Stopping a run marks the entry
with a `stop_reason`; the claim, the slot and the workspace stay until `runs.on_worker_exit`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from symphony.base.hosts import LOCAL
from symphony.base.issue import Issue
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.base.pulls import PullState, ReviewDecision
from symphony.config.pricing import Price
from symphony.config.stages import Report
from symphony.core.costs import Spend
from symphony.core.evidence import WorkspaceFacts
from symphony.core.footprint import Footprint
from symphony.core.outcomes import OutcomeRecord
from symphony.core.stage_outcomes import RunPush, TransitionPlan
from symphony.core.verification import Verification

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
    PERSON = "person"
    """A person stopped the run (the review surface); the ticket stays where it is."""
    PULL_CLOSED = "pull_closed"
    """A person closed the ticket's pull request unmerged: its publishing ends."""


class MovePhase(enum.Enum):
    """Where a run's own tool call that moves its ticket is: the worker reports it starting
    before the write is sent, so no read can see the new state before the daemon knows."""

    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RetryKind(enum.Enum):
    CONTINUATION = "continuation"
    FAILURE = "failure"
    STALL = "stall"
    """The run was stopped for a stall: restarted with the failure backoff."""
    LIMITED = "limited"
    """The provider refused the run (`core.limits`): it continues its thread after the reset,
    as the same attempt."""


class RunKind(enum.StrEnum):
    """What started a run, in a person's words: each automatic kind is counted per ticket and
    capped (`core.reruns`)."""

    FIRST = "first run"
    CONTINUATION = "continuation"
    RETRY = "retry"
    """After an error."""
    STALL_RESTART = "stall restart"
    CHECK_FIX = "check fix"
    CONFLICT_FIX = "conflict fix"
    REWORK = "rework"
    RESUMED = "resumed"
    """A run a restart interrupted, continued: the run it continues was counted."""
    AFTER_LIMIT = "after a limit"
    """A run its provider's limit refused, continued after the reset (`core.limits`): the run
    it continues gave its start back, so this one is the run that counts."""


@dataclass(slots=True)
class AgentPause:
    """An agent kind paused by its provider until `until` (wall clock: it outlives restarts)."""

    agent_kind: str
    limit: LimitKind
    detail: str
    since: datetime
    until: datetime
    named: bool
    """The provider named the reset; otherwise `until` is a guess and a probe goes first."""
    strikes: int = 1
    """Limits met in a row without a run ending well in between (the guess's backoff)."""
    probe: str | None = None
    """The ticket whose run probes the provider after an unnamed reset, while it runs."""
    shared: bool = False
    """Met by another workflow of the daemon on the same account: it lifts when theirs does
    (`core.limits.adopt`), is not saved, and this workflow sends no notice of it."""

    def describe(self) -> str:
        what = f"{self.limit}: {self.detail}" if self.detail else str(self.limit)
        until = self.until.strftime("%H:%M:%S UTC")
        where = ", met by another workflow on the same account" if self.shared else ""
        return f"{self.agent_kind} limited until {until} ({what}{where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent_kind,
            "limit": str(self.limit),
            "detail": self.detail,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "reset_named": self.named,
            "strikes": self.strikes,
            "probe": self.probe,
            "shared": self.shared,
        }


def pause_from_json(data: Mapping[str, Any]) -> AgentPause:
    """The pause `AgentPause.to_json` wrote (the store keeps it across restarts)."""
    return AgentPause(
        agent_kind=str(data["agent"]),
        limit=LimitKind(data["limit"]),
        detail=str(data.get("detail") or ""),
        since=datetime.fromisoformat(data["since"]),
        until=datetime.fromisoformat(data["until"]),
        named=bool(data["reset_named"]),
        strikes=int(data.get("strikes") or 1),
        probe=data.get("probe"),
    )


@dataclass(slots=True)
class RunLedger:
    """Every run of one ticket, by kind, across heads, restarts and kill -9 (the store keeps
    it): what the caps and the runaway guard count (`core.reruns`)."""

    identifier: str
    counts: dict[str, int] = field(default_factory=dict)
    """Runs of each automatic kind (`RunKind` values) since the count last started again."""
    starts: list[float] = field(default_factory=list)
    """When its recent runs started (Unix seconds), oldest first, within the runaway window."""
    history: list[str] = field(default_factory=list)
    """The recent runs' labels with their start, oldest first, for the escalation comment."""
    last_output: str | None = None
    """What the agent of its last run last said."""
    escalated: str | None = None
    """Why the daemon stopped dispatching it (a cap or the runaway guard); cleared, with every
    count, when a person sends it back to work."""
    suspected: str | None = None
    """Why the daemon suspects an injection (`core.injection`): no merge policy merges its
    pull request until a person approves the head on the review page. Sending the ticket
    back to work does not clear it."""


@dataclass(slots=True)
class RecentEvent:
    """One of a running agent's latest events, with when it came, for the snapshot."""

    at_wall: datetime
    kind: str
    message: str | None


@dataclass(slots=True)
class RunningEntry:
    """A run in progress: its ticket, agent session, host, usage and cost so far, and why the daemon
    is stopping it, if it is."""

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
    sandbox: str = "none"
    """The boundary its agent and gates run in, in words (`SandboxSettings.describe`)."""
    hold_state: str | None = None
    """A fix run of a published ticket: the review state its ticket waits in meanwhile, which
    does not stop the run."""
    remote_pgid: int | None = None
    """Its agent's process group on that host, once reported (for a restart's cleanup)."""
    own_moves: list[str | None] = field(default_factory=list)
    """The states its own tool calls are moving, or moved, the ticket to (normalized), until a
    read shows the move; None for a call that can move it without naming a state (a GraphQL
    mutation)."""
    own_states: set[str] = field(default_factory=set)
    """States reads showed the ticket in after its own calls moved it (normalized)."""
    kind: RunKind = RunKind.FIRST
    wire: WireTotals | None = None
    """What the model gateway measured of its calls; None when its agent calls its provider
    itself (a subscription login)."""
    label: str = "first run"
    """What the run is, with its count and cap: `conflict fix 1/2`, `retry 2/5 after error`."""

    @property
    def identifier(self) -> str:
        return self.issue.identifier


@dataclass(slots=True)
class RetryEntry:
    """A ticket's next run, due at `due_at` (monotonic): a retry after a failure or a stall, a
    continuation, or a run after a limit; the ticket stays claimed until then."""

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
class PullRecord:
    """A pull request the daemon published for a ticket, followed until it is merged or closed
    (`core.follow`)."""

    issue: Issue
    """The ticket as the daemon last moved it: its state is where following finds it."""
    stage: str
    """The stage that published it: a fix run runs that stage again."""
    number: int
    url: str
    branch: str
    base: str
    state: PullState = PullState.OPEN
    head_sha: str | None = None
    checks: str = ""
    """The checks that count, for people: `2 passed, 1 failed`."""
    review: ReviewDecision = ReviewDecision.NONE
    mergeable: bool | None = None
    check_fixes: int = 0
    """Fix runs started for failed checks on it (the outcome figures; the cap counts per
    ticket, `core.reruns`)."""
    seen_checks: frozenset[str] = frozenset()
    """Every check that counted on any of its heads: a later head without one of them waits
    for it (it is pending, never green)."""
    history: tuple[str, ...] = ()
    """Its red and green, for people: which check failed or what conflicted on which head,
    which run was sent, which head went green (oldest first, bounded)."""
    closing: bool = False
    """A person closed it unmerged while the daemon was working on the ticket: the move to
    `follow.on_closed` waits until that step ends."""
    fix_pushed: bool = False
    """A check fix ran since the checks were last green (the check-fix success rate)."""
    handled: frozenset[str] = frozenset()
    """What the daemon acted on already, once each: a failure on a head commit, a conflict,
    a review, a refused merge (`core.follow` names the keys)."""
    published_at: datetime | None = None
    approved_by: str | None = None
    """A person approved it on the review surface, at `approved_head`: the merge policy counts
    that as an approval of that head (a later push needs a new one)."""
    approved_head: str | None = None
    pending_since: float | None = None
    """When the current head was first seen with its checks pending or none reported yet
    (monotonic)."""
    next_read_at: float = 0.0
    reading: bool = False
    merging: bool = False
    escalated: bool = False
    """Sent to `escalation_state`, or stopped by a person: followed for merged and closed
    only, never fixed."""

    @property
    def identifier(self) -> str:
        return self.issue.identifier


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """What the next run of a ticket is asked to address (`{{ review }}`): a review of its pull
    request, failed checks or a conflict, and the threads to answer once it is pushed."""

    kind: str
    """review | checks | conflict"""
    text: str
    threads: tuple[str, ...] = ()


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
class WireTotals:
    """What the model gateway measured of a run's or a ticket's model calls: the usage the
    provider reported on the wire, priced like the agent's own reports."""

    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_tokens: int = 0
    refused: int = 0
    """Calls the gateway refused (the run stopped, its budget spent, its agent paused)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class Totals:
    """Tokens and agent time of every run of the workflow, all tickets together, kept across
    restarts."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    ended_seconds: float = 0.0
    """Runtime of sessions that have ended; live ones are added at snapshot time."""


@dataclass(frozen=True, slots=True)
class Pause:
    """A person paused dispatch for the whole daemon: no ticket starts and no retry is
    dispatched until they resume it; running agents go on."""

    by: str
    at: datetime

    def to_json(self) -> dict[str, str]:
        return {"by": self.by, "at": self.at.isoformat()}


@dataclass(frozen=True, slots=True)
class Outbox:
    """What the core changed or recorded since the store last saved it, handed over in one
    piece (`SchedulerState.take_outbox`): outcome records to append, and the tickets whose
    totals or run ledger must be written again."""

    outcomes: tuple[OutcomeRecord, ...] = ()
    changed_totals: frozenset[str] = frozenset()
    changed_ledgers: frozenset[str] = frozenset()


@dataclass(slots=True)
class SchedulerState:
    """What the scheduling core knows of one workflow: what runs, waits, retries, is being moved or
    followed, and what it cost. The orchestrator owns it; only the core's decisions change it."""

    running: dict[str, RunningEntry] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    paused: Pause | None = None
    """Dispatch paused by a person (`core.operator`); None: dispatching."""
    fleet_slots: int | None = None
    """The most agents this workflow's share of its fleet lets it run now (`core.fleet`, set
    by the daemon before each dispatch); None: no fleet, its own cap alone."""
    hosts_busy_elsewhere: dict[str, int] = field(default_factory=dict)
    """Agents the other workflows of its fleet run on each SSH host, by the host's name (set
    with `fleet_slots`): a host's capacity is shared by every workflow that lists it."""
    held: dict[str, tuple[str, datetime | None]] = field(default_factory=dict)
    """Tickets a person stopped (id -> their state and last update then): not dispatched again
    until the ticket changes or the person retries it (`core.operator`)."""
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
    pull_requests: dict[str, PullRecord] = field(default_factory=dict)
    """The pull requests the daemon published, by ticket."""
    reviews: dict[str, ReviewRequest] = field(default_factory=dict)
    """What each ticket's next run addresses, until a run of it publishes."""
    ledgers: dict[str, RunLedger] = field(default_factory=dict)
    """Every ticket's runs by kind, for the caps and the runaway guard (`core.reruns`)."""
    changed_ledgers: set[str] = field(default_factory=set)
    """Tickets whose ledger changed since the store last saved them."""
    wire_totals: dict[str, WireTotals] = field(default_factory=dict)
    """Per ticket, what the model gateway measured of its runs since the daemon started."""
    agent_pauses: dict[str, AgentPause] = field(default_factory=dict)
    """Agent kinds their provider paused, until the reset (`core.limits`)."""
    queued_moves: dict[str, tuple[Issue, TransitionPlan]] = field(default_factory=dict)
    """A person's move (cancel) that waits for the daemon's step under way on the ticket (its
    run stopping, its move being written): taken as soon as that step ends."""

    def take_outbox(self) -> Outbox:
        """Hand over what the store has not saved yet, and forget it here: whoever takes it
        writes it, or gives it back (`give_back`) when the write fails."""
        outbox = Outbox(
            tuple(self.new_outcomes), frozenset(self.changed_totals),
            frozenset(self.changed_ledgers),
        )  # fmt: skip
        self.new_outcomes.clear()
        self.changed_totals.clear()
        self.changed_ledgers.clear()
        return outbox

    def give_back(self, outbox: Outbox) -> None:
        """A write of `outbox` failed: its items wait for the next save, older records first."""
        self.new_outcomes[:0] = outbox.outcomes
        self.changed_totals.update(outbox.changed_totals)
        self.changed_ledgers.update(outbox.changed_ledgers)

    def open_identifiers(self) -> list[str]:
        """Tickets with work under way or waiting for a person, each once: running, retrying,
        being moved, or released with their workspace kept."""
        return list(
            dict.fromkeys(
                [
                    *(entry.identifier for entry in self.running.values()),
                    *(retry.identifier for retry in self.retry_attempts.values()),
                    *(move.identifier for move in self.transitions.values()),
                    *self.kept_workspaces.values(),
                ]
            )
        )


@dataclass(slots=True)
class HostHealth:
    """How an SSH worker host's connections fared lately: failures in a row, and whether it is
    marked down."""

    failures: int = 0
    """Connection failures in a row."""
    down_until: float | None = None
    """Marked down until then (monotonic): no new work starts there."""
    error: str | None = None
    """The last connection failure, for people."""

    def is_down(self, now: float | None) -> bool:
        return self.down_until is not None and (now is None or now < self.down_until)


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
    SUSPECTED_INJECTION = "suspected_injection"
    """A write of the agent's carried its run's canary: refused, and the run stopped."""
    INTERNAL = "internal_error"


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a worker ended abnormally: the step that failed (`turn 2`, `prompt`, `workspace`,
    `agent startup`), the error's category when it had one (`turn_failed`,
    `response_timeout`), what a person reads, and the kind of failure it counts as. `limit`:
    the provider refused the run (`core.limits`), which is no failure of the ticket's."""

    step: str
    message: str
    category: str | None = None
    reason: FailureReason = FailureReason.INTERNAL
    limit: ProviderLimit | None = None

    def __str__(self) -> str:
        if self.category is None:
            return f"{self.step}: {self.message}"
        return f"{self.step}: {self.category}: {self.message}"


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
    pushed: RunPush | None = None
    """The branch its hand-off pushed before its workspace ended with it (a pod's run)."""

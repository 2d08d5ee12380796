"""Which ticket runs next: eligibility, order, slots (global, per state, per host), holds
(blockers, budgets, the review queue, overlapping files) and the words that explain a wait.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from symphony.base.hosts import CLUSTER, LOCAL
from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.config.sections import AgentSettings, OverlapMode, Settings, TrackerSettings
from symphony.config.stages import Stage
from symphony.core.costs import day_key, usd
from symphony.core.effects import Effect, PostComment, StartWorker
from symphony.core.footprint import Footprint, overlap
from symphony.core.limits import starting, waits_for_limit
from symphony.core.operator import release_changed_holds
from symphony.core.outcomes import REWORK, OutcomeRecord
from symphony.core.reruns import escalate, refusal, settled, started
from symphony.core.state import (
    RetryEntry,
    RetryKind,
    RunKind,
    RunningEntry,
    SchedulerState,
    StageProgress,
)


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


def _running_in_state(state: SchedulerState, state_key: str) -> int:
    return sum(
        1 for entry in state.running.values() if normalize_state(entry.issue.state) == state_key
    )


def capacity(state: SchedulerState, agent: AgentSettings) -> int:
    """How many agents may run at once: the workflow's cap, or its fleet share when lower."""
    if state.fleet_slots is None:
        return agent.max_concurrent_agents
    return min(agent.max_concurrent_agents, state.fleet_slots)


def has_slot(state: SchedulerState, agent: AgentSettings, issue_state: str) -> bool:
    """A global slot and a slot for the issue's state (the per-state limit defaults to global)."""
    if len(state.running) >= capacity(state, agent):
        return False
    key = normalize_state(issue_state)
    limit = agent.max_concurrent_agents_by_state.get(key)
    return limit is None or _running_in_state(state, key) < limit


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
    POD_LIMIT = "pod_limit"
    """This workflow has `worker.kubernetes.max_pods` pods already."""
    CLUSTER_DOWN = "cluster_down"
    """kubectl failed to reach the cluster often enough in a row that it is left alone."""
    PAUSED = "paused"
    HELD = "held"
    RUNAWAY = "runaway"
    """A cap or the runaway guard refuses its next run (`core.reruns`)."""
    LIMITED = "limited"
    """Its agent kind is paused by its provider's limit until the reset (`core.limits`)."""


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


class HostSlots:
    """The SSH hosts' load during one decision: which host a ticket would run on, or why it
    waits for one. Without `worker.ssh_hosts` everything runs here; with `worker.kubernetes`
    everything runs in the cluster, one pod per run, at most `max_pods` at once (besides
    `agent.max_concurrent_agents`: whichever is smaller holds)."""

    def __init__(self, state: SchedulerState, settings: Settings, now: float | None) -> None:
        self._worker = settings.worker
        self._state = state
        self._now = now
        fallback = settings.agent.max_concurrent_agents
        self._capacity = {h.name: self._worker.capacity(h) or fallback for h in self._worker.hosts}
        cluster = self._worker.kubernetes
        self._pods = (cluster.max_pods or fallback) if cluster is not None else None
        # In a fleet, what the other workflows run on a host counts against its capacity too.
        self.load = {host.name: state.hosts_busy_elsewhere.get(host.name, 0)
                     for host in self._worker.hosts}  # fmt: skip
        if self._pods is not None:
            self.load[CLUSTER] = 0
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
        if self._pods is not None:
            if self.is_down(CLUSTER):
                return None, Wait.CLUSTER_DOWN
            # A pod holds its slot from its dispatch to the end of the run, Pending included:
            # the cluster's own wait for room is the run's, not another dispatch's.
            return (CLUSTER, None) if self.load[CLUSTER] < self._pods else (None, Wait.POD_LIMIT)
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
    free = capacity(state, agent) - len(state.running)
    if now is not None:
        # A ticket a provider's limit sent back keeps its place in line: its retry, due at the
        # reset, is served before new candidates take its slot.
        free -= sum(
            1 for r in state.retry_attempts.values()
            if r.kind is RetryKind.LIMITED and r.due_at <= now
        )  # fmt: skip
    # Per-state counts kept incrementally: one pass over `running` per tick, not per candidate.
    per_state: dict[str, int] = {}
    for entry in state.running.values():
        key = normalize_state(entry.issue.state)
        per_state[key] = per_state.get(key, 0) + 1
    review_full = _review_full(state, settings)
    spent_today = wall is not None and daily_budget_spent(state, settings, wall)
    holders = _holders(state) if agent.overlap is not OverlapMode.OFF and state.footprints else {}
    hosts = HostSlots(state, settings, now)
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
        elif issue.id in state.held:
            yield issue, Wait.HELD
        elif issue.id in state.claimed:
            yield issue, Wait.CLAIMED
        elif (
            wall is not None
            and issue.id in state.ledgers
            and refusal(state, issue.id, dispatch_kind(state, issue, settings), settings, wall)
        ):
            yield issue, Wait.RUNAWAY
        elif state.paused is not None:
            yield issue, Wait.PAUSED
        elif (
            wall is not None
            and state.agent_pauses
            and waits_for_limit(state, agent_kind_of(issue, settings, state, wall), issue.id, wall)
        ):
            yield issue, Wait.LIMITED
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


def select_dispatches(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """Claim and start eligible candidates in dispatch order while slots remain."""
    effects: list[Effect] = []
    candidates = list(candidates)
    release_changed_holds(state, candidates)
    if len(state.running) >= capacity(state, settings.agent):
        return effects  # no slot: skip the sort, the common case of a busy fleet
    overlaps: dict[str, list[Overlap]] = {}
    hosts: dict[str, str] = {}
    for issue, wait in _plan(state, candidates, settings, wall, overlaps, now, hosts):
        if wait is None:
            effects.append(start_run(state, issue, None, now, wall, settings, host=hosts[issue.id]))
            if issue.id in overlaps:
                effects.append(_overlap_warning(issue, overlaps[issue.id]))
        elif wait is Wait.RUNAWAY:
            kind = dispatch_kind(state, issue, settings)
            why = refusal(state, issue.id, kind, settings, wall)
            if why is not None:
                effects.extend(
                    escalate(state, issue, why, settings, now, stage=_stage_of(issue, settings))
                )
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


def demand(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    wall: datetime,
    now: float,
) -> int:
    """How many of `candidates` this workflow would start now if the fleet gave it every slot
    its own cap allows: what it asks of the fleet (`core.fleet.Demand.waiting`)."""
    share, state.fleet_slots = state.fleet_slots, None
    try:
        return sum(
            1 for _, wait in _plan(state, candidates, settings, wall, {}, now)
            if wait is None or wait is Wait.NO_SLOT
        )  # fmt: skip
    finally:
        state.fleet_slots = share


def explain_dispatch(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    wall: datetime | None = None,
    now: float | None = None,
) -> list[tuple[Issue, str | None]]:
    """What the next dispatch would do with each candidate, in order, without doing it: None
    for a dispatch, else why it waits, in words. With `wall`, today's spend counts too."""
    return dispatch_outlook(state, candidates, settings, wall, now)[0]


def dispatch_outlook(
    state: SchedulerState,
    candidates: Iterable[Issue],
    settings: Settings,
    wall: datetime | None = None,
    now: float | None = None,
) -> tuple[list[tuple[Issue, str | None]], int]:
    """`explain_dispatch`, and how many candidates wait only because the review queue is
    full, from one look at the candidates: what a poll shows."""
    overlaps: dict[str, list[Overlap]] = {}
    reasons: list[tuple[Issue, str | None]] = []
    held = 0
    for issue, wait in _plan(state, candidates, settings, wall, overlaps, now):
        if wait is None:
            reasons.append((issue, None))
            continue
        held += wait is Wait.REVIEW_FULL
        reasons.append(
            (issue, describe_wait(issue, wait, state, settings, overlaps.get(issue.id, ()), wall))
        )
    return reasons, held


def open_blockers(issue: Issue, tracker: TrackerSettings) -> list[BlockerRef]:
    """The issue's blockers that are not in a terminal state (state unknown counts as open)."""
    return [b for b in issue.blocked_by if b.state is None or not tracker.is_terminal(b.state)]


def describe_wait(
    issue: Issue,
    wait: Wait,
    state: SchedulerState,
    settings: Settings,
    overlaps: Sequence[Overlap] = (),
    wall: datetime | None = None,
) -> str:
    tracker, agent = settings.tracker, settings.agent
    if wait is Wait.OVERLAP:
        return "waits for " + "; ".join(o.describe() for o in overlaps) + " (agent.overlap)"
    if wait is Wait.NO_HOST:
        return (
            f"waits for a host: all {len(settings.worker.hosts)} SSH hosts are busy or down "
            "(worker.ssh_hosts)"
        )
    if wait is Wait.POD_LIMIT:
        cluster = settings.worker.kubernetes
        limit = cluster.max_pods if cluster is not None else None
        return (
            f"waits for a pod: {limit} of this workflow's pods are running "
            "(worker.kubernetes.max_pods)"
        )
    if wait is Wait.CLUSTER_DOWN:
        health = state.host_health.get(CLUSTER)
        failures, error = (health.failures, health.error) if health is not None else (0, None)
        return (
            f"waits for the cluster: kubectl did not reach it {failures} times in a row "
            f"({error or 'no answer'}); it is tried again after worker.ssh.cooloff_s"
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
        if capacity(state, agent) < agent.max_concurrent_agents:
            return (
                f"waits for a slot: this workflow's share of the fleet is "
                f"{capacity(state, agent)} agents now (fleet.max_concurrent_agents, by weight)"
            )
        return (
            f"waits for a slot: all {agent.max_concurrent_agents} agents busy "
            "(agent.max_concurrent_agents)"
        )
    if wait is Wait.CLAIMED:
        retry = state.retry_attempts.get(issue.id)
        return "waits for its retry" if retry is not None else "claimed"
    if wait is Wait.HELD:
        return "stopped by a person: waits until it changes or is retried"
    if wait is Wait.RUNAWAY:
        kind = dispatch_kind(state, issue, settings)
        refused = refusal(state, issue.id, kind, settings, wall) if wall is not None else None
        return f"not started: {refused or 'a cap or the runaway guard'}"
    if wait is Wait.LIMITED:
        waits_on = agent_kind_of(issue, settings, state, wall) if wall is not None else None
        pause = state.agent_pauses.get(waits_on or settings.agent.kind)
        return f"waits: {pause.describe()}" if pause is not None else "waits for its agent's limit"
    if wait is Wait.PAUSED:
        assert state.paused is not None
        return (
            f"waits: dispatch is paused by {state.paused.by} since "
            f"{state.paused.at.isoformat(timespec='seconds')} (resume it to go on)"
        )
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


def start_run(
    state: SchedulerState,
    issue: Issue,
    attempt: int | None,
    now: float,
    wall: datetime,
    settings: Settings,
    retry: RetryEntry | None = None,
    *,
    host: str = LOCAL,
    stage_name: str | None = None,
    hold_state: str | None = None,
    kind: RunKind | None = None,
    detail: str = "",
) -> StartWorker:
    """Claim `issue` and start its run: of the stage its state belongs to, or of `stage_name`
    while the ticket waits in `hold_state` (a fix run of a published pull request). `kind`
    (default: a first run, or rework back from review) is counted (`core.reruns`)."""
    machine = settings.machine
    if machine is None:
        stage = None
    elif stage_name is not None:
        stage = machine.stage_named(stage_name)
    else:
        stage = machine.stage_for(issue.state)
    state.retry_attempts.pop(issue.id, None)
    kind = kind or dispatch_kind(state, issue, settings)
    own = agent_kind_for(issue, stage, settings)
    agent = _unless_limited(own, stage, state, issue.id, wall)
    if agent != own:  # said on the run, so in its evidence and on the board
        detail = ", ".join(d for d in (detail, f"on {agent} while {own} is limited") if d)
    label = started(state, issue, kind, settings, wall, detail)
    # Another agent cannot continue the limited one's thread: it starts its own.
    resume = retry.resume_thread_id if retry is not None and agent == own else None
    last_message = retry.last_message if retry is not None else None
    starting(state, agent, issue.id, wall)
    entry = state.running[issue.id] = RunningEntry(
        issue=issue,
        attempt=attempt,
        started_at=now,
        started_at_wall=wall,
        stage=stage.name if stage is not None else None,
        resumed=resume is not None,
        agent_kind=agent,
        host=host,
        hold_state=hold_state,
        sandbox=settings.sandbox_for(stage).describe(),
        kind=kind,
        label=label,
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
            issue, attempt, resume_thread_id=resume, last_message=last_message,
            agent_kind=agent, host=host, label=label, run_kind=kind,
        )  # fmt: skip
    progress = state.stage_progress.get(issue.id)
    if progress is None or progress.stage != stage.name:
        # A new entry into the stage starts its counts again.
        progress = state.stage_progress[issue.id] = StageProgress(stage.name, entered_at=wall)
        settled(state, issue.id, RunKind.CONTINUATION)
    if kind is RunKind.REWORK:
        state.new_outcomes.append(
            OutcomeRecord(wall, REWORK, issue.id, issue.identifier, {"stage": stage.name})
        )
    asked = state.reviews.get(issue.id)
    return StartWorker(
        issue, attempt, stage.name, progress.turns, resume, last_message, agent, host,
        review=asked.text if asked is not None else None, hold_state=hold_state, label=label,
        run_kind=kind,
    )  # fmt: skip


def dispatch_kind(state: SchedulerState, issue: Issue, settings: Settings) -> RunKind:
    """A dispatch from the board: rework when the ticket is back in a stage that handed it
    to review before, else a first run (of the stage)."""
    machine = settings.machine
    stage = machine.stage_for(issue.state) if machine is not None else None
    if stage is None or normalize_state(stage.on_success) not in state.handed_off.get(issue.id, ()):
        return RunKind.FIRST
    progress = state.stage_progress.get(issue.id)
    return RunKind.REWORK if progress is None or progress.stage != stage.name else RunKind.FIRST


def _stage_of(issue: Issue, settings: Settings) -> str | None:
    stage = settings.machine.stage_for(issue.state) if settings.machine is not None else None
    return stage.name if stage is not None else None


AGENT_LABEL = "agent:"
"""With `agent.label_override`, a ticket labelled `agent:<kind>` runs on that agent."""


def agent_kind_of(issue: Issue, settings: Settings, state: SchedulerState, wall: datetime) -> str:
    """The agent that would run this ticket in its current state now (`agent_kind_for`)."""
    stage = settings.machine.stage_for(issue.state) if settings.machine is not None else None
    return agent_kind_for(issue, stage, settings, state, wall)


def agent_kind_for(
    issue: Issue,
    stage: Stage | None,
    settings: Settings,
    state: SchedulerState | None = None,
    wall: datetime | None = None,
) -> str:
    """The agent that runs this ticket now: the stage's `fallback_agent` while its own is
    limited by its provider and the fallback is not (`core.limits`), else its own."""
    own = _own_agent(issue, stage, settings)
    if state is None or wall is None:
        return own
    return _unless_limited(own, stage, state, issue.id, wall)


def _unless_limited(
    own: str, stage: Stage | None, state: SchedulerState, issue_id: str, wall: datetime
) -> str:
    """`own`, or the stage's fallback while `own` is limited and the fallback is not."""
    fallback = stage.fallback_agent if stage is not None else None
    if fallback is None or fallback == own:
        return own
    if waits_for_limit(state, own, issue_id, wall) and not waits_for_limit(
        state, fallback, issue_id, wall
    ):
        return fallback
    return own


def _own_agent(issue: Issue, stage: Stage | None, settings: Settings) -> str:
    """A label `agent:<kind>` when the workflow lets labels choose (and names a kind it
    knows), else the stage's `agent`, else `agent.kind`."""
    if settings.agent.label_override:
        for label in issue.labels:
            if label.startswith(AGENT_LABEL):
                kind = label[len(AGENT_LABEL) :].strip()
                if kind in settings.agents:
                    return kind
    if stage is not None and stage.agent is not None:
        return stage.agent
    return settings.agent.kind


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

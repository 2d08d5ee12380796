"""What comes after a turn: another turn on the same thread, the end of the run, or the stage's
progress guard; and after a `done` report in a stage with gates, what comes after each round of
them (`after_gates`).

The worker runs turns and reads the ticket back after each one; whether it goes on is decided
here, from the ticket as the tracker now shows it, the turns used and the limits in force. A
worker never applies a rule of its own, so the same ticket gets the same answer from the worker
and from the scheduling core (which judges a live run by the same states in `apply_refresh`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from symphony.base.hosts import HOST_UNREACHABLE, LOCAL
from symphony.base.issue import Issue, normalize_state
from symphony.base.pulls import PullState
from symphony.config.sections import AgentSettings, Settings, TrackerSettings
from symphony.config.stages import Report, Stage, StageOutcome
from symphony.core.accounting import ticket_totals_of
from symphony.core.dispatch import (
    HostSlots,
    Wait,
    agent_kind_of,
    daily_budget_spent,
    describe_wait,
    has_slot,
    is_routable,
    start_run,
)
from symphony.core.effects import (
    Effect,
    HostMarkedDown,
    Released,
    RemoveWorkspace,
    RetryScheduled,
    StopWorker,
)
from symphony.core.footprint import Footprint
from symphony.core.injection import suspect
from symphony.core.limits import after_run, on_limited, waits_for_limit
from symphony.core.outcomes import CLOSED, GATE, OutcomeRecord
from symphony.core.reruns import ended, escalate, kind_of_retry, refusal
from symphony.core.state import (
    FailureReason,
    HostHealth,
    MovePhase,
    RetryEntry,
    RetryKind,
    RunningEntry,
    SchedulerState,
    StopReason,
    WorkerExit,
)
from symphony.core.transitions import budget_transition, stage_outcome, take_queued
from symphony.core.verification import GateRound, fix_prompt

CONTINUATION_DELAY_S = 1.0
FAILURE_BASE_DELAY_S = 10.0


class TurnVerdict(enum.Enum):
    CONTINUE = "continue"
    """Another turn on the same thread."""
    STOP = "stop"
    """The run ends; the scheduling core decides what happens to the ticket next."""
    STUCK = "stuck"
    """The stage's turn budget is used without a report: the progress guard takes over."""


@dataclass(frozen=True, slots=True)
class NextTurn:
    """What comes after a turn (`next_turn`): another turn, the end of the run, or the progress
    guard."""

    verdict: TurnVerdict
    reason: str
    """Why, in a person's words (the worker logs it as `worker done`)."""


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """How many turns a run may take, and how many its stage has left (`turn_limits`)."""

    max_turns: int
    """Turns this run may take: the stage's `max_turns`, else `agent.max_turns`."""
    budget: int
    """Turns the stage has left across attempts (`max_total_turns` minus those used); outside
    stage mode, `max_turns`."""


def turn_limits(settings: Settings, stage: Stage | None, turns_used: int) -> TurnLimits:
    max_turns = (stage.max_turns if stage else None) or settings.agent.max_turns
    budget = stage.max_total_turns - turns_used if stage else max_turns
    return TurnLimits(max_turns, budget)


def before_first_turn(limits: TurnLimits) -> NextTurn:
    """A run may start only while its stage has turns left."""
    if limits.budget <= 0:
        return NextTurn(TurnVerdict.STUCK, "the stage's turn budget is used up")
    return NextTurn(TurnVerdict.CONTINUE, "turns left")


def next_turn(
    issue: Issue | None,
    *,
    turn: int,
    limits: TurnLimits,
    stage: Stage | None,
    settings: Settings,
    hold_state: str | None = None,
) -> NextTurn:
    """After turn `turn` completed with no report: `issue` is the ticket read back (None when
    the tracker no longer shows it). A fix run goes on while its ticket is in `hold_state`."""
    if issue is None:
        return NextTurn(TurnVerdict.STOP, "issue no longer visible")
    held = hold_state is not None and _same_state(issue.state, hold_state)
    if not held and not settings.tracker.is_active(issue.state):
        return NextTurn(TurnVerdict.STOP, f"state is now {issue.state}")
    if (
        not held
        and stage is not None
        and settings.machine is not None
        and settings.machine.stage_for(issue.state) != stage
    ):
        return NextTurn(TurnVerdict.STOP, f"moved to {issue.state}, another stage")
    if not is_routable(issue, settings.tracker):
        return NextTurn(TurnVerdict.STOP, "issue no longer routable")
    if stage is not None and turn >= limits.budget:
        return NextTurn(
            TurnVerdict.STUCK, f"max_total_turns ({stage.max_total_turns}) used, no report"
        )
    if turn >= limits.max_turns:
        return NextTurn(TurnVerdict.STOP, f"max_turns ({limits.max_turns}) reached")
    return NextTurn(TurnVerdict.CONTINUE, "turns left")


class GateStep(enum.Enum):
    RUN_GATES = "run_gates"
    """Run every gate of the stage (after the report, and after each fix turn)."""
    FIX_TURN = "fix_turn"
    """The gates failed and fix turns are left: the agent gets one on the same thread."""
    DONE = "done"
    """Verification is over: the gates passed, the fix turns are used up, or a fix turn
    reported `blocked`; the report that stands goes to the stage machine with every round."""


@dataclass(frozen=True, slots=True)
class AfterGates:
    """What comes next in verifying a `done` report (`after_gates`): a round of gates, a fix turn
    and what it is told, or the end."""

    step: GateStep
    fix_turn: int = 0
    """Which fix turn this is (1-based), for `FIX_TURN`."""
    prompt: str = ""
    """What the fix turn is told: which gates failed and the end of their output."""


def after_gates(
    rounds: Sequence[GateRound],
    fix_turns: int,
    report: Report,
    *,
    max_fix_turns: int,
    identifier: str,
) -> AfterGates:
    """What comes next in verifying a `done` report: `rounds` of gates ran so far, `fix_turns`
    fix turns were given, and `report` is the report that stands (a fix turn may report anew).
    Gates run after the report and after every fix turn; a failed round is followed by a fix
    turn while fewer than `max_fix_turns` were given; `blocked` ends it at once."""
    if fix_turns and report.outcome is StageOutcome.BLOCKED:
        return AfterGates(GateStep.DONE)
    if len(rounds) == fix_turns:
        return AfterGates(GateStep.RUN_GATES)
    last = rounds[-1]
    if last.passed or fix_turns >= max_fix_turns:
        return AfterGates(GateStep.DONE)
    fix_turn = fix_turns + 1
    return AfterGates(
        GateStep.FIX_TURN, fix_turn, fix_prompt(identifier, last, fix_turn, max_fix_turns)
    )


def failure_reason(entry: RunningEntry, result: WorkerExit) -> FailureReason | None:
    """What a worker's exit counts as among failures, or None when it is none: a run that
    ended well, or one the daemon stopped on purpose (the ticket moved, a shutdown, a budget).
    A stalled run counts as `agent_stalled`, whatever its worker said while being stopped."""
    if entry.stop_reason is StopReason.STALLED:
        return FailureReason.AGENT_STALLED
    if result.ok or entry.stop_reason is not None:
        return None
    if result.failure is not None and result.failure.limit is not None:
        return None  # the provider's limit, not a failure of the run (`core.limits`)
    return result.failure.reason if result.failure is not None else FailureReason.INTERNAL


def retry_delay_s(attempt: int, kind: RetryKind, agent: AgentSettings) -> float:
    """1 s after a clean exit; `min(10 s * 2^(attempt-1), max_retry_backoff_ms)` after a failure."""
    if kind is RetryKind.CONTINUATION:
        return CONTINUATION_DELAY_S
    exponent = max(attempt - 1, 0)
    cap_s = agent.max_retry_backoff_ms / 1000
    # Cap the exponent first so a long failure streak cannot overflow the float.
    delay: float = FAILURE_BASE_DELAY_S * 2 ** min(exponent, 64)
    return min(delay, cap_s)


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
        elif entry.hold_state is not None and _same_state(issue.state, entry.hold_state):
            entry.issue = issue  # a fix run: its ticket waits in review meanwhile
            continue
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


def _same_state(a: str, b: str) -> bool:
    return normalize_state(a) == normalize_state(b)


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
    if issue_id in state.queued_moves and issue_id not in state.transitions:
        # A person's move waited for this run: it goes instead of anything the run would start.
        if state.retry_attempts.pop(issue_id, None) is not None:
            effects = [e for e in effects if not isinstance(e, RetryScheduled)]
        effects.extend(take_queued(state, issue_id, now))
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
    ticket_totals_of(state, entry).seconds += ran
    state.changed_totals.add(issue_id)
    if result.footprint is not None:
        _record_footprint(state, issue_id, result.footprint)
    ended_at = entry.started_at_wall + timedelta(seconds=ran)
    if result.verification is not None:
        state.new_outcomes.extend(
            OutcomeRecord(
                ended_at, GATE, issue_id, entry.identifier,
                {"gate": gate.name, "passed": gate.passed, "stage": entry.stage},
            )
            for round_ in result.verification.rounds
            for gate in round_.results
        )  # fmt: skip
    limit = result.failure.limit if not result.ok and result.failure is not None else None
    if entry.stop_reason is None and limit is not None:
        # The provider refused the run: its agent kind waits, the ticket keeps its place.
        return on_limited(state, entry, limit, now, ended_at)
    lifted = after_run(state, entry, limited=limit is not None, wall=ended_at)
    ended(state, issue_id, entry.last_message, ok=entry.stop_reason is None and result.ok)
    return [*lifted, *_after_ended(state, issue_id, entry, result, settings, now)]


def _after_ended(
    state: SchedulerState,
    issue_id: str,
    entry: RunningEntry,
    result: WorkerExit,
    settings: Settings,
    now: float,
) -> list[Effect]:
    reason = entry.stop_reason
    if reason is StopReason.SHUTDOWN:
        state.claimed.discard(issue_id)
        return []
    if reason is StopReason.BUDGET:
        return [budget_transition(state, entry, settings, now)]
    if reason is StopReason.PERSON:  # held where it is until it changes or is retried
        state.claimed.discard(issue_id)
        state.kept_workspaces[issue_id] = entry.identifier
        return [Released(issue_id, entry.identifier, "stopped by a person")]
    if reason is StopReason.PULL_CLOSED:  # the next reading moves it (`follow.on_closed`)
        state.claimed.discard(issue_id)
        state.kept_workspaces[issue_id] = entry.identifier
        return [Released(issue_id, entry.identifier, "its pull request was closed")]
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
        transition = stage_outcome(state, entry, result, settings, now)
        if transition is not None:
            return [transition]
        return [_schedule_retry(state, entry.issue, 1, RetryKind.CONTINUATION, None, settings, now)]
    failure = result.failure
    if failure is not None and failure.reason is FailureReason.SUSPECTED_INJECTION:
        return suspect(state, entry.issue, failure.message, settings, now, stage=entry.stage)
    # A stalled run is a failure whatever its worker said while being stopped.
    kind = RetryKind.FAILURE
    if reason is StopReason.STALLED:
        error, kind = "stalled: no agent activity", RetryKind.STALL
    else:
        error = str(result.failure) if result.failure is not None else "worker failed"
    attempt = _next_attempt(entry.attempt)
    return [_schedule_retry(state, entry.issue, attempt, kind, error, settings, now)]


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
    """Retry entries whose time has come, oldest due first; they stay queued until handled
    (and while dispatch is paused, until it resumes)."""
    if state.paused is not None:
        return []
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
    *,
    limited_for_s: float | None = None,
) -> list[Effect]:
    """Re-dispatch, requeue or release each due retry given fresh snapshots (None: fetch
    failed). A read the tracker's rate limit refused (`limited_for_s`: until its reset) is no
    failure of the run: each retry waits for the reset without counting an attempt."""
    effects: list[Effect] = []
    tracker = settings.tracker
    by_id = {issue.id: issue for issue in refreshed} if refreshed is not None else {}
    hosts = HostSlots(state, settings, now)
    for retry in due:
        if state.retry_attempts.get(retry.issue_id) is not retry:
            continue  # replaced or dispatched meanwhile
        del state.retry_attempts[retry.issue_id]
        if refreshed is None and limited_for_s is not None:
            effects.append(_requeue(state, retry, "waiting for the tracker's rate limit", settings,
                                    now, after_s=limited_for_s))  # fmt: skip
            continue
        if refreshed is None:
            effects.append(_requeue(state, retry, "retry refresh failed", settings, now))
            continue
        issue = by_id.get(retry.issue_id)
        if issue is None or not tracker.is_active(issue.state):
            state.stage_progress.pop(retry.issue_id, None)
        if retry.issue_id in state.held:
            state.claimed.discard(retry.issue_id)
            effects.append(Released(retry.issue_id, retry.identifier, "stopped by a person"))
        elif issue is None:
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
            _judge_again(state, retry.issue_id)
        elif retry.issue_id in state.running:
            effects.append(_requeue(state, retry, "previous run still stopping", settings, now))
        elif pause := waits_for_limit(
            state, agent_kind_of(issue, settings, state, wall), issue.id, wall
        ):
            delay = max((pause.until - wall).total_seconds(), 1.0)
            why = f"waits for its agent: {pause.describe()}"
            effects.append(_requeue(state, retry, why, settings, now, after_s=delay))
        elif not has_slot(state, settings.agent, issue.state):
            effects.append(_requeue(state, retry, "no available orchestrator slots", settings, now))
        elif daily_budget_spent(state, settings, wall):
            effects.append(_requeue(state, retry, "the daily budget is spent", settings, now))
        elif (chosen := hosts.choose(issue.id))[0] is None:
            why = describe_wait(issue, chosen[1] or Wait.NO_HOST, state, settings)
            effects.append(_requeue(state, retry, why, settings, now))
        elif refused := refusal(state, issue.id, kind_of_retry(retry), settings, wall):
            stage = _stage_name(settings, issue.state)
            last = f"The last run ended with: {retry.error}" if retry.error else ""
            effects.extend(escalate(state, issue, refused, settings, now, stage=stage, extra=last))
        else:
            host = chosen[0]
            hosts.take(host)
            effects.append(
                start_run(
                    state, issue, retry.attempt, now, wall, settings, retry, host=host,
                    kind=kind_of_retry(retry),
                )
            )  # fmt: skip
    return effects


def _judge_again(state: SchedulerState, issue_id: str) -> None:
    """A fix run of a published ticket that failed or a restart cut short is not retried in
    place (its ticket waits in review): its pull request is read again at once and what it
    was sent for is judged afresh, a new fix run counted against the same cap."""
    record = state.pull_requests.get(issue_id)
    if record is None or record.state is not PullState.OPEN or record.head_sha is None:
        return
    record.handled = frozenset(k for k in record.handled if record.head_sha not in k)
    record.next_read_at = 0.0


def _requeue(
    state: SchedulerState,
    retry: RetryEntry,
    error: str,
    settings: Settings,
    now: float,
    *,
    after_s: float | None = None,
) -> RetryScheduled:
    """`retry` again later: after a failure's backoff counting one more attempt, or, with
    `after_s`, then and as the same attempt."""
    attempt = retry.attempt + (1 if after_s is None else 0)
    delay = (
        retry_delay_s(attempt, RetryKind.FAILURE, settings.agent) if after_s is None else after_s
    )
    entry = RetryEntry(
        issue_id=retry.issue_id,
        identifier=retry.identifier,
        attempt=attempt,
        due_at=now + delay,
        kind=retry.kind,  # still what it was: waiting for a slot is no new failure
        error=error,
        url=retry.url,
        resume_thread_id=retry.resume_thread_id,
        last_message=retry.last_message,
        resume_tokens=retry.resume_tokens,
    )
    state.retry_attempts[retry.issue_id] = entry
    return RetryScheduled(entry, delay)


def next_wakeup(state: SchedulerState, next_tick_at: float, settings: Settings) -> float:
    """The earliest of the next poll tick, the next due retry or move, the next reading of a
    pull request and the next possible stall."""
    soonest = next_tick_at
    for record in state.pull_requests.values():
        if record.state is PullState.OPEN and not record.reading:
            soonest = min(soonest, record.next_read_at)
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

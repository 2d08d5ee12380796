"""A provider's limit pauses the agent kind that met it, never the ticket.

When a run ends because the provider refused it (`ProviderLimit`: a usage or rate limit, an
overload, an outage), the run is not the ticket's failure: it consumes no retry attempt, no
re-run cap and no start of the runaway guard, writes no failure comment, and the ticket waits
in line in its own thread (a retry that continues it, as the same attempt). What pauses is the
agent kind: no ticket starts on it until the reset the provider named, while runs on other
agents go on. When the provider named no time, the pause lasts `PROBE_BASE_S` (`OUTAGE_BASE_S`
for an overloaded or failing server), doubling with each limit met in a row up to `PROBE_MAX_S`,
spread by up to `JITTER` either way so that daemons sharing a provider do not come back in step,
and then lets a single run through first (the probe): the pause lifts when that run ends
without a limit. Every run on the agent waits on that one pause: one breaker per provider, not
a stampede of independent retries.

A pause belongs to the account, not to the workflow: in a daemon running several workflows,
one whose agent kind runs on the same account as another's takes over the other's pause
(`adopt`, fed by the fleet at each poll) and lifts it when the other does.

Every decision is a function of the state, the clock and the settings; the loop calls
`lift_due` on its scans, and the dispatch plan asks `waits_for_limit`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from symphony.base.limits import LimitKind, ProviderLimit
from symphony.core.effects import AgentLimited, AgentResumed, Effect, RetryScheduled
from symphony.core.outcomes import LIMITED, RESUMED, OutcomeRecord
from symphony.core.reruns import unstarted
from symphony.core.state import AgentPause, RetryEntry, RetryKind, RunningEntry, SchedulerState

PROBE_BASE_S = 60.0
"""How long an agent kind waits after a usage or rate limit with no named reset, the first time."""
OUTAGE_BASE_S = 15.0
"""The same after an overloaded or failing model server: outages are often brief."""
PROBE_MAX_S = 900.0
"""The longest such wait before its spread, however many limits in a row."""
JITTER = 0.2
"""How far a guessed wait is spread either way (a fraction of it)."""


def guess_s(strikes: int, limit: LimitKind, salt: str) -> float:
    """How long to wait when the provider named no reset, after `strikes` limits in a row:
    doubled per strike up to the cap, then spread by a fraction drawn from `salt` (the pause's
    agent and start: the same pause guesses the same, another daemon's another)."""
    base = OUTAGE_BASE_S if limit in (LimitKind.OVERLOADED, LimitKind.OUTAGE) else PROBE_BASE_S
    doubled: float = min(base * 2 ** min(max(strikes - 1, 0), 16), PROBE_MAX_S)
    draw = int.from_bytes(hashlib.sha256(f"{salt}|{strikes}".encode()).digest()[:4]) / 2**32
    return doubled * (1 - JITTER + 2 * JITTER * draw)


def on_limited(
    state: SchedulerState,
    entry: RunningEntry,
    limit: ProviderLimit,
    now: float,
    wall: datetime,
) -> list[Effect]:
    """The run `entry` ended on its provider's `limit`: pause its agent kind, give the run's
    start back to the ticket's ledger, and queue the ticket to continue its thread after the
    reset as the same attempt."""
    pause = _paused(state, entry.agent_kind, limit, wall, entry.issue.id, entry.identifier)
    until = pause.until
    unstarted(state, entry.issue.id, entry.kind)  # it did nothing the provider let it do
    delay = max((until - wall).total_seconds(), 0.0)
    retry = RetryEntry(
        issue_id=entry.issue.id,
        identifier=entry.identifier,
        attempt=entry.attempt or 0,
        due_at=now + delay,
        kind=RetryKind.LIMITED,
        error=f"waits for its agent: {pause.describe()}",
        url=entry.issue.url,
        resume_thread_id=entry.thread_id,
        last_message=entry.last_message,
        resume_tokens=(
            entry.input_tokens, entry.output_tokens, entry.total_tokens,
            entry.cached_input_tokens,
        ),
    )  # fmt: skip
    state.retry_attempts[entry.issue.id] = retry
    state.claimed.add(entry.issue.id)
    return [AgentLimited(pause, entry.identifier), RetryScheduled(retry, delay)]


def met_at_wire(
    state: SchedulerState, entry: RunningEntry, limit: ProviderLimit, wall: datetime
) -> None:
    """The model gateway saw the provider refuse a call of `entry`'s run with `limit`: its
    agent kind pauses now, so the gateway refuses the next call of every run of it, not only
    this run's once its turn ends. The run itself ends as its agent reports the refusal
    (`on_limited`, which finds the pause held and announces it)."""
    known = state.agent_pauses.get(entry.agent_kind)
    if known is not None and wall < known.until:
        return  # already paused: the other runs meet the same wall
    _paused(state, entry.agent_kind, limit, wall, entry.issue.id, entry.identifier)


def _paused(
    state: SchedulerState,
    kind: str,
    limit: ProviderLimit,
    wall: datetime,
    issue_id: str,
    identifier: str,
) -> AgentPause:
    """Pause `kind` for `limit` met at `wall` (or renew its pause) and hold it."""
    known = state.agent_pauses.get(kind)
    # Runs already under way meet the same wall: only a limit met after the last guess ran out
    # (its probe) is one more in a row.
    strikes = 1 if known is None else known.strikes + (1 if wall >= known.until else 0)
    since = known.since if known is not None else wall
    named = limit.resets_at is not None and limit.resets_at > wall
    guess = guess_s(strikes, limit.kind, f"{kind}|{since.isoformat()}")
    until = limit.resets_at if named and limit.resets_at else wall + timedelta(seconds=guess)
    if known is not None and wall < known.until:
        until = max(until, known.until)
    pause = AgentPause(kind, limit.kind, limit.detail, since, until, named, strikes)
    _note_limited(state, pause, issue_id, identifier, renewed=known is not None)
    return pause


def waits_for_limit(
    state: SchedulerState, agent_kind: str, issue_id: str, wall: datetime
) -> AgentPause | None:
    """The pause a run of `issue_id` on `agent_kind` waits for now, if any. Past an unnamed
    reset, one run goes through as the probe while the others wait for its answer."""
    pause = state.agent_pauses.get(agent_kind)
    if pause is None:
        return None
    if wall < pause.until or pause.shared:  # a shared pause is probed where it was met
        return pause
    if pause.named or pause.probe in (None, issue_id):
        return None
    return pause


def starting(state: SchedulerState, agent_kind: str, issue_id: str, wall: datetime) -> None:
    """A run of `issue_id` starts on `agent_kind`: past an unnamed reset, it is the probe."""
    pause = state.agent_pauses.get(agent_kind)
    if pause is not None and not pause.named and wall >= pause.until and pause.probe is None:
        pause.probe = issue_id


def after_run(
    state: SchedulerState, entry: RunningEntry, limited: bool, wall: datetime
) -> list[AgentResumed]:
    """A run on a paused kind ended: without a limit, past the reset, the pause lifts (the
    probe answered, or the provider let a run through)."""
    pause = state.agent_pauses.get(entry.agent_kind)
    if pause is None or pause.shared or limited or wall < pause.until:
        return []
    return [_lift(state, pause, wall)]


def lift_due(state: SchedulerState, wall: datetime) -> list[AgentResumed]:
    """Lift the pauses whose named reset has come (an unnamed one lifts on its probe's answer)."""
    due = [p for p in state.agent_pauses.values() if p.named and wall >= p.until]
    return [_lift(state, pause, wall) for pause in due]


def adopt(state: SchedulerState, elsewhere: Iterable[AgentPause], wall: datetime) -> list[Effect]:
    """Take over the pauses other workflows of the daemon met on the accounts this one's
    agents use (`elsewhere`, their own pauses), and lift those they have lifted. A pause met
    here governs itself: it probes and lifts on its own answers."""
    theirs: dict[str, AgentPause] = {}
    for pause in elsewhere:
        if pause.named and wall >= pause.until:
            continue  # due to lift where it was met, at its next scan
        known = theirs.get(pause.agent_kind)
        if known is None or pause.until > known.until:
            theirs[pause.agent_kind] = pause
    effects: list[Effect] = []
    for kind, pause in theirs.items():
        mine = state.agent_pauses.get(kind)
        if mine is not None and (not mine.shared or mine.until == pause.until):
            continue
        state.agent_pauses[kind] = replace(pause, shared=True, probe=None)
        if mine is None:
            effects.append(AgentLimited(state.agent_pauses[kind], ""))
    for kind, mine in list(state.agent_pauses.items()):
        if mine.shared and kind not in theirs:
            effects.append(_lift(state, mine, wall))
    return effects


def _lift(state: SchedulerState, pause: AgentPause, wall: datetime) -> AgentResumed:
    del state.agent_pauses[pause.agent_kind]
    seconds = max((wall - pause.since).total_seconds(), 0.0)
    if pause.shared:  # the workflow that met it records it and its lifting
        return AgentResumed(pause.agent_kind, seconds)
    state.new_outcomes.append(
        OutcomeRecord(wall, RESUMED, "", "", {"agent": pause.agent_kind, "seconds": seconds})
    )
    return AgentResumed(pause.agent_kind, seconds)


def _note_limited(
    state: SchedulerState, pause: AgentPause, issue_id: str, identifier: str, *, renewed: bool
) -> None:
    """Hold the pause, and record it once (a pause renewed by a probe is no new notice)."""
    state.agent_pauses[pause.agent_kind] = pause
    if renewed:
        return
    data = {"agent": pause.agent_kind, "limit": str(pause.limit), "detail": pause.detail,
            "until": pause.until.isoformat(), "reset_named": pause.named}  # fmt: skip
    state.new_outcomes.append(OutcomeRecord(pause.since, LIMITED, issue_id, identifier, data))


def near_the_wall(
    state: SchedulerState,
    agent_kind: str,
    rate_limits: Mapping[str, Any],
    headroom: int | None,
    wall: datetime,
) -> list[Effect]:
    """A provider's rate-limit report (`{primary: {usedPercent, resetsAt}, secondary: ...}`):
    with `agent.rate_limit_headroom`, a window used at least that much pauses new runs on the
    agent until it resets, before any run meets the wall. Runs under way go on."""
    if headroom is None or agent_kind in state.agent_pauses:
        return []
    spent = [
        window for window in rate_limits.values()
        if isinstance(window, Mapping) and _percent(window) >= headroom
        and isinstance(window.get("resetsAt"), int)
    ]  # fmt: skip
    resets = [datetime.fromtimestamp(w["resetsAt"], UTC) for w in spent]
    ahead = [at for at in resets if at > wall]
    if not ahead:
        return []
    used = max(_percent(w) for w in spent)
    pause = AgentPause(
        agent_kind, LimitKind.RATE,
        f"a window is {used:g}% used (agent.rate_limit_headroom: {headroom})",
        wall, max(ahead), True,
    )  # fmt: skip
    _note_limited(state, pause, "", "", renewed=False)
    return [AgentLimited(pause, "")]


def _percent(window: Mapping[str, Any]) -> float:
    used = window.get("usedPercent")
    return float(used) if isinstance(used, int | float) and not isinstance(used, bool) else 0.0

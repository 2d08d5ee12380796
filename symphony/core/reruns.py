"""Every automatic re-run has a name, a count and a cap; above them all, a runaway guard.

A ticket's runs are counted by kind in its `RunLedger` (kept by the store, so a restart or a
kill -9 forgets nothing). Each automatic kind has a cap:

- continuation (the run ended without handing the ticket on): `agent.max_continuations` per
  stage entry;
- retry after an error: `agent.max_retries` in a row; stall restart: `agent.max_stall_restarts`
  in a row (a run that ends well starts both counts again);
- check fix: `follow.max_check_fixes`, conflict fix: `follow.max_conflict_fixes`, counted across
  heads until the checks are green or the branch merges again (a fix run that leaves the same
  outcome is a failed fix, not a fresh start);
- rework (a review asked for changes): `follow.max_reworks`.

Whatever loop makes them, more than `agent.max_runs_per_ticket` runs of one ticket within
`agent.runaway_window` stop its dispatch (the runaway guard). A run refused either way is not
started: the ticket goes to `escalation_state` (without stages it is held where it is) with a
comment that names the loop, the runs, what they cost and the agent's last output. A person
sending it back to work renews every count.

Pure: the callers (`core.dispatch`, `core.runs`, `core.follow`) ask `refusal` before a start
and `started` as it starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from symphony.base.fences import plain
from symphony.base.issue import Issue, normalize_state
from symphony.config.sections import Settings
from symphony.config.stages import StageOutcome
from symphony.core.costs import usd
from symphony.core.effects import Effect, PostComment
from symphony.core.stage_outcomes import PlannedComment, TransitionPlan
from symphony.core.state import RetryEntry, RetryKind, RunKind, RunLedger, SchedulerState
from symphony.core.transitions import pend

HISTORY = 30
"""Runs listed in a ledger's history (and in the escalation comment)."""
MAX_OUTPUT_CHARS = 2_000

_SETTING = {
    RunKind.CONTINUATION: "agent.max_continuations",
    RunKind.RETRY: "agent.max_retries",
    RunKind.STALL_RESTART: "agent.max_stall_restarts",
    RunKind.CHECK_FIX: "follow.max_check_fixes",
    RunKind.CONFLICT_FIX: "follow.max_conflict_fixes",
    RunKind.REWORK: "follow.max_reworks",
}
"""The setting that caps each automatic kind, as a person writes it in WORKFLOW.md."""


def cap_of(kind: RunKind, settings: Settings) -> int | None:
    """How many runs of `kind` a ticket may have before a person looks; None: not capped
    (a first run, a resumed one: the runaway guard still counts them)."""
    setting = _SETTING.get(kind)
    if setting is None:
        return None
    section, name = setting.split(".")
    cap: int = getattr(getattr(settings, section), name)
    return cap


def forget(state: SchedulerState, seen: Iterable[str], wall: datetime, settings: Settings) -> None:
    """Drop the ledgers of tickets the daemon no longer follows (not seen by the last poll,
    not claimed, not kept) once their last run is out of the runaway window: the store stays
    bounded, and a ticket bounced out of sight and back still meets the guard."""
    window = settings.agent.runaway_window_s
    now_s, seen = wall.timestamp(), set(seen)
    for issue_id in list(state.ledgers):
        ledger = state.ledgers[issue_id]
        if (
            issue_id in seen
            or issue_id in state.claimed
            or issue_id in state.kept_workspaces
            or issue_id in state.held
            or _recent(ledger, now_s, window)
        ):
            continue
        del state.ledgers[issue_id]
        state.changed_ledgers.discard(issue_id)


def kind_of_retry(retry: RetryEntry) -> RunKind:
    if retry.kind is RetryKind.LIMITED:
        return RunKind.AFTER_LIMIT
    if retry.resume_thread_id is not None:
        return RunKind.RESUMED
    return {
        RetryKind.CONTINUATION: RunKind.CONTINUATION,
        RetryKind.FAILURE: RunKind.RETRY,
        RetryKind.STALL: RunKind.STALL_RESTART,
    }[retry.kind]


def ledger_of(state: SchedulerState, issue_id: str, identifier: str) -> RunLedger:
    ledger = state.ledgers.get(issue_id)
    if ledger is None:
        ledger = state.ledgers[issue_id] = RunLedger(identifier)
    return ledger


def refusal(
    state: SchedulerState, issue_id: str, kind: RunKind, settings: Settings, wall: datetime
) -> str | None:
    """Why a run of `kind` may not start now, in words (its cap, or the runaway guard); None
    when it may. A ticket the daemon escalated and a person sent back starts afresh."""
    ledger = state.ledgers.get(issue_id)
    if ledger is None or ledger.escalated is not None:
        return None
    agent = settings.agent
    recent = _recent(ledger, wall.timestamp(), agent.runaway_window_s)
    if len(recent) >= agent.max_runs_per_ticket:
        return (
            f"the runaway guard stopped it: {len(recent)} runs within "
            f"{_span(agent.runaway_window_s)} (agent.max_runs_per_ticket: "
            f"{agent.max_runs_per_ticket}, agent.runaway_window)"
        )
    cap = cap_of(kind, settings)
    count = ledger.counts.get(kind.value, 0)
    if cap is not None and count >= cap:
        runs = f"{count} {kind.value} run{'s' if count != 1 else ''}"
        return f"{runs} did not settle it ({_SETTING[kind]}: {cap})"
    return None


def started(
    state: SchedulerState,
    issue: Issue,
    kind: RunKind,
    settings: Settings,
    wall: datetime,
    detail: str = "",
) -> str:
    """Count a run of `kind` starting now; its label (`conflict fix 1/2`, `retry 2/5 after
    error`, `check fix 1/3 (no-todo)`)."""
    ledger = ledger_of(state, issue.id, issue.identifier)
    ledger.identifier = issue.identifier
    if ledger.escalated is not None:  # a person sent it back to work: every count anew
        ledger.escalated, ledger.counts, ledger.starts = None, {}, []
    now_s = wall.timestamp()
    ledger.starts = [*_recent(ledger, now_s, settings.agent.runaway_window_s), now_s]
    cap = cap_of(kind, settings)
    count = ledger.counts.get(kind.value, 0) + 1
    if cap is not None:
        ledger.counts[kind.value] = count
    label = label_of(kind, count, cap, detail)
    ledger.history = [*ledger.history, f"{wall.isoformat(timespec='seconds')} {label}"][-HISTORY:]
    state.changed_ledgers.add(issue.id)
    return label


_UNCOUNTED = {
    RunKind.FIRST: "first run",
    RunKind.RESUMED: "resumed after a restart",
    RunKind.AFTER_LIMIT: "resumed after its agent's limit",
}


def unstarted(state: SchedulerState, issue_id: str, kind: RunKind) -> None:
    """Take back the count `started` made for the ticket's last run, of `kind`: a run its
    provider refused (`core.limits`) counts against no cap and not in the runaway guard."""
    ledger = state.ledgers.get(issue_id)
    if ledger is None:
        return
    ledger.starts = ledger.starts[:-1]
    count = ledger.counts.get(kind.value)
    if count:
        ledger.counts[kind.value] = count - 1
    state.changed_ledgers.add(issue_id)


def label_of(kind: RunKind, count: int, cap: int | None, detail: str = "") -> str:
    words = _UNCOUNTED.get(kind)
    if words is None:
        words = f"{kind.value} {count}/{cap}" if cap is not None else f"{kind.value} {count}"
        if kind is RunKind.RETRY:
            words += " after error"
    return f"{words} ({detail})" if detail else words


def settled(state: SchedulerState, issue_id: str, *kinds: RunKind) -> None:
    """What those runs were sent for is resolved (the checks are green, the branch merges, a
    run ended well): their counts start again."""
    ledger = state.ledgers.get(issue_id)
    if ledger is None:
        return
    for kind in kinds:
        if ledger.counts.pop(kind.value, None) is not None:
            state.changed_ledgers.add(issue_id)


def ended(state: SchedulerState, issue_id: str, last_message: str | None, ok: bool) -> None:
    """A run ended: keep its agent's last words; one that ended well ends the error loops."""
    ledger = state.ledgers.get(issue_id)
    if ledger is None:
        return
    if last_message:
        ledger.last_output = last_message[-MAX_OUTPUT_CHARS:]
        state.changed_ledgers.add(issue_id)
    if ok:
        settled(state, issue_id, RunKind.RETRY, RunKind.STALL_RESTART)


def escalate(
    state: SchedulerState,
    issue: Issue,
    why: str,
    settings: Settings,
    now: float,
    *,
    stage: str | None = None,
    extra: str = "",
    outcome: StageOutcome | None = None,
) -> list[Effect]:
    """Stop running the ticket and tell a person: to `escalation_state` with the comment
    (without stages, held where it is until it changes); nothing else starts it meanwhile.
    `outcome` is what stopped it (a cap or the runaway guard when not given)."""
    ledger = ledger_of(state, issue.id, issue.identifier)
    ledger.escalated = why
    state.changed_ledgers.add(issue.id)
    state.retry_attempts.pop(issue.id, None)
    record = state.pull_requests.get(issue.id)
    if record is not None:
        record.escalated = True
    body = escalation_text(state, issue, why, settings, extra)
    machine = settings.machine
    if outcome is None:
        runaway = why.startswith("the runaway guard")
        outcome = StageOutcome.RUNAWAY if runaway else StageOutcome.CAPPED
    if machine is None:
        state.claimed.discard(issue.id)
        state.held[issue.id] = (normalize_state(issue.state), issue.updated_at)
        return [PostComment(issue, outcome.value, str(len(ledger.history)), body)]
    plan = TransitionPlan(
        stage or "run", outcome, machine.escalation_state, (PlannedComment(outcome.value, body),)
    )
    return [pend(state, issue, plan, turns=0, now=now)]


def escalation_text(
    state: SchedulerState, issue: Issue, why: str, settings: Settings, extra: str = ""
) -> str:
    """Which loop, how many runs, what they cost, the agent's last output, and how to go on."""
    ledger = ledger_of(state, issue.id, issue.identifier)
    totals = state.ticket_totals.get(issue.id)
    machine = settings.machine
    where = (
        f"moving the ticket to {machine.escalation_state}"
        if machine is not None
        else "holding it where it is"
    )
    lines = [f"The daemon stopped running {issue.identifier}: {why}; {where} for a person."]
    if ledger.history:
        lines += ["", f"Its last {len(ledger.history)} runs:"]
        lines += [f"- {entry}" for entry in ledger.history]
    if totals is not None:
        lines += [
            "",
            f"They cost {usd(totals.known_cost_usd)} in all ({totals.total_tokens:,} tokens).",
        ]
    if extra:
        lines += ["", plain(extra)]
    if ledger.last_output:
        lines += ["", "The agent's last output:", "", "```", ledger.last_output.strip(), "```"]
    lines += [
        "",
        "Moving it back to an active state starts its counts again"
        if machine is not None
        else "Any change to it (a move, an edit) starts its counts again",
    ]
    return "\n".join(lines)


def _recent(ledger: RunLedger, now_s: float, window_s: float) -> list[float]:
    return [at for at in ledger.starts if now_s - at < window_s]


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"

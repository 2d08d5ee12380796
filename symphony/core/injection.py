"""A suspected prompt injection: a write of the agent's that carries its run's canary.

Each run's first prompt carries a random canary (`symphony.base.fences.standing_instruction`)
that the agent has no reason to repeat; an agent that repeats it in a comment, a report, a
commit message or a pushed file is following words it read, not the workflow's. The daemon
refuses that write, stops the run, and escalates the ticket with a comment saying so; the
ticket is marked (`RunLedger.suspected`), and no merge policy merges its pull request until a
person approves its head on the review page (`merge_held`).

Pure: `carries` says whether a value holds a canary; the shell refuses the write and reports
the run's failure or the refused publication, and these functions decide what follows. The
canary itself never appears in anything decided here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from symphony.base.issue import Issue
from symphony.config.sections import Settings
from symphony.config.stages import StageOutcome
from symphony.core.effects import Effect
from symphony.core.reruns import escalate, ledger_of
from symphony.core.state import PullRecord, SchedulerState
from symphony.core.transitions import SUSPECTED
from symphony.core.transitions import SUSPECTED_ADVICE as ADVICE


def carries(value: Any, canaries: Iterable[str]) -> bool:
    """Whether any text in `value` (a tool call's arguments: text, lists, maps) holds one of
    `canaries`."""
    wanted = [c for c in canaries if c]
    if not wanted:
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any(c in item for c in wanted):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def suspect(
    state: SchedulerState,
    issue: Issue,
    what: str,
    settings: Settings,
    now: float,
    *,
    stage: str | None = None,
) -> list[Effect]:
    """`what` (`a comment`, `the pushed commits`) carried the run's canary: mark the ticket and
    escalate it with the comment that says so."""
    why = f"{SUSPECTED}: {what} carried the run's canary"
    ledger = ledger_of(state, issue.id, issue.identifier)
    ledger.suspected = why
    state.changed_ledgers.add(issue.id)
    return escalate(
        state, issue, why, settings, now, stage=stage, extra=ADVICE,
        outcome=StageOutcome.SUSPECTED_INJECTION,
    )  # fmt: skip


def merge_held(state: SchedulerState, record: PullRecord) -> bool:
    """Whether the merge policy waits for a person: the ticket is suspected, and nobody
    approved its current head on the review page."""
    ledger = state.ledgers.get(record.issue.id)
    if ledger is None or ledger.suspected is None:
        return False
    return record.approved_by is None or record.approved_head != record.head_sha

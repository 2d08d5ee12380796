"""What each table's rows hold: the scheduler state as the rows a save mirrors (`Encoder`),
and the rows a restart reads back as the values it restores (`read_saved`).

Rows are built and read by column name through the tables' declarations (`schema`): no value
is found by its position.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from symphony.base.issue import Issue
from symphony.base.times import parse_instant
from symphony.core.costs import Spend
from symphony.core.footprint import Footprint
from symphony.core.outcomes import OutcomeRecord
from symphony.core.stage_outcomes import TransitionPlan
from symphony.core.state import (
    AgentPause,
    PullRecord,
    RetryEntry,
    ReviewRequest,
    RunLedger,
    SchedulerState,
    TicketTotals,
    Totals,
    pause_from_json,
)
from symphony.store.codec import (
    issue_from_json,
    issue_to_json,
    ledger_from_json,
    ledger_to_json,
    plan_from_json,
    plan_to_json,
    pull_from_json,
    pull_to_json,
    review_from_json,
    review_to_json,
    time_or,
)
from symphony.store.schema import (
    AGENT_PAUSES,
    COMPLETED,
    DAILY_COSTS,
    FOOTPRINTS,
    HANDED_OFF,
    HELD,
    INSTANCES,
    KEPT_WORKSPACES,
    META,
    MODEL_COSTS,
    PULL_REQUESTS,
    QUEUED_MOVES,
    RETRIES,
    REVIEWS,
    RUN_LEDGERS,
    RUNS,
    STAGE_PROGRESS,
    TICKET_TOTALS,
    TRANSITIONS,
    WORKSPACE_HOSTS,
    Row,
    Table,
    Values,
)

T = TypeVar("T")

Mirror = dict[Table, dict[str, Row]]
"""Tables a save writes whole: each key's row as the state has it now (`meta` is written whole
but never loses a key)."""

MIRRORED: tuple[Table, ...] = (
    RUNS, RETRIES, STAGE_PROGRESS, HANDED_OFF, TRANSITIONS, KEPT_WORKSPACES, WORKSPACE_HOSTS,
    PULL_REQUESTS, REVIEWS, RUN_LEDGERS, HELD, QUEUED_MOVES, FOOTPRINTS, DAILY_COSTS,
    MODEL_COSTS, COMPLETED, META, AGENT_PAUSES,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run in progress as the store saved it; after a restart it comes back as a continuation on
    its thread."""

    issue_id: str
    identifier: str
    attempt: int | None
    stage: str | None
    pgid: int | None
    thread_id: str | None
    session_id: str | None
    started_at: datetime
    turn_count: int
    last_message: str | None
    tokens: tuple[int, int, int, int]
    """input, output, total, cached input."""
    issue: Issue
    model: str | None = None
    host: str = "local"
    remote_pgid: int | None = None


@dataclass(frozen=True, slots=True)
class RetryRow:
    """A retry or continuation as the store saved it, due at a wall-clock time so a backoff outlasts
    a restart."""

    issue_id: str
    identifier: str
    attempt: int
    due_at: datetime
    kind: str
    error: str | None
    url: str | None
    resume_thread_id: str | None
    last_message: str | None
    resume_tokens: tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class TransitionRow:
    """A transition decided but not yet confirmed (the outbox), as the store saved it: written again
    after a restart."""

    issue_id: str
    key: str
    issue: Issue
    plan: TransitionPlan
    turns_used: int
    attempts: int
    due_at: datetime
    error: str | None


@dataclass(slots=True)
class Saved:
    """Everything the last daemon saved, as read back."""

    runs: list[RunRow] = field(default_factory=list)
    retries: list[RetryRow] = field(default_factory=list)
    stage_progress: dict[str, tuple[str, int, datetime | None]] = field(default_factory=dict)
    transitions: list[TransitionRow] = field(default_factory=list)
    kept_workspaces: dict[str, str] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)
    ticket_totals: dict[str, TicketTotals] = field(default_factory=dict)
    totals: Totals = field(default_factory=Totals)
    instances: list[str] = field(default_factory=list)
    transition_seq: int = 0
    handed_off: dict[str, tuple[str, ...]] = field(default_factory=dict)
    daily_costs: dict[str, Spend] = field(default_factory=dict)
    model_costs: dict[str, Spend] = field(default_factory=dict)
    footprints: dict[str, Footprint] = field(default_factory=dict)
    workspace_hosts: dict[str, str] = field(default_factory=dict)
    pull_requests: dict[str, PullRecord] = field(default_factory=dict)
    reviews: dict[str, ReviewRequest] = field(default_factory=dict)
    ledgers: dict[str, RunLedger] = field(default_factory=dict)
    held: dict[str, tuple[str, datetime | None]] = field(default_factory=dict)
    queued_moves: dict[str, tuple[Issue, TransitionPlan]] = field(default_factory=dict)
    agent_pauses: dict[str, AgentPause] = field(default_factory=dict)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


# Saving


class Encoder:
    """The state as rows, with what is costly to encode kept from one save to the next."""

    def __init__(self) -> None:
        self._walls: dict[float, str] = {}
        self._issues: dict[str, tuple[Issue, str]] = {}
        self._ledgers: dict[str, str] = {}

    def mirror(
        self,
        state: SchedulerState,
        changed_ledgers: Collection[str],
        mono_now: float,
        wall_now: datetime,
        *,
        with_completed: bool,
    ) -> Mirror:
        """The mirrored tables as `state` has them (`completed` only `with_completed`: after
        weeks it is every ticket ever finished, so the caller says when it changed)."""
        wall = self._wall_clock(mono_now, wall_now)
        tables = self._work(state, wall) | self._records(state, changed_ledgers)
        tables |= _costs(state)
        if with_completed:
            tables[COMPLETED] = {k: COMPLETED.row(issue_id=k) for k in state.completed}
        due = {r.due_at for r in state.retry_attempts.values()}
        due.update(t.due_at for t in state.transitions.values())
        self._walls = {at: text for at, text in self._walls.items() if at in due}
        held = state.running.keys() | state.transitions.keys()
        self._issues = {k: v for k, v in self._issues.items() if k in held}
        self._ledgers = {k: v for k, v in self._ledgers.items() if k in state.ledgers}
        return tables

    def _wall_clock(self, mono_now: float, wall_now: datetime) -> Callable[[float], str]:
        def wall(at: float) -> str:
            # Computed once per due time: converting again each pass would jitter by
            # microseconds (the two clocks are read apart) and rewrite every row every pass.
            text = self._walls.get(at)
            if text is None:
                text = self._walls[at] = (wall_now + timedelta(seconds=at - mono_now)).isoformat()
            return text

        return wall

    def _issue_json(self, issue: Issue) -> str:
        # An entry keeps its issue object until a refresh replaces it: encode it once.
        known = self._issues.get(issue.id)
        if known is None or known[0] is not issue:
            known = self._issues[issue.id] = (issue, issue_to_json(issue))
        return known[1]

    def _ledger_json(self, issue_id: str, ledger: RunLedger, changed: Collection[str]) -> str:
        # Encoded again only when the core says it changed: there is one per ticket.
        text = self._ledgers.get(issue_id)
        if text is None or issue_id in changed:
            text = self._ledgers[issue_id] = ledger_to_json(ledger)
        return text

    def _work(self, state: SchedulerState, wall: Callable[[float], str]) -> Mirror:
        """What runs, waits and is being moved."""
        return {
            RUNS: {
                k: RUNS.row(
                    issue_id=k, identifier=e.identifier, attempt=e.attempt, stage=e.stage,
                    pgid=e.pid, thread_id=e.thread_id, session_id=e.session_id,
                    started_at=e.started_at_wall.isoformat(), turn_count=e.turn_count,
                    last_message=e.last_message, input_tokens=e.input_tokens,
                    output_tokens=e.output_tokens, total_tokens=e.total_tokens,
                    issue=self._issue_json(e.issue), cached_input_tokens=e.cached_input_tokens,
                    model=e.model, host=e.host, remote_pgid=e.remote_pgid,
                )
                for k, e in state.running.items()
            },
            RETRIES: {k: _retry_row(k, r, wall) for k, r in state.retry_attempts.items()},
            STAGE_PROGRESS: {
                k: STAGE_PROGRESS.row(
                    issue_id=k, stage=p.stage, turns=p.turns, entered_at=_iso(p.entered_at)
                )
                for k, p in state.stage_progress.items()
            },
            TRANSITIONS: {
                k: TRANSITIONS.row(
                    issue_id=k, key=t.key, issue=self._issue_json(t.issue),
                    plan=plan_to_json(t.plan), turns_used=t.turns_used, attempts=t.attempts,
                    due_at=wall(t.due_at), error=t.error,
                )
                for k, t in state.transitions.items()
            },
        }  # fmt: skip

    def _records(self, state: SchedulerState, changed_ledgers: Collection[str]) -> Mirror:
        """What the daemon remembers of each ticket between its runs."""
        return {
            HANDED_OFF: {
                k: HANDED_OFF.row(issue_id=k, states=json.dumps(list(states)))
                for k, states in state.handed_off.items()
            },
            KEPT_WORKSPACES: {
                k: KEPT_WORKSPACES.row(issue_id=k, identifier=v)
                for k, v in state.kept_workspaces.items()
            },
            WORKSPACE_HOSTS: {
                k: WORKSPACE_HOSTS.row(issue_id=k, host=v) for k, v in state.workspace_hosts.items()
            },
            PULL_REQUESTS: {
                k: PULL_REQUESTS.row(issue_id=k, record=pull_to_json(r))
                for k, r in state.pull_requests.items()
            },
            REVIEWS: {
                k: REVIEWS.row(issue_id=k, request=review_to_json(r))
                for k, r in state.reviews.items()
            },
            RUN_LEDGERS: {
                k: RUN_LEDGERS.row(
                    issue_id=k, identifier=ledger.identifier,
                    ledger=self._ledger_json(k, ledger, changed_ledgers),
                )
                for k, ledger in state.ledgers.items()
            },
            HELD: {
                k: HELD.row(issue_id=k, state=where, updated_at=_iso(updated))
                for k, (where, updated) in state.held.items()
            },
            QUEUED_MOVES: {
                k: QUEUED_MOVES.row(issue_id=k, issue=issue_to_json(issue), plan=plan_to_json(plan))
                for k, (issue, plan) in state.queued_moves.items()
            },
            AGENT_PAUSES: {
                k: AGENT_PAUSES.row(agent_kind=k, pause=json.dumps(p.to_json()))
                for k, p in state.agent_pauses.items()
                if not p.shared  # another workflow's: it shares it again after a restart
            },
            FOOTPRINTS: {
                k: FOOTPRINTS.row(
                    issue_id=k, identifier=f.identifier, planned=json.dumps(sorted(f.planned)),
                    changed=json.dumps(sorted(f.changed)),
                )
                for k, f in state.footprints.items()
            },
        }  # fmt: skip


def _retry_row(issue_id: str, r: RetryEntry, wall: Callable[[float], str]) -> Row:
    tokens_in, tokens_out, tokens_total, tokens_cached = r.resume_tokens
    return RETRIES.row(
        issue_id=issue_id, identifier=r.identifier, attempt=r.attempt, due_at=wall(r.due_at),
        kind=r.kind.value, error=r.error, url=r.url, resume_thread_id=r.resume_thread_id,
        last_message=r.last_message, resume_input=tokens_in, resume_output=tokens_out,
        resume_total=tokens_total, resume_cached=tokens_cached,
    )  # fmt: skip


def _costs(state: SchedulerState) -> Mirror:
    def spend(table: Table, key: str, c: Spend) -> Row:
        values = {"usd": round(c.usd, 9), "tokens": c.tokens, "unpriced_tokens": c.unpriced_tokens}
        return table.row(**{table.key: key}, **values)

    return {
        DAILY_COSTS: {day: spend(DAILY_COSTS, day, c) for day, c in state.daily_costs.items()},
        MODEL_COSTS: {m: spend(MODEL_COSTS, m, c) for m, c in state.model_costs.items()},
    }


def meta_rows(state: SchedulerState) -> dict[str, Row]:
    fleet = state.totals
    totals = {
        "input_tokens": fleet.input_tokens,
        "output_tokens": fleet.output_tokens,
        "total_tokens": fleet.total_tokens,
        "ended_seconds": round(fleet.ended_seconds, 3),
    }
    return {
        "totals": META.row(key="totals", value=json.dumps(totals)),
        "transition_seq": META.row(key="transition_seq", value=str(state.transition_seq)),
    }


def ticket_values(issue_id: str, totals: TicketTotals, wall_now: datetime) -> Values:
    budget = {
        "base_usd": totals.budget_base_usd,
        "window": totals.budget_window,
        "warned": totals.budget_warned,
        "exceeded": totals.budget_exceeded,
    }
    return {
        "issue_id": issue_id,
        "identifier": totals.identifier,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "total_tokens": totals.total_tokens,
        "seconds": round(totals.seconds, 3),
        "updated_at": wall_now.isoformat(),
        "cached_input_tokens": totals.cached_input_tokens,
        "cost_usd": totals.cost_usd,
        "unpriced_tokens": totals.unpriced_tokens,
        "cost_by_stage": json.dumps(totals.cost_by_stage, sort_keys=True),
        "budget": json.dumps(budget),
    }


def outcome_values(record: OutcomeRecord) -> Values:
    return {
        "at": record.at.isoformat(),
        "kind": record.kind,
        "issue_id": record.issue_id,
        "identifier": record.identifier,
        "data": json.dumps(dict(record.data), sort_keys=True),
    }


def outcome_from(values: Values) -> OutcomeRecord | None:
    """None for a record whose time or data cannot be read."""
    moment = parse_instant(values["at"])
    if moment is None:
        return None
    with contextlib.suppress(ValueError, TypeError):
        data = json.loads(values["data"])
        return OutcomeRecord(moment, values["kind"], values["issue_id"], values["identifier"], data)
    return None


# Loading


def read_saved(db: sqlite3.Connection, wall_now: datetime) -> Saved:
    """Everything the file holds; a row whose value cannot be decoded is left out."""
    meta = {v["key"]: v["value"] for v in META.read(db)}
    return Saved(
        runs=[_run(v, wall_now) for v in RUNS.read(db)],
        retries=[_retry(v, wall_now) for v in RETRIES.read(db)],
        transitions=[_transition(v, wall_now) for v in TRANSITIONS.read(db)],
        completed={v["issue_id"] for v in COMPLETED.read(db)},
        ticket_totals=_keyed(db, TICKET_TOTALS, ticket_from),
        totals=Totals(**json.loads(meta["totals"])) if "totals" in meta else Totals(),
        instances=[v["id"] for v in INSTANCES.read(db, "ORDER BY rowid")],
        transition_seq=int(meta.get("transition_seq", "0")),
        daily_costs=_keyed(db, DAILY_COSTS, _spend),
        model_costs=_keyed(db, MODEL_COSTS, _spend),
        **_read_records(db),
    )


def _read_records(db: sqlite3.Connection) -> dict[str, Any]:
    def states(v: Values) -> tuple[str, ...]:
        return tuple(str(s) for s in json.loads(v["states"]))

    def footprint(v: Values) -> Footprint:
        planned, changed = json.loads(v["planned"]), json.loads(v["changed"])
        return Footprint(v["identifier"], frozenset(planned), frozenset(changed))

    return {
        "stage_progress": _keyed(
            db, STAGE_PROGRESS, lambda v: (v["stage"], v["turns"], parse_instant(v["entered_at"]))
        ),
        "handed_off": _keyed(db, HANDED_OFF, states, ValueError, TypeError),
        "kept_workspaces": _keyed(db, KEPT_WORKSPACES, lambda v: v["identifier"]),
        "workspace_hosts": _keyed(db, WORKSPACE_HOSTS, lambda v: v["host"]),
        "pull_requests": _keyed(
            db, PULL_REQUESTS, lambda v: pull_from_json(v["record"]), *_BAD_JSON
        ),
        "reviews": _keyed(db, REVIEWS, lambda v: review_from_json(v["request"]), *_BAD_JSON),
        "ledgers": _keyed(
            db, RUN_LEDGERS, lambda v: ledger_from_json(v["identifier"], v["ledger"]),
            ValueError, TypeError, AttributeError,
        ),
        "held": _keyed(db, HELD, lambda v: (v["state"], parse_instant(v["updated_at"]))),
        "queued_moves": _keyed(
            db, QUEUED_MOVES,
            lambda v: (issue_from_json(v["issue"]), plan_from_json(v["plan"])), *_BAD_JSON,
        ),
        "footprints": _keyed(db, FOOTPRINTS, footprint, ValueError, TypeError),
        "agent_pauses": _keyed(
            db, AGENT_PAUSES, lambda v: pause_from_json(json.loads(v["pause"])), *_BAD_JSON
        ),
    }  # fmt: skip


_BAD_JSON = (ValueError, TypeError, KeyError)


def _keyed(
    db: sqlite3.Connection,
    table: Table,
    decode: Callable[[Values], T],
    *skip: type[Exception],
) -> dict[str, T]:
    """Each row's value by its key; a row failing with one of `skip` is left out."""
    decoded: dict[str, T] = {}
    for values in table.read(db):
        with contextlib.suppress(*skip):
            decoded[values[table.key]] = decode(values)
    return decoded


def _run(v: Values, wall_now: datetime) -> RunRow:
    return RunRow(
        v["issue_id"], v["identifier"], v["attempt"], v["stage"], v["pgid"], v["thread_id"],
        v["session_id"], time_or(v["started_at"], wall_now), v["turn_count"], v["last_message"],
        (v["input_tokens"], v["output_tokens"], v["total_tokens"], v["cached_input_tokens"]),
        issue_from_json(v["issue"]), v["model"], v["host"], v["remote_pgid"],
    )  # fmt: skip


def _retry(v: Values, wall_now: datetime) -> RetryRow:
    return RetryRow(
        v["issue_id"], v["identifier"], v["attempt"], time_or(v["due_at"], wall_now), v["kind"],
        v["error"], v["url"], v["resume_thread_id"], v["last_message"],
        (v["resume_input"], v["resume_output"], v["resume_total"], v["resume_cached"]),
    )  # fmt: skip


def _transition(v: Values, wall_now: datetime) -> TransitionRow:
    return TransitionRow(
        v["issue_id"], v["key"], issue_from_json(v["issue"]), plan_from_json(v["plan"]),
        v["turns_used"], v["attempts"], time_or(v["due_at"], wall_now), v["error"],
    )  # fmt: skip


def _spend(v: Values) -> Spend:
    return Spend(v["usd"], v["tokens"], v["unpriced_tokens"])


def ticket_from(v: Values) -> TicketTotals:
    totals = TicketTotals(
        v["identifier"], v["input_tokens"], v["output_tokens"], v["total_tokens"], v["seconds"],
        v["cached_input_tokens"], v["cost_usd"], v["unpriced_tokens"],
    )  # fmt: skip
    with contextlib.suppress(ValueError, TypeError):
        stages = json.loads(v["cost_by_stage"]).items()
        totals.cost_by_stage = {str(k): float(cost) for k, cost in stages}
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        budget = json.loads(v["budget"])
        totals.budget_base_usd = float(budget.get("base_usd", 0.0))
        totals.budget_window = int(budget.get("window", 1))
        totals.budget_warned = bool(budget.get("warned", False))
        totals.budget_exceeded = bool(budget.get("exceeded", False))
    return totals

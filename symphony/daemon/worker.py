"""One worker task: runs one attempt (`symphony.daemon.runner`) and reports it to the loop.

Everything a worker learns reaches the orchestrator as queue events: each agent event as it
comes, each move its own tool call makes before and after the write, and exactly one exit,
however the attempt ended (completed, failed, stopped, or a bug in symphony, which costs the
attempt and never the daemon). A worker never touches the scheduling state.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import structlog

from symphony import core
from symphony.base.events import AgentEvent
from symphony.base.issue import Issue
from symphony.daemon.events import AgentUpdate, Clock, OwnMove, QueueEvent, WorkerExited
from symphony.daemon.runner import AttemptContext, AttemptFailed, log_agent_event, run_attempt

log = structlog.get_logger("symphony.orchestrator")

STOPPED = core.Failure("worker", "stopped")
"""The exit of a worker the orchestrator stopped (its reason is in the running entry)."""


async def work(
    issue: Issue,
    attempt: int | None,
    ctx: AttemptContext,
    *,
    report: Callable[[QueueEvent], None],
    clock: Clock,
    removal: Awaitable[None] | None = None,
) -> None:
    """Run the attempt after `removal` (of this ticket's old workspace) has finished."""
    sinks = _Sinks(issue.id, ctx, report, clock)
    # Bound in this task's context only: every record the attempt writes (hooks, agent
    # session, tool calls) carries the issue and reaches its per-issue log file.
    structlog.contextvars.bind_contextvars(issue_id=issue.id, issue_identifier=issue.identifier)
    result = core.WorkerExit(False, STOPPED)
    try:
        if removal is not None:
            await asyncio.shield(removal)
        end = await run_attempt(issue, attempt, ctx, sinks.on_event, sinks.on_move)
        result = core.WorkerExit(
            True,
            report=end.report,
            stuck=end.stuck,
            verification=end.verification,
            facts=end.facts,
            footprint=end.footprint,
            pushed=end.pushed,
        )
        log.info("completed")
    except AttemptFailed as exc:
        failure = _masked_limit(exc.failure, ctx)
        result = core.WorkerExit(False, failure)
        if failure.limit is not None:
            log.info("limited by its provider", reason=failure.limit.describe())
        else:
            log.warning("failed", reason=str(exc))
    except asyncio.CancelledError:
        # Stopped by the orchestrator: the stop reason is already recorded in its state.
        log.info("stopped")
    except Exception as exc:  # a bug must cost one attempt, never the daemon
        result = core.WorkerExit(
            False, core.Failure("internal error", repr(exc), reason=core.FailureReason.INTERNAL)
        )
        log.exception("failed", reason="internal error")
    finally:
        sinks.flush()
        report(WorkerExited(issue.id, result))


LIMIT_DETAIL_CHARS = 300
"""The most of a provider's words a pause keeps (it is saved, shown and sent in notices)."""


def _masked_limit(failure: core.Failure, ctx: AttemptContext) -> core.Failure:
    """A provider's words enter the daemon here like every agent message: masked, and bounded
    (a pause outlives the run in the store, the dashboard and the notices)."""
    if failure.limit is None or not failure.limit.detail:
        return failure
    detail = ctx.masker.mask(failure.limit.detail)[:LIMIT_DETAIL_CHARS]
    return dataclasses.replace(failure, limit=dataclasses.replace(failure.limit, detail=detail))


class _Sinks:
    """How an attempt's events and moves reach the loop.

    A session emits its events as it reads its agent's output, often dozens from one read:
    they reach the orchestrator together, once the read is handled (one queue item and one
    clock reading for all), and always before anything else this worker reports after them.
    """

    def __init__(
        self,
        issue_id: str,
        ctx: AttemptContext,
        report: Callable[[QueueEvent], None],
        clock: Clock,
    ) -> None:
        self._issue_id, self._ctx, self._report, self._clock = issue_id, ctx, report, clock
        self._pending: list[AgentEvent] = []
        self._loop = asyncio.get_running_loop()

    def flush(self) -> None:
        if self._pending:
            events = tuple(self._pending)
            self._pending.clear()
            clock = self._clock
            self._report(AgentUpdate(self._issue_id, events, clock.monotonic(), clock.wall()))

    def on_event(self, event: AgentEvent) -> None:
        if event.message:  # what an agent says enters the daemon here, masked
            masked = self._ctx.masker.mask(event.message)
            if masked != event.message:  # a copy only where a secret was taken out
                event = dataclasses.replace(event, message=masked)
        log_agent_event(event)
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(event)

    def on_move(self, target: str | None, phase: core.MovePhase) -> None:
        self.flush()
        self._report(OwnMove(self._issue_id, target, phase))

"""The writes the performer starts beside the loop: a decided move, a comment, a workspace
removal.

Each is one coroutine that never raises (an adapter's bug costs that one write, never the
daemon). A move answers with the `TransitionWritten` event the loop judges; a comment is best
effort, once; a removal says what it did in the log.
"""

from __future__ import annotations

import dataclasses

import structlog

from symphony import core
from symphony.base.errors import SymphonyError
from symphony.core.publishing import with_pull_request
from symphony.core.transitions import WriteResult
from symphony.daemon.events import TransitionWritten
from symphony.daemon.places import Workspaces
from symphony.daemon.publish import (
    Failed,
    Publication,
    Published,
    Publisher,
    Refused,
    Suspected,
)
from symphony.telemetry import UNTRACED, StepTrace, span
from symphony.tracker.contract import Tracker, TrackerError
from symphony.tracker.writes import post_comment_once, write_transition

log = structlog.get_logger("symphony.orchestrator")


async def move(
    tracker: Tracker,
    workspaces: Workspaces,
    pending: core.PendingTransition,
    own: frozenset[str],
    publisher: Publisher | None = None,
    trace: StepTrace = UNTRACED,
) -> TransitionWritten:
    """Write a decided move: publish first where the stage publishes (the evidence then
    names the pull request), the hand-off's evidence to the workspace, then the tracker.
    The publication is the `symphony.publish` span of `trace`."""
    structlog.contextvars.bind_contextvars(
        issue_id=pending.issue.id, issue_identifier=pending.identifier
    )
    pull = None
    try:
        if pending.plan.publish is not None:
            published = await _traced_publish(tracker, workspaces, pending, publisher, trace)
            if isinstance(published, Suspected):
                log.warning("publication refused: suspected injection", what=published.why)
                return TransitionWritten(pending.issue.id, WriteResult.SUSPECTED, published.why)
            if not isinstance(published, Published):
                refused = isinstance(published, Refused)
                result = WriteResult.REFUSED if refused else WriteResult.FAILED
                return TransitionWritten(pending.issue.id, result, published.why)
            pull = published.pull
            pending = dataclasses.replace(pending, plan=with_pull_request(pending.plan, pull))
        if pending.plan.evidence is not None:
            await workspaces.write_evidence(pending.identifier, pending.plan.evidence)
        result, detail = await write_transition(tracker, pending, own)
    except TrackerError as exc:
        result, detail = WriteResult.FAILED, str(exc)
    except Exception as exc:  # an adapter bug costs one try, never the daemon
        log.exception("transition write failed unexpectedly")
        result, detail = WriteResult.FAILED, f"internal error: {exc!r}"
    return TransitionWritten(pending.issue.id, result, detail, pull)


_OUTCOMES: dict[type[Publication], str] = {
    Published: "published",
    Refused: "refused",
    Failed: "failed",
    Suspected: "suspected",
}


async def _traced_publish(
    tracker: Tracker,
    workspaces: Workspaces,
    pending: core.PendingTransition,
    publisher: Publisher | None,
    trace: StepTrace,
) -> Publication:
    """`_publish` in a span under the run that handed off: the pull request it opened or
    updated, or, ended as an error, why nothing was published."""
    attributes = {"symphony.ticket": pending.identifier}
    with span(trace.tracer, "symphony.publish", trace.after, attributes) as published_span:
        published = await _publish(tracker, workspaces, pending, publisher)
        published_span.set("symphony.publish.outcome", _OUTCOMES[type(published)])
        if isinstance(published, Published):
            trace.opened(published_span)  # what the pull request's readings lead back to
            pull = published.pull
            published_span.set("symphony.pull.url", pull.url)
            published_span.set("symphony.pull.number", pull.number)
            published_span.set("symphony.pull.branch", pull.branch)
            published_span.set("symphony.pull.opened", published.opened)
            if pull.head_sha:
                published_span.set("symphony.pull.head_sha", pull.head_sha)
        else:
            published_span.end(error=published.why)
    return published


async def _publish(
    tracker: Tracker,
    workspaces: Workspaces,
    pending: core.PendingTransition,
    publisher: Publisher | None,
) -> Publication:
    intent = pending.plan.publish
    assert intent is not None
    if publisher is None:
        return Refused("the workflow names no `repository:` to publish to any more")
    # Published from where the ticket's workspace is: here, or its SSH host.
    found = await workspaces.peer_paths([pending.identifier])
    workspace = found[0][1] if found else None
    published = await publisher.publish(workspace, intent, pending.issue, git=workspaces.git)
    if isinstance(published, Published):
        pull = published.pull
        log.info(
            "pull request opened" if published.opened else "pull request updated",
            number=pull.number, url=pull.url, head=pull.head_sha,
        )  # fmt: skip
        # A body that closes the ticket (the tracker is this repository) links it already.
        if not publisher.repository.closes_tickets:
            await tracker.link_pull_request(pending.issue, pull.url, f"#{pull.number} {pull.title}")
    return published


async def comment(tracker: Tracker, post: core.PostComment) -> None:
    """Best effort, once: a comment that cannot be written is logged, never retried."""
    try:
        await post_comment_once(tracker, post.issue, post.kind, post.key, post.body)
    except Exception as exc:
        log.warning(
            "comment not posted",
            issue_identifier=post.issue.identifier,
            kind=post.kind,
            reason=str(exc),
        )


async def remove_workspace(workspaces: Workspaces, identifier: str) -> None:
    """Remove a ticket's workspace, if symphony made it."""
    try:
        if await workspaces.remove(identifier):
            log.info("workspace removed", issue_identifier=identifier)
    except SymphonyError as exc:
        log.error("workspace removal failed", issue_identifier=identifier, reason=str(exc))

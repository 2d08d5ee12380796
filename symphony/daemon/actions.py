"""A person's actions, performed for the review surface (`symphony.observability.server`):
pausing and resuming dispatch, stopping a ticket's agent, retrying a ticket now, and the
actions at a checkpoint (approve, request changes, replan, cancel).

Each one decides in the core (`core.operator`, `core.review_actions`) on the orchestrator's
state, performs what that returns through the orchestrator, and records who did it in the
activity and the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from symphony import core
from symphony.base.issue import Issue
from symphony.base.pulls import LineComment
from symphony.base.secrets import SecretMasker
from symphony.codehost.contract import CodeHost
from symphony.config.sections import Settings
from symphony.core.line_review import line_comments
from symphony.core.review_actions import Refusal, ReviewAction
from symphony.daemon import person_review
from symphony.daemon.events import Clock
from symphony.daemon.reads import TrackerReads
from symphony.observability.activity import Activity
from symphony.observability.board import Board
from symphony.tracker.contract import NewTicket, Tracker, TrackerError

log = structlog.get_logger(__name__)


class PersonActions:
    def __init__(
        self,
        state: core.SchedulerState,
        board: Board,
        activity: Activity,
        clock: Clock,
        reads: TrackerReads,
        current: Callable[[], tuple[Settings, Tracker]],
        *,
        perform: Callable[[Sequence[core.Effect]], None],
        changed: Callable[[], None],
        refresh: Callable[[], None],
        code_host: Callable[[], CodeHost | None] = lambda: None,
        masker: SecretMasker | None = None,
    ) -> None:
        self._code_host, self._masker = code_host, masker or SecretMasker()
        self.state, self.board, self.activity, self.clock = state, board, activity, clock
        self._reads = reads
        self._current = current
        self._perform_effects = perform
        self._changed = changed
        self._refresh = refresh
        self._acting: dict[str, asyncio.Lock] = {}
        """One lock per ticket a person acted on (its tracker read, a split's new tickets): a
        second action on it waits its turn rather than racing it."""

    def pause(self, by: str) -> bool:
        """A person paused dispatch (the review surface); False when it already was."""
        paused = core.operator.pause(self.state, by, self.clock.wall())
        if paused:
            self.activity.add(self.clock.wall(), "paused", f"dispatch paused by {by}")
            log.info("dispatch paused", by=by)
            self._changed()
        return paused

    def resume(self, by: str) -> bool:
        """Dispatch again, and poll now; False when it was not paused."""
        ended = core.operator.resume(self.state)
        if ended is None:
            return False
        self.activity.add(self.clock.wall(), "resumed", f"dispatch resumed by {by}")
        log.info("dispatch resumed", by=by, paused_by=ended.by)
        self._refresh()
        self._changed()
        return True

    async def on_ticket(
        self, wanted: str, action: str, *, comment: str, by: str, tickets: object = None,
        comments: object = None, patches: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | Refusal:  # fmt: skip
        """A person's action on one ticket: `stop` its agent, `retry` it now, or an action at
        a checkpoint (`review_action`); `comments` are a change request's line comments, read
        against `patches` (each file's diff) for the code round them."""
        if action in ("stop", "retry"):
            return await self._operator_action(wanted, action, by)
        return await self.review_action(
            wanted, action, comment=comment, by=by, tickets=tickets,
            comments=comments, patches=patches or {},
        )  # fmt: skip

    async def _operator_action(self, wanted: str, action: str, by: str) -> dict[str, Any] | Refusal:
        issue_id = self._issue_id_of(wanted)
        if issue_id is None:
            return Refusal("not_found", f"the daemon knows no ticket {wanted!r}")
        identifier = self._identifier_of(issue_id) or wanted
        if action == "stop":
            fresh = None
            if issue_id not in self.state.running:  # held as the tracker shows it now
                _, tracker = self._current()
                try:
                    read = await self._reads.read("action", tracker.fetch_issues_by_ids([issue_id]))
                except TrackerError as exc:
                    return Refusal("tracker_unreachable", str(exc))
                fresh = next((i for i in read if i.id == issue_id), None)
            stopped = core.operator.stop(self.state, issue_id, by, fresh)
            if isinstance(stopped, str):
                return Refusal("not_running", f"{identifier}: {stopped}")
            if stopped is not None:
                self._perform_effects([stopped])
            words = f"{by} stopped {identifier}; nothing starts it until it changes or is retried"
        else:
            why = core.operator.retry_now(self.state, issue_id, self.clock.monotonic())
            if why is not None:
                return Refusal("nothing_to_retry", f"{identifier}: {why}")
            self._refresh()
            words = f"{by} retried {identifier} now"
        self.activity.add(self.clock.wall(), action, words, issue_identifier=identifier)
        log.info("operator action", by=by, action=action, issue_identifier=identifier)
        self._changed()
        return {"action": action, "ticket": identifier, "by": by, "queued": True}

    def _identifier_of(self, issue_id: str) -> str | None:
        entry, retry = self.state.running.get(issue_id), self.state.retry_attempts.get(issue_id)
        row = self.board.row(issue_id)
        for known in (entry, retry, row):
            if known is not None:
                return known.identifier
        return None

    def _issue_id_of(self, wanted: str) -> str | None:
        """The id of a ticket the daemon runs, retries, holds or last saw, by id or identifier."""
        for issue_id, entry in self.state.running.items():
            if wanted in (issue_id, entry.identifier):
                return issue_id
        for issue_id, retry in self.state.retry_attempts.items():
            if wanted in (issue_id, retry.identifier):
                return issue_id
        row = self.board.row(wanted)
        return row.issue_id if row is not None else None

    async def _split(
        self, issue: Issue, raw: object, settings: Settings, tracker: Tracker, by: str
    ) -> list[str] | Refusal:
        """Create the person's sub-tickets in the first stage, each blocked by the one before
        (they are the plan's steps, in order); their identifiers, or why none could be."""
        tickets = core.review_actions.split_tickets(raw)
        if isinstance(tickets, Refusal):
            return tickets
        allowed = core.review_actions.decide(
            self.state, issue, core.review_actions.ReviewAction.SPLIT, settings
        )
        if isinstance(allowed, Refusal):  # checked before any ticket is made
            return allowed
        assert settings.machine is not None
        first = settings.machine.stages[0].states[0]
        created: list[str] = []
        for title, description in tickets:
            blocked = (created[-1],) if created else ()
            try:
                new = await tracker.create_issue(
                    NewTicket(title, description or title, first, blocked, issue)
                )
            except TrackerError as exc:
                made = f" (made so far: {', '.join(created)})" if created else ""
                return Refusal("tracker_unreachable", f"{exc}{made}")
            created.append(new.identifier)
        log.info("split", by=by, issue_identifier=issue.identifier, into=created)
        return created

    async def review_action(
        self, wanted: str, action: str, *, comment: str, by: str, tickets: object = None,
        comments: object = None, patches: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | Refusal:  # fmt: skip
        """A person's action at a checkpoint (`core.review_actions`), on the ticket as the
        tracker has it now; the move is written through the outbox like the daemon's own."""
        try:
            kind = core.review_actions.ReviewAction(action)
        except ValueError:
            return Refusal("unknown_action", f"no ticket action {action!r}")
        row = self.board.row(wanted)
        if row is None:
            return Refusal("not_found", f"the daemon has not seen {wanted!r}")
        # A second action on the same ticket waits for the first rather than racing it (or
        # being refused): a person's word is always taken.
        lines = line_comments(comments)
        if isinstance(lines, Refusal):
            return lines
        if lines and kind is not ReviewAction.REQUEST_CHANGES:
            return Refusal("comments_invalid", "line comments go with a change request")
        async with self._acting.setdefault(row.issue_id, asyncio.Lock()):
            return await self._review_action(
                row.issue_id, wanted, kind, comment, by, tickets, (lines, patches or {})
            )

    async def _review_action(
        self,
        issue_id: str,
        wanted: str,
        kind: core.review_actions.ReviewAction,
        comment: str,
        by: str,
        tickets: object,
        review: tuple[tuple[LineComment, ...], Mapping[str, str]],
    ) -> dict[str, Any] | Refusal:
        settings, tracker = self._current()
        try:
            fresh = await self._reads.read("action", tracker.fetch_issues_by_ids([issue_id]))
        except TrackerError as exc:
            return Refusal("tracker_unreachable", str(exc))
        issue = next((i for i in fresh if i.id == issue_id), None)
        if issue is None:
            return Refusal("not_found", f"{wanted} is gone from the tracker")
        if kind is core.review_actions.ReviewAction.SPLIT:
            split = await self._split(issue, tickets, settings, tracker, by)
            if isinstance(split, Refusal):
                return split
            comment = "Split into " + ", ".join(split) + (f".\n\n{comment}" if comment else ".")
        asked = None
        if kind is ReviewAction.REQUEST_CHANGES:
            written = await self._request_changes(issue, settings, comment, by, *review)
            if isinstance(written, Refusal):
                return written
            comment, asked = written.ticket_words, written.request
        result = core.review_actions.take(
            self.state, issue, kind, settings, by=by, comment=comment,
            now=self.clock.monotonic(),
        )  # fmt: skip
        if isinstance(result, Refusal):
            return result
        if asked is not None:
            self.state.reviews[issue.id] = asked  # the rework run's `{{ review }}`
        if kind is ReviewAction.APPROVE:
            record = self.state.pull_requests.get(issue.id)
            await person_review.note_approval(self._host(settings), record, by, self._masker)
        if isinstance(result, core.PostComment):
            return self._approved_pull(issue, result, by)
        if isinstance(result, core.PerformTransition):
            target, after = result.target, ""
        else:  # a cancel waits for the run stopping, or the move under way, to end
            target = core.review_actions.cancelled_state(settings)
            after = " once " + (
                "its agent has stopped" if isinstance(result, core.StopWorker)
                else "the daemon's move under way is written"
            )  # fmt: skip
        self.activity.add(
            self.clock.wall(), "review_action",
            f"{by}: {kind.value} {issue.identifier}, moving it to {target}{after}",
            issue_identifier=issue.identifier,
        )  # fmt: skip
        log.info("review action", by=by, action=kind.value, issue_identifier=issue.identifier,
                 target=target)  # fmt: skip
        if not isinstance(result, core.review_actions.Queued):
            self._perform_effects([result])
        self._changed()
        return {"action": kind.value, "ticket": issue.identifier, "by": by,
                "target": target, "queued": True}  # fmt: skip

    def _host(self, settings: Settings) -> CodeHost | None:
        return self._code_host() if settings.repository is not None else None

    async def _request_changes(
        self,
        issue: Issue,
        settings: Settings,
        note: str,
        by: str,
        lines: tuple[LineComment, ...],
        patches: Mapping[str, str],
    ) -> person_review.PersonReview | Refusal:
        """Checked first (nothing is posted for a change request that would be refused), then
        posted while the ticket is held, so following cannot take the review for its own."""
        if lines and not note.strip():
            note = f"{len(lines)} line comment{'s' if len(lines) != 1 else ''} on the change."
        allowed = core.review_actions.decide(
            self.state, issue, ReviewAction.REQUEST_CHANGES, settings, note
        )
        if isinstance(allowed, Refusal):
            return allowed
        record = self.state.pull_requests.get(issue.id)
        self.state.claimed.add(issue.id)
        try:
            return await person_review.request_changes(
                self._host(settings), record, by=by, note=note, comments=lines,
                patches=patches, masker=self._masker,
            )  # fmt: skip
        finally:
            self.state.claimed.discard(issue.id)

    def _approved_pull(self, issue: Issue, said: core.PostComment, by: str) -> dict[str, Any]:
        record = self.state.pull_requests[issue.id]
        self.activity.add(
            self.clock.wall(), "review_action",
            f"{by}: approve {issue.identifier}; pull request #{record.number} merges once "
            "its checks pass", issue_identifier=issue.identifier,
        )  # fmt: skip
        log.info("review action", by=by, action="approve", issue_identifier=issue.identifier,
                 pull_request=record.number)  # fmt: skip
        self._perform_effects([said])
        self._changed()
        return {"action": "approve", "ticket": issue.identifier, "by": by,
                "pull_request": record.number, "merge": "when its checks pass",
                "queued": True}  # fmt: skip

"""The `local` tracker: a folder of Markdown files, one `<IDENTIFIER>.md` per ticket.

Profile:
- `tracker.provider.path` (required): the board folder; relative to WORKFLOW.md's folder, with
  `~` and `$VAR` expanded. It must exist when the tracker is created. Other keys are ignored.
  No secrets.
- A ticket file starts with YAML front matter. `title` and `state` are required; `id` defaults
  to the identifier (the file name without `.md`); `priority` is an integer or null; `labels` are
  normalized; `blocked_by` lists identifiers; `created_at`/`updated_at` are RFC 3339 or YAML
  timestamps (UTC when no offset is given, null when unusable); `branch_name`, `assignee`
  (the Issue's `assignee_id`) and `author` (who wrote the ticket) are text. The trimmed body
  is the description. `url` is the file's `file://` URI and `native_ref` is
  `{"path": "<file name>"}`.
- `dispatchable` is false while any blocker is on the board and not in a terminal state. A
  blocker that is not on the board (deleted, or never existed) does not block; one whose file is
  unreadable does, since it may still be open. Blockers are matched by identifier, ignoring case.
- Only `*.md` files count; hidden files (editor swap files, our temp files) are ignored. A
  ticket file that is a symlink resolving outside the folder is never read and is skipped.
- State reads skip, and log, files that cannot become an Issue: broken or non-map front matter,
  missing title or state, unreadable or over-4-MiB files, an id claimed by two files, identifiers
  differing only in case. A refresh by id instead fails with `tracker_response` when a requested
  ticket's file is among those, and also when a requested id is absent while some file's id
  cannot be read at all (that file may be the ticket, and omission would mean "left the board").
- A board folder that disappears or cannot be listed fails reads with `tracker_request`.
- Tools `local_move_issue {"state"}` and `local_add_comment {"body"}` edit only the session's own
  ticket file, atomically, keeping the rest of the file byte for byte where possible. A state
  matching a configured one in another letter case is written in the workflow's spelling. They
  never raise and never write through a link leading outside the folder (`write_refused`);
  failures carry `unknown_tool`, `invalid_arguments`, `ticket_not_found`,
  `ticket_malformed`, `write_conflict`, `write_failed` or `board_unavailable`.
- The daemon's `link_pull_request` sets the front matter field `pull_request` to the URL (an
  earlier value is replaced, the same URL writes nothing, nothing else of the file changes).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from symphony.base.issue import Issue, normalize_state
from symphony.base.tools import ToolResult, ToolSpec, is_inline
from symphony.config.fields import ConfigError, resolve_path
from symphony.tracker.contract import (
    INVALID_TRACKER_CONFIG,
    TRACKER_REJECTED,
    TRACKER_REQUEST,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerContext,
    TrackerError,
)

from .._support.skipped import SkippedRecords
from .atomic import OutsideFolder, WriteConflict, create_file, rewrite_file
from .comments import escape_headings
from .edit import dump_front_matter
from .snapshot import BoardReader, Snapshot, escapes
from .ticket import FrontMatterError, Ticket, is_ticket_name, parse_ticket
from .tools import (
    MOVE_ISSUE,
    AddComment,
    Edit,
    EditComment,
    LinkPullRequest,
    MoveIssue,
    NoSuchComment,
    NotThisTicket,
    ToolCall,
    parse_call,
    tool_specs,
)

SWEEP_S = 30.0
"""While the board is watched, a poll reads every file at least this often anyway."""

log = structlog.get_logger(__name__)


DAEMON_AUTHOR = "symphony"
"""How the daemon signs the comments it writes; agents' tool calls sign `agent`."""

# Failures a retry may fix; the others need a person (or a different request).
_TRANSIENT = frozenset({"write_conflict", "write_failed", "board_unavailable"})


class _EditFailed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _prefix_of(identifier: str | None) -> str:
    """`DEMO-` for `DEMO-7`: follow-ups are numbered in their parent's series."""
    if identifier:
        match = re.fullmatch(r"(.*?)(\d+)", identifier)
        if match and match.group(1):
            return match.group(1)
    return "TASK-"


def board_folder(provider: Mapping[str, Any], context: TrackerContext) -> Path:
    """The validated board folder named by `tracker.provider.path`."""
    value = provider.get("path")
    if value is None:
        raise TrackerError(
            INVALID_TRACKER_CONFIG,
            "tracker.provider.path is required: the folder holding one <IDENTIFIER>.md file "
            "per ticket",
        )
    if not isinstance(value, str) or not value.strip():
        raise TrackerError(
            INVALID_TRACKER_CONFIG,
            f"tracker.provider.path must be a folder path (text), got {value!r}",
        )
    try:
        folder = resolve_path(
            value.strip(), context.workflow_dir, context.environ, "tracker.provider.path"
        )
    except ConfigError as exc:
        raise TrackerError(INVALID_TRACKER_CONFIG, exc.message) from None
    if not folder.exists():
        raise TrackerError(
            INVALID_TRACKER_CONFIG,
            f"tracker.provider.path {folder} does not exist; it must be an existing folder "
            "with one <IDENTIFIER>.md file per ticket (create it, or fix the path, which is "
            "relative to the workflow file)",
        )
    if not folder.is_dir():
        raise TrackerError(
            INVALID_TRACKER_CONFIG,
            f"tracker.provider.path {folder} is a file; it must be the folder holding the "
            "ticket files",
        )
    return folder


class LocalBoard:
    """A `Tracker` over a board folder; all file work runs in worker threads, and a poll the
    last read still answers touches no file and no thread."""

    def __init__(
        self, folder: Path, active_states: Sequence[str], terminal_states: Sequence[str]
    ) -> None:
        self.folder = folder
        self._reader = BoardReader(folder)
        self._known_states = (*active_states, *terminal_states)
        self._terminal = frozenset(normalize_state(s) for s in terminal_states)
        self._tools = tool_specs(active_states, terminal_states)
        self._skipped = SkippedRecords(log, "ticket", "file")
        # While the daemon watches the folder, a poll with no change seen since the last read
        # serves that read; a full read still happens every SWEEP_S, in case an event was lost.
        self._watched = False
        self._changes = 0
        """Counts the changes seen (own writes, watch events): a read serves a poll only while
        no change came after it began, whichever thread read or wrote."""
        self._changes_lock = threading.Lock()
        self._last: tuple[Snapshot, float, int] | None = None

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        wanted = frozenset(normalize_state(s) for s in states)
        issues, skipped = self._issues_in_states(await self._snapshot(), wanted)
        self._skipped.update(skipped)
        return issues

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        if not ids:
            return []
        return self._issues_with_ids(await self._snapshot(), list(dict.fromkeys(ids)))

    async def _snapshot(self) -> Snapshot:
        """The board for a poll: the last read while it still holds (no thread, no file
        touched), else read again in a worker thread."""
        held = self._held()
        return held if held is not None else await asyncio.to_thread(self._polled)

    def watch_paths(self) -> list[Path]:
        """The board folder: a person's edit there is seen at once, not at the next poll."""
        return [self.folder]

    def watching(self, active: bool) -> None:
        self._watched = active
        self.note_change()

    def note_change(self) -> None:
        with self._changes_lock:
            self._changes += 1

    def _held(self) -> Snapshot | None:
        """The last read, while it serves a poll: watched, no change seen since it began, and
        younger than SWEEP_S. None: the board must be read again (every time while not
        watched)."""
        with self._changes_lock:
            changes = self._changes
        last = self._last
        fresh = last is not None and time.monotonic() - last[1] < SWEEP_S
        if self._watched and last is not None and last[2] == changes and fresh:
            return last[0]
        return None

    def _polled(self) -> Snapshot:
        """The board for a poll: the last read while it holds (`_held`), else read again."""
        held = self._held()
        if held is not None:
            return held
        now = time.monotonic()
        with self._changes_lock:
            changes = self._changes  # before the read: a change during it is read next time
        snapshot = self._reader.read()
        self._last = (snapshot, now, changes)
        return snapshot

    def agent_tools(self) -> list[ToolSpec]:
        return list(self._tools)

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = parse_call(name, arguments)
        if isinstance(call, ToolResult):
            return call
        if isinstance(call, MoveIssue):
            call = MoveIssue(self._spelling_of(call.state))
        try:
            return await asyncio.to_thread(self._run_tool, name, call, issue)
        except Exception as exc:
            # A tool call must never take the agent session down with it.
            log.error(
                "local tool failed", tool=name, issue_identifier=issue.identifier, error=repr(exc)
            )
            return ToolResult.failure("write_failed", f"{name} failed unexpectedly: {exc}")

    def secret_env_names(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None

    def _issues_in_states(
        self, snapshot: Snapshot, wanted: frozenset[str]
    ) -> tuple[list[Issue], dict[str, str]]:
        issues = [snapshot.issue(ticket, self._terminal) for ticket in snapshot.in_states(wanted)]
        return issues, snapshot.problems

    def _issues_with_ids(self, snapshot: Snapshot, ids: list[str]) -> list[Issue]:
        issues: list[Issue] = []
        for id_ in ids:
            for entry in snapshot.files_claiming(id_):
                reason = snapshot.problems.get(entry.file_name)
                if reason is not None:
                    raise TrackerError(
                        TRACKER_RESPONSE,
                        f"ticket {id_!r} cannot be read: {entry.file_name}: {reason}",
                    )
            ticket = snapshot.tickets.get(id_)
            if ticket is not None:
                issues.append(snapshot.issue(ticket, self._terminal))
            elif snapshot.unreadable_ids:
                unreadable = ", ".join(
                    f"{e.file_name} ({e.reason})" for e in snapshot.unreadable_ids
                )
                raise TrackerError(
                    TRACKER_RESPONSE,
                    f"ticket {id_!r} was not found, but these files cannot be read and may be "
                    f"it: {unreadable}",
                )
        return issues

    # The daemon's writes (the `Tracker` write contract)

    async def move_issue(self, issue: Issue, state: str) -> None:
        call = parse_call(MOVE_ISSUE, {"state": state})
        if isinstance(call, ToolResult):
            raise TrackerError(TRACKER_REJECTED, f"cannot move to {state!r}: {call.output}")
        assert isinstance(call, MoveIssue)
        await asyncio.to_thread(self._write, MoveIssue(self._spelling_of(call.state)), issue)

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        output = await asyncio.to_thread(self._write, AddComment(body, DAEMON_AUTHOR), issue)
        return await self._comment(issue, str(output["comment_id"]))

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        if not comment_id.isdigit():
            raise TrackerError(TRACKER_REJECTED, f"{comment_id!r} is not a local comment id")
        await asyncio.to_thread(self._write, EditComment(int(comment_id), body), issue)
        return await self._comment(issue, comment_id)

    async def list_comments(self, issue: Issue) -> list[Comment]:
        return await asyncio.to_thread(self._comments_of, issue)

    async def create_issue(self, ticket: NewTicket) -> Issue:
        return await asyncio.to_thread(self._create, ticket)

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        """`pull_request: <url>` in the ticket's front matter (see `LinkPullRequest`). The
        board has no link tool and no place for a link's text, so `title` is not written."""
        link = url.strip()
        if not link or not is_inline(link):
            raise TrackerError(
                TRACKER_REJECTED, f"a pull request link must be one line of text, got {url!r}"
            )
        await asyncio.to_thread(self._write, LinkPullRequest(link), issue)

    async def tracker_states(self) -> list[str] | None:
        return None  # any state name can be written into a ticket file

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []

    async def _comment(self, issue: Issue, comment_id: str) -> Comment:
        found = [c for c in await self.list_comments(issue) if c.id == comment_id]
        if not found:
            raise TrackerError(
                TRACKER_RESPONSE, f"comment {comment_id} of {issue.identifier} vanished"
            )
        return found[0]

    def _comments_of(self, issue: Issue) -> list[Comment]:
        for path in self._files_of(issue):
            try:
                if escapes(self.folder, path) is not None:
                    continue
                ticket = parse_ticket(path.name, path.read_bytes())
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise TrackerError(TRACKER_REQUEST, f"cannot read {path.name}: {exc}") from None
            if isinstance(ticket, Ticket) and ticket.id == issue.id:
                return [
                    Comment(str(c.number), c.text, c.author, c.written_at, author_member=True)
                    for c in ticket.comments
                ]
        raise TrackerError(TRACKER_REJECTED, f"ticket {issue.identifier} is no longer on the board")

    def _create(self, ticket: NewTicket) -> Issue:
        try:
            return self._create_file(ticket)
        finally:
            self.note_change()  # the board's own write: the next poll reads it, event or not

    def _create_file(self, ticket: NewTicket) -> Issue:
        if not ticket.title.strip() or not is_inline(ticket.title):
            raise TrackerError(TRACKER_REJECTED, "a new ticket needs a one-line title")
        snapshot = self._reader.read()
        blockers: list[str] = []
        for name in ticket.blocked_by:
            found = snapshot.blocker(name, self._terminal).ref
            if found.id is None:
                raise TrackerError(TRACKER_REJECTED, f"blocker {name!r} is not on the board")
            blockers.append(found.identifier or name)
        prefix = _prefix_of(ticket.parent.identifier if ticket.parent else None)
        taken = [e.identifier for e in snapshot.entries]
        number = 1 + max(
            (
                int(i[len(prefix) :])
                for i in taken
                if i.startswith(prefix) and i[len(prefix) :].isdigit()
            ),
            default=0,
        )
        front: dict[str, Any] = {
            "title": ticket.title.strip(),
            "state": self._spelling_of(ticket.state),
        }
        if blockers:
            front["blocked_by"] = blockers
        front["created_at"] = datetime.now(UTC).replace(microsecond=0)
        text = (
            f"---\n{dump_front_matter(front)}---\n{escape_headings(ticket.description.strip())}\n"
        )
        while True:
            path = self.folder / f"{prefix}{number}.md"
            try:
                create_file(path, text.encode("utf-8"))
                break
            except FileExistsError:
                number += 1
            except OSError as exc:
                raise TrackerError(TRACKER_REQUEST, f"cannot create {path.name}: {exc}") from None
        log.info("ticket created", issue_identifier=path.stem, blocked_by=blockers or None)
        created = self._reader.read().tickets.get(path.stem)
        if created is None:
            raise TrackerError(TRACKER_RESPONSE, f"{path.name} was written but cannot be read back")
        return self._reader.read().issue(created, self._terminal)

    def _write(self, call: Edit, issue: Issue) -> dict[str, Any]:
        """Perform one edit for the daemon; failures become TrackerErrors."""
        try:
            return self._edit_file(call, issue)
        except _EditFailed as failed:
            category = TRACKER_REQUEST if failed.code in _TRANSIENT else TRACKER_REJECTED
            raise TrackerError(category, f"{issue.identifier}: {failed.message}") from None

    def _run_tool(self, name: str, call: ToolCall, issue: Issue) -> ToolResult:
        try:
            output = self._edit_file(call, issue)
        except _EditFailed as failed:
            return ToolResult.failure(failed.code, failed.message)
        log.info("ticket updated", tool=name, issue_identifier=issue.identifier)
        return ToolResult(True, output)

    def _edit_file(self, call: Edit, issue: Issue) -> dict[str, Any]:
        try:
            return self._edit_file_once(call, issue)
        finally:
            # Once written: a read that began before the write is not served again.
            self.note_change()

    def _edit_file_once(self, call: Edit, issue: Issue) -> dict[str, Any]:
        now = datetime.now(UTC).replace(microsecond=0)
        try:
            for path in self._files_of(issue):
                file_name = path.name

                def edit(raw: bytes, file_name: str = file_name) -> tuple[bytes, dict[str, Any]]:
                    return call.apply(raw, file_name=file_name, issue_id=issue.id, now=now)

                try:
                    return rewrite_file(path, edit, within=self.folder)
                except (FileNotFoundError, NotThisTicket):
                    continue  # moved, deleted or reused: look for the ticket elsewhere
                except OutsideFolder as exc:
                    raise _EditFailed(
                        "write_refused", f"{exc}; symphony never writes through such a link"
                    ) from None
                except NoSuchComment as exc:
                    raise _EditFailed("comment_not_found", str(exc)) from None
                except FrontMatterError as exc:
                    raise _EditFailed(
                        "ticket_malformed",
                        f"{file_name} cannot be edited: {exc.reason}; its front matter must be "
                        "fixed first",
                    ) from None
                except WriteConflict as exc:
                    raise _EditFailed("write_conflict", f"{exc}; try again") from None
                except OSError as exc:
                    raise _EditFailed(
                        "write_failed", f"cannot update {file_name}: {exc.strerror or exc}"
                    ) from None
        except TrackerError as exc:
            raise _EditFailed("board_unavailable", exc.message) from None
        raise _EditFailed(
            "ticket_not_found",
            f"ticket {issue.identifier} (id {issue.id}) is no longer on the board",
        )

    def _files_of(self, issue: Issue) -> Iterator[Path]:
        """The file the issue was read from, then any file now claiming its id."""
        tried: set[str] = set()
        ref = issue.native_ref.get("path") if issue.native_ref is not None else None
        # native_ref comes back from the session; only a plain ticket name inside the board
        # folder is trusted, so a tool call can never reach another file.
        if isinstance(ref, str) and is_ticket_name(ref) and Path(ref).name == ref:
            tried.add(ref)
            yield self.folder / ref
        snapshot: Snapshot = self._reader.read()
        for entry in snapshot.files_claiming(issue.id):
            if entry.file_name not in tried:
                yield self.folder / entry.file_name

    def _spelling_of(self, state: str) -> str:
        # "done" from the agent becomes the workflow's "Done", keeping the board's spelling tidy.
        key = normalize_state(state)
        for known in self._known_states:
            if normalize_state(known) == key:
                return known
        return state

"""One consistent read of the board folder, and the board-wide facts derived from it.

Every read lists the folder and looks at every ticket file, so a snapshot is never stale. A
file whose inode, size, modification and change times are what the last read saw is not read
again (an idle board costs one `stat` per file); one modified within the last `RACY_WINDOW_NS`
is read anyway, since a second write in the same clock tick as the last read would leave its
times unchanged. Parsing YAML is the expensive part (seconds for ten thousand files),
so parse results are also cached by content: a file is parsed again only after its bytes
change.

Board-wide rules live here because they need every file at once:
- a dispatch id claimed by two files, or identifiers that differ only in case (they would share a
  workspace on a case-insensitive file system), make each file involved unusable;
- blockers are looked up by identifier, case-insensitively.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote_from_bytes

from symphony.base.issue import BlockerRef, Issue, normalize_state
from symphony.tracker.contract import TRACKER_REQUEST, TrackerError

from .ticket import MalformedTicket, Ticket, identifier_of, is_ticket_name, parse_ticket

# A ticket is a page of Markdown; anything far larger is a mistake that would cost every poll.
MAX_TICKET_BYTES = 4 * 1024 * 1024
RACY_WINDOW_NS = 2_000_000_000
"""A file modified this recently is read again even when its stat looks unchanged."""

Version = tuple[int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns) of a ticket file as a read saw it."""

_PACKED_VERSION = struct.Struct("<QQqq")

Entry = Ticket | MalformedTicket


class BoardReader:
    """Reads the folder into a `Snapshot`; safe to call from several threads at once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._last: tuple[dict[str, tuple[bytes, Entry]], Snapshot | None] = ({}, None)
        """What the last read saw: file name -> (its fingerprint, what it parsed to), and the
        snapshot it made. A fingerprint is the 16-byte digest of the file's bytes, followed by
        its packed `Version` when it had one."""

    def read(self) -> Snapshot:
        """The board now. When no file was added, removed or changed since the last read, that
        read's snapshot itself: its lookups and issues are kept, and nothing is built twice."""
        previous, last = self._last
        parsed: dict[str, tuple[bytes, Entry]] = {}
        entries: list[Entry] = []
        unchanged = last is not None
        racy_after = time.time_ns() - RACY_WINDOW_NS
        for name, path, version, link in self._ticket_files():
            outside = escapes(self.folder, path) if link else None
            if outside is not None:
                # Never read: its content would reach a prompt, and tools would write through it.
                reason = f"is a symbolic link to {outside}, outside the board folder; skipped"
                entries.append(
                    MalformedTicket(name, identifier_of(name), identifier_of(name), reason)
                )
                unchanged = False
                continue
            cached = previous.get(name)
            packed = _packed(version)
            if (
                cached is not None
                and packed is not None
                and cached[0].endswith(packed)
                and version is not None
                and version[2] < racy_after
            ):
                parsed[name] = cached
                entries.append(cached[1])
                continue
            try:
                raw = _read_limited(path)
            except FileNotFoundError:
                continue  # deleted since the listing: it has left the board
            except OSError as exc:
                entries.append(
                    MalformedTicket(
                        name, identifier_of(name), None, f"cannot read: {exc.strerror or exc}"
                    )
                )
                unchanged = False
                continue
            if raw is None:
                reason = f"larger than the {MAX_TICKET_BYTES:,}-byte limit for a ticket file"
                entries.append(MalformedTicket(name, identifier_of(name), None, reason))
                unchanged = False
                continue
            digest = hashlib.blake2b(raw, digest_size=16).digest()
            entry = cached[1] if cached is not None and cached[0].startswith(digest) else None
            if entry is None:
                entry = parse_ticket(name, raw)
                unchanged = False
            parsed[name] = (digest + packed if packed is not None else digest, entry)
            entries.append(entry)
        if last is not None and unchanged and len(parsed) == len(previous) == len(last.entries):
            snapshot = last  # every file as it was, and none gone
        else:
            # The listing's order is arbitrary; the board's is by file name.
            entries.sort(key=_file_name)
            snapshot = Snapshot(self.folder, entries)
        # Swapping both at once keeps concurrent readers consistent and drops deleted files.
        self._last = (parsed, snapshot)
        return snapshot

    def _ticket_files(self) -> Iterator[tuple[str, str, Version | None, bool]]:
        """(name, path, version, is a symlink) of each ticket file, in the listing's order: one
        at a time, so a large board is never held twice over while it is read."""
        try:
            with os.scandir(self.folder) as listing:
                for item in listing:
                    if not is_ticket_name(item.name):
                        continue
                    try:
                        if not item.is_file():
                            continue
                        link = item.is_symlink()
                        version = _version(item)
                    except OSError:
                        continue  # a dangling link or a file that just vanished
                    yield item.name, item.path, version, link
        except FileNotFoundError:
            raise TrackerError(
                TRACKER_REQUEST, f"the board folder {self.folder} no longer exists"
            ) from None
        except OSError as exc:
            raise TrackerError(
                TRACKER_REQUEST, f"cannot list the board folder {self.folder}: {exc.strerror}"
            ) from None


@dataclass(frozen=True, slots=True)
class Blocker:
    """A ticket named as a blocker, as the board has it, and whether it holds the ticket up (one
    that is not on the board does not; an unreadable one does)."""

    ref: BlockerRef
    blocks: bool


class Snapshot:
    """The board at one moment: usable tickets by id, and why the other files are unusable."""

    def __init__(self, folder: Path, entries: Iterable[Entry]) -> None:
        self.folder = folder
        self._folder_uri = folder.as_uri().rstrip("/") + "/"
        self._issues: dict[tuple[str, frozenset[str]], Issue] = {}
        """Issues made from this snapshot (a watched board reuses it for every poll until a
        file changes; an `Issue` is immutable)."""
        self.entries = list(entries)
        self._by_fold = _Grouped()
        self._by_id = _Grouped()
        for entry in self.entries:
            self._by_fold.add(entry.identifier.casefold(), entry)
            if entry.id is not None:
                self._by_id.add(entry.id, entry)
        self.unreadable_ids = [e for e in self.entries if e.id is None]

        self.problems: dict[str, str] = {}
        """File name -> why that file cannot be served."""
        for entry in self.entries:
            if isinstance(entry, MalformedTicket):
                self.problems[entry.file_name] = entry.reason
        for entries in self._by_id.shared.values():
            for entry in entries:
                self.problems.setdefault(
                    entry.file_name,
                    f"id {entry.id!r} is also claimed by {_others(entry, entries)}",
                )
        for entries in self._by_fold.shared.values():
            for entry in entries:
                self.problems.setdefault(
                    entry.file_name,
                    f"identifier {entry.identifier!r} differs only in letter case from "
                    f"{_others(entry, entries)}",
                )
        self.tickets: dict[str, Ticket] = {
            entry.id: entry
            for entry in self.entries
            if isinstance(entry, Ticket) and entry.file_name not in self.problems
        }
        self._by_state: dict[str, list[Ticket]] | None = None

    def in_states(self, wanted: frozenset[str]) -> list[Ticket]:
        """The usable tickets whose normalized state is one of `wanted`, in the board's order
        (by file name, as they were read): looked up, not scanned, since a watched board serves
        every poll from one snapshot."""
        if self._by_state is None:
            by_state: defaultdict[str, list[Ticket]] = defaultdict(list)
            for ticket in self.tickets.values():
                by_state[normalize_state(ticket.state)].append(ticket)
            self._by_state = dict(by_state)
        found = [self._by_state[state] for state in wanted if state in self._by_state]
        if len(found) == 1:
            return list(found[0])
        # Each list is in file-name order; so is their merge, whatever order `wanted` has.
        return sorted((t for tickets in found for t in tickets), key=_file_name)

    def issue(self, ticket: Ticket, terminal_states: frozenset[str]) -> Issue:
        made = self._issues.get((ticket.id, terminal_states))
        if made is None:
            made = self._issues[(ticket.id, terminal_states)] = self._issue(ticket, terminal_states)
        return made

    def _issue(self, ticket: Ticket, terminal_states: frozenset[str]) -> Issue:
        blockers = [self.blocker(name, terminal_states) for name in ticket.blocked_by]
        return Issue(
            id=ticket.id,
            identifier=ticket.identifier,
            title=ticket.title,
            state=ticket.state,
            dispatchable=not any(b.blocks for b in blockers),
            description=ticket.description,
            priority=ticket.priority,
            branch_name=ticket.branch_name,
            # Same result as Path.as_uri(), without building a Path per ticket.
            url=self._folder_uri + quote_from_bytes(os.fsencode(ticket.file_name)),
            assignee_id=ticket.assignee,
            labels=ticket.labels,
            blocked_by=tuple(b.ref for b in blockers),
            created_at=ticket.created_at,
            updated_at=ticket.updated_at,
            author=ticket.author,
            native_ref={"path": ticket.file_name},
        )

    def blocker(self, identifier: str, terminal_states: frozenset[str]) -> Blocker:
        found = self._by_fold.get(identifier.casefold())
        if not found:
            # Not on the board: a ticket that was deleted or never existed holds nothing up.
            return Blocker(BlockerRef(None, identifier, None), blocks=False)
        if len(found) == 1 and isinstance(found[0], Ticket):
            ticket = found[0]
            done = normalize_state(ticket.state) in terminal_states
            return Blocker(BlockerRef(ticket.id, ticket.identifier, ticket.state), blocks=not done)
        # On the board but unreadable or ambiguous: it may well be open, so it blocks.
        only = found[0] if len(found) == 1 else None
        return Blocker(
            BlockerRef(only.id if only else None, only.identifier if only else identifier, None),
            blocks=True,
        )

    def files_claiming(self, id_: str) -> list[Entry]:
        return self._by_id.get(id_)


class _Grouped:
    """Entries by a key, most keys having one: a lone entry is kept as itself, and only a key
    two or more share gets a list (a list per ticket was a sixth of a large board's memory)."""

    def __init__(self) -> None:
        self.single: dict[str, Entry] = {}
        self.shared: dict[str, list[Entry]] = {}

    def add(self, key: str, entry: Entry) -> None:
        if key in self.shared:
            self.shared[key].append(entry)
        elif key in self.single:
            self.shared[key] = [self.single.pop(key), entry]
        else:
            self.single[key] = entry

    def get(self, key: str) -> list[Entry]:
        one = self.single.get(key)
        return [one] if one is not None else list(self.shared.get(key, ()))


def escapes(folder: Path, path: str | Path) -> str | None:
    """The real path of `path` when it resolves outside `folder` (symlinks followed), else None."""
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(path)
    return None if os.path.commonpath([real_folder, real]) == real_folder else real


def _version(item: os.DirEntry[str]) -> Version | None:
    try:
        stat = item.stat()  # follows a link: the file read is the one that counts
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _packed(version: Version | None) -> bytes | None:
    """`version` as the 32 bytes a file's fingerprint keeps after the 16 of its content's
    digest: one small object per ticket on a large board, where the digest, a tuple and its
    four integers were six. None when there is no version, or one too large to pack (such a
    file is read at every poll)."""
    if version is None:
        return None
    try:
        return _PACKED_VERSION.pack(*version)
    except struct.error:
        return None


def _read_limited(path: str) -> bytes | None:
    """The file's bytes, or None when it is too large to be a ticket."""
    with open(path, "rb", buffering=0) as handle:
        # Checking the size first avoids allocating a maximum-sized buffer for every small file.
        if os.fstat(handle.fileno()).st_size > MAX_TICKET_BYTES:
            return None
        raw = handle.readall()
    return raw if len(raw) <= MAX_TICKET_BYTES else None


def _file_name(entry: Entry) -> str:
    return entry.file_name


def _others(entry: Entry, entries: list[Entry]) -> str:
    return ", ".join(sorted(e.file_name for e in entries if e is not entry))

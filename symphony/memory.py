"""Memory across tickets: short Markdown notes in a folder, one lesson a file.

Agents add a note through the host-side tool `record_learning`; the daemon adds the facts it
saw itself (a gate that failed, and whether the fix turns made it pass). Each prompt gets
`{{ memory }}`: the notes most relevant to the ticket (same ticket, shared labels, files it
touches, topic words in its title and description), newest first among equals, within
`memory.budget_chars`. People read, edit and delete the notes as plain files.

A note is a Markdown file with a small YAML front matter:

    ---
    topic: test database
    ticket: ABC-12
    labels: [backend]
    files: [tests/conftest.py]
    recorded: 2026-12-01T15:00:00+00:00
    source: agent
    ---
    Run `make db` before the integration tests, or they hang.

A file without front matter is a note too: its topic is the file's name. Reading never fails a
prompt: an unreadable or malformed file is skipped (or read as plain text).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.base.tools import (
    ToolResult,
    ToolSpec,
    invalid_arguments,
    is_inline,
    object_schema,
    string_schema,
)
from symphony.config.sections import MemorySettings, Settings
from symphony.core.footprint import files_named, normalize_path, overlap
from symphony.core.verification import Verification

RECORD_LEARNING = "record_learning"
MAX_TOPIC_CHARS = 100
MAX_TEXT_CHARS = 2_000
MAX_NOTE_FILES = 20
MAX_NOTES_READ = 2_000
"""Notes read for one prompt at most (the newest files): a folder of years stays fast."""
MAX_FILE_BYTES = 20_000
MIN_CUT_CHARS = 200
"""A note that does not fit whole is cut only when this much room is left for it."""

_WORD = re.compile(r"[a-z0-9][a-z0-9_-]{2,}")
# Words too common to say what a note or a ticket is about.
_COMMON_WORDS = (
    "the and for with that this from into when then than are was were has have not but you "
    "all any can its our out use how why what which who will"
)
_STOPWORDS = frozenset(_COMMON_WORDS.split())


@dataclass(frozen=True, slots=True)
class Note:
    """One note of the memory folder: its lesson, and the ticket, labels and files it concerns."""

    path: Path
    topic: str
    text: str
    ticket: str | None = None
    labels: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    recorded: datetime | None = None
    source: str = "person"
    """`agent` (record_learning), `daemon` (a fact it saw) or `person` (a file without one)."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """What relevance is judged by: the ticket, its labels, its words and its files."""

    identifier: str
    labels: frozenset[str] = frozenset()
    words: frozenset[str] = frozenset()
    files: frozenset[str] = frozenset()

    @classmethod
    def of(cls, issue: Issue, files: Iterable[str] = (), plan: str | None = None) -> Ticket:
        text = f"{issue.title}\n{issue.description or ''}\n{plan or ''}"
        return cls(
            issue.identifier,
            frozenset(label.lower() for label in issue.labels),
            words_of(text),
            frozenset(files) | files_named(issue.description) | files_named(plan),
        )


def words_of(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS)


# Choosing and rendering (pure)


def relevance(note: Note, ticket: Ticket) -> int:
    """How much a note concerns the ticket; 0 for a note about nothing it shares."""
    score = 0
    if note.ticket is not None and note.ticket == ticket.identifier:
        score += 8
    score += 4 * len({label.lower() for label in note.labels} & ticket.labels)
    score += 4 * len(overlap(note.files, ticket.files))
    topic = words_of(note.topic)
    score += 2 * len(topic & ticket.words)
    return score


def choose(notes: Sequence[Note], ticket: Ticket) -> list[Note]:
    """Every note, the most relevant first and the newest first among equals: general notes
    come after the ones about this ticket's labels, files and topics."""
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(notes, key=lambda n: (-relevance(n, ticket), -(n.recorded or epoch).timestamp()))


def render(notes: Sequence[Note], budget_chars: int, masker: SecretMasker) -> str | None:
    """The notes as Markdown bullets, in order, never longer than `budget_chars`; a note that
    does not fit whole is cut when enough room is left, and what is left out is counted.
    None when there are no notes (so `{% if memory %}` reads naturally)."""
    if not notes or budget_chars <= 0:
        return None
    lines: list[str] = []
    for index, note in enumerate(notes):
        entry = _entry(note, masker)
        after = len(notes) - index - 1
        tail = [_left_out(after)] if after else []
        if _joined([*lines, entry, *tail]) <= budget_chars:
            lines.append(entry)
            continue
        room = budget_chars - _joined([*lines, "", *tail])
        if room >= MIN_CUT_CHARS:
            lines += [entry[: room - 3] + "...", *tail]
        else:
            rest = _left_out(after + 1)
            if _joined([*lines, rest]) <= budget_chars:
                lines.append(rest)
        break
    return "\n".join(lines) or None


def _joined(lines: Sequence[str]) -> int:
    return sum(map(len, lines)) + max(len(lines) - 1, 0)


def _entry(note: Note, masker: SecretMasker) -> str:
    about = ", ".join(
        part
        for part in (
            note.ticket,
            note.recorded.date().isoformat() if note.recorded else None,
            "noted by the daemon" if note.source == "daemon" else None,
        )
        if part
    )
    text = " ".join(masker.mask(note.text).split())
    head = f"- **{masker.mask(note.topic)}**" + (f" ({about})" if about else "")
    return f"{head}: {text}"


def _left_out(count: int) -> str:
    return f"- ... {count} more note{'s' if count != 1 else ''} not shown"


# The folder (I/O)


class Memory:
    """The notes folder: read for prompts and `symphony memory`, written by the tool and the
    daemon. Writes are atomic (a temporary file linked into place) and never overwrite a note:
    two lessons on one topic in the same second get two files."""

    def __init__(
        self,
        settings: MemorySettings,
        masker: SecretMasker,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.masker = masker
        """The daemon's secrets are masked in every note written and every note shown."""
        self._clock = clock or (lambda: datetime.now(UTC))

    @property
    def folder(self) -> Path:
        return self.settings.folder

    def notes(self) -> list[Note]:
        """Every readable note, newest file first (at most MAX_NOTES_READ)."""
        try:
            entries = [
                entry
                for entry in os.scandir(self.folder)
                if entry.name.endswith(".md")
                and not entry.name.startswith(".")
                and entry.is_file(follow_symlinks=False)
            ]
        except OSError:
            return []
        entries.sort(key=lambda e: _mtime(e), reverse=True)
        notes = []
        for entry in entries[:MAX_NOTES_READ]:
            note = read_note(Path(entry.path))
            if note is not None:
                notes.append(note)
        return notes

    def _noted(self, topic: str, text: str) -> Note | None:
        """A note already holding this lesson. Only files named for the topic are read: the
        same topic always makes the same name part, so the folder is never read whole."""
        part = _slug(topic)
        try:
            names = [
                entry.path
                for entry in os.scandir(self.folder)
                if entry.name.endswith(".md") and f"-{part}" in entry.name
            ]
        except OSError:
            return None
        for path in names:
            note = read_note(Path(path))
            if note is not None and note.topic.lower() == topic.lower() and note.text == text:
                return note
        return None

    def is_empty(self) -> bool:
        """No note at all (a quick look: no file is read)."""
        try:
            with os.scandir(self.folder) as entries:
                return not any(
                    e.name.endswith(".md") and not e.name.startswith(".") for e in entries
                )
        except OSError:
            return True

    def for_prompt(self, ticket: Ticket) -> str | None:
        return render(choose(self.notes(), ticket), self.settings.budget_chars, self.masker)

    def record(
        self,
        topic: str,
        text: str,
        *,
        ticket: str | None,
        labels: Iterable[str] = (),
        files: Iterable[str] = (),
        source: str = "agent",
    ) -> Note:
        """Write one note; secrets the daemon knows are masked before anything is written. A
        lesson already noted (same topic and text, from any ticket) is not written again: the
        existing note is returned."""
        now = self._clock()
        topic = self.masker.mask(" ".join(topic.split()))
        text = self.masker.mask(text.strip())
        repeat = self._noted(topic, text)
        if repeat is not None:
            return repeat
        header: dict[str, Any] = {"topic": topic}
        if ticket:
            header["ticket"] = ticket
        if labels := list(dict.fromkeys(labels)):
            header["labels"] = labels
        if files := list(dict.fromkeys(files)):
            header["files"] = files
        header["recorded"] = now.isoformat(timespec="seconds")
        header["source"] = source
        body = "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n"
        body += text + "\n"
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = "-".join(
            part for part in (now.strftime("%Y%m%d-%H%M%S"), _slug(topic), _slug(ticket)) if part
        )
        temp = self.folder / f".{stem}.{os.getpid()}.tmp"
        temp.write_text(body, encoding="utf-8")
        try:
            for n in range(1, 1000):
                path = self.folder / (f"{stem}.md" if n == 1 else f"{stem}-{n}.md")
                try:
                    os.link(temp, path)
                except FileExistsError:
                    continue
                break
            else:
                raise FileExistsError(f"no free name for {stem}.md")
        finally:
            with contextlib.suppress(OSError):
                temp.unlink()
        return Note(path, topic, text, ticket, tuple(labels), tuple(files), now, source)


def memory_of(settings: Settings, masker: SecretMasker) -> Memory | None:
    """The workflow's notes folder, or None when memory is off."""
    if settings.memory is None or not settings.memory.enabled:
        return None
    return Memory(settings.memory, masker)


# Parsed notes by path, valid while the file's size and modification time stay the same: a
# prompt reads the whole folder, and parsing two thousand front matters each time would cost
# half a second.
_parsed: dict[Path, tuple[tuple[int, int], Note | None]] = {}
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_note(path: Path) -> Note | None:
    """The note in `path`, or None when it cannot be read or says nothing."""
    try:
        stat = path.stat()
    except OSError:
        return None
    version = (stat.st_mtime_ns, stat.st_size)
    known = _parsed.get(path)
    if known is not None and known[0] == version:
        return known[1]
    note = _read_note(path)
    if len(_parsed) >= 2 * MAX_NOTES_READ:
        _parsed.clear()
    _parsed[path] = (version, note)
    return note


def _read_note(path: Path) -> Note | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES)
        content = raw.decode("utf-8", errors="replace")
    except OSError:
        return None
    header: dict[str, Any] = {}
    text = content
    if content.startswith("---\n"):
        end = content.find("\n---", 4)
        if end != -1:
            with contextlib.suppress(yaml.YAMLError):
                parsed = yaml.load(content[4:end], Loader=_YAML_LOADER)
                if isinstance(parsed, dict):
                    header = parsed
                    text = content[end + 4 :].lstrip("-").lstrip("\n")
    text = text.strip()
    if not text:
        return None
    topic = header.get("topic")
    if not isinstance(topic, str) or not topic.strip():
        topic = path.stem.replace("-", " ").replace("_", " ")
    recorded = header.get("recorded")
    when: datetime | None = None
    if isinstance(recorded, datetime):
        when = recorded if recorded.tzinfo else recorded.replace(tzinfo=UTC)
    elif isinstance(recorded, str):
        with contextlib.suppress(ValueError):
            when = datetime.fromisoformat(recorded)
            when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if when is None:
        with contextlib.suppress(OSError):
            when = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    ticket = header.get("ticket")
    source = header.get("source")
    return Note(
        path,
        topic.strip()[:MAX_TOPIC_CHARS],
        text,
        str(ticket) if ticket else None,
        _strings(header.get("labels")),
        tuple(p for p in map(normalize_path, _strings(header.get("files"))) if p),
        when,
        source if source in ("agent", "daemon") else "person",
    )


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value if isinstance(v, str | int) and str(v).strip())


def _mtime(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0


def _slug(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-")[:40].strip("-")


# The agent's tool


def record_learning_spec() -> ToolSpec:
    return ToolSpec(
        name=RECORD_LEARNING,
        description=(
            "Record a lesson for later tickets on this repository: something you had to find "
            "out that the next agent should know (a command that must run first, a trap in "
            "the code, a convention). One short note per lesson; later prompts include the "
            "notes relevant to their ticket."
        ),
        input_schema=object_schema(
            {
                "topic": string_schema(MAX_TOPIC_CHARS, "A few words the lesson is about."),
                "text": string_schema(MAX_TEXT_CHARS, "The lesson, in Markdown."),
                "files": {
                    "type": "array",
                    "maxItems": MAX_NOTE_FILES,
                    "items": string_schema(500, "A repository path the lesson concerns."),
                },
            },
            ["topic", "text"],
        ),
    )


def parse_learning(arguments: Any) -> tuple[str, str, tuple[str, ...]] | ToolResult:
    """(topic, text, files) of a valid call, or the failure to hand back to the agent."""
    if not isinstance(arguments, dict):
        return invalid_arguments(f"{RECORD_LEARNING} takes an object of arguments")
    extra = sorted(set(arguments) - {"topic", "text", "files"})
    if extra:
        return invalid_arguments(f"unexpected argument(s) {', '.join(extra)}")
    topic, text = arguments.get("topic"), arguments.get("text")
    if not isinstance(topic, str) or not topic.strip() or len(topic) > MAX_TOPIC_CHARS:
        return invalid_arguments(f"'topic' must be text of 1 to {MAX_TOPIC_CHARS} characters")
    if not is_inline(topic):
        return invalid_arguments("'topic' must be one line")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        return invalid_arguments(f"'text' must be text of 1 to {MAX_TEXT_CHARS} characters")
    files = arguments.get("files", [])
    if not isinstance(files, list) or len(files) > MAX_NOTE_FILES:
        return invalid_arguments(f"'files' must be a list of at most {MAX_NOTE_FILES} paths")
    paths = []
    for value in files:
        path = normalize_path(value) if isinstance(value, str) else ""
        if not path:
            return invalid_arguments(
                "each file must be a path inside the repository, like src/app.py"
            )
        paths.append(path)
    return topic.strip(), text.strip(), tuple(dict.fromkeys(paths))


# The daemon's own facts


def gate_lessons(verification: Verification, stage: str) -> list[tuple[str, str]]:
    """(topic, text) for each gate that failed during a hand-off attempt: what failed first,
    and whether the fix turns made it pass."""
    failed: dict[str, tuple[str, str]] = {}
    for gate_round in verification.rounds:
        for result in gate_round.failures:
            failed.setdefault(result.name, (result.run, result.detail))
    if not failed:
        return []
    last = {result.name: result for result in verification.last.results}
    lessons = []
    for name, (run, detail) in failed.items():
        final = last.get(name)
        fixes = verification.fix_turns
        if final is not None and final.passed:
            how = f"it passed after {fixes} fix turn{'s' if fixes != 1 else ''}"
        else:
            how = f"it still failed after {fixes} fix turn{'s' if fixes != 1 else ''}"
        lessons.append(
            (f"gate {name}", f"In stage {stage}, gate `{name}` (`{run}`) {detail}; {how}.")
        )
    return lessons


@dataclass(slots=True)
class Listing:
    """`symphony memory`: the notes, newest first, as rows for a person."""

    folder: Path
    notes: list[Note] = field(default_factory=list)

    def lines(self) -> list[str]:
        if not self.notes:
            return [f"no notes in {self.folder}"]
        rows = [f"{len(self.notes)} note{'s' if len(self.notes) != 1 else ''} in {self.folder}"]
        for note in self.notes:
            when = note.recorded.strftime("%Y-%m-%d") if note.recorded else "?"
            ticket = note.ticket or "-"
            first = " ".join(note.text.split())
            first = first if len(first) <= 80 else first[:77] + "..."
            rows.append(f"{when}  {ticket:<10} {note.topic}: {first}")
            rows.append(f"            {note.path.name}")
        return rows

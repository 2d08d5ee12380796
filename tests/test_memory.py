"""Memory across tickets: notes on disk, the record_learning tool, `{{ memory }}` in prompts."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.base.tools import ToolResult
from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sections import MemorySettings
from symphony.core.verification import GateResult, GateRound, Verification
from symphony.memory import (
    RECORD_LEARNING,
    Memory,
    Note,
    Ticket,
    choose,
    gate_lessons,
    parse_learning,
    read_note,
    relevance,
    render,
)
from tests.cli_runner import Cli
from tests.harness import Board, scenario_env, start

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def issue(identifier: str = "ABC-1", **kw: object) -> Issue:
    fields: dict[str, object] = {
        "id": f"id-{identifier}",
        "identifier": identifier,
        "title": "Fix the flaky login test",
        "state": "Todo",
        "dispatchable": True,
    }
    fields.update(kw)
    return Issue(**fields)  # type: ignore[arg-type]


def memory(
    tmp_path: Path,
    clock: Clock | None = None,
    budget: int = 4000,
    masker: SecretMasker | None = None,
) -> Memory:
    settings = MemorySettings(tmp_path / "memory", budget_chars=budget)
    return Memory(settings, masker or SecretMasker(), clock=clock)


def test_a_recorded_note_is_a_plain_markdown_file_read_back_whole(tmp_path: Path) -> None:
    mem = memory(tmp_path, Clock())
    note = mem.record(
        "test database",
        "Run `make db` before the integration tests.\n\nThey hang otherwise.",
        ticket="ABC-1",
        labels=["backend"],
        files=["tests/conftest.py"],
    )
    text = note.path.read_text()
    assert text.startswith("---\ntopic: test database\nticket: ABC-1\n")
    assert text.endswith("They hang otherwise.\n")
    [read] = mem.notes()
    assert (read.topic, read.ticket, read.labels, read.files, read.source) == (
        "test database", "ABC-1", ("backend",), ("tests/conftest.py",), "agent",
    )  # fmt: skip
    assert read.recorded == T0
    assert read.text == "Run `make db` before the integration tests.\n\nThey hang otherwise."


def test_two_notes_on_one_topic_in_the_same_second_never_overwrite_each_other(
    tmp_path: Path,
) -> None:
    mem = memory(tmp_path, Clock())
    first = mem.record("ci", "one", ticket="ABC-1")
    second = mem.record("ci", "two", ticket="ABC-1")
    assert first.path != second.path
    assert mem.record("CI", "two", ticket="ABC-2").path == second.path  # noted already
    assert sorted(n.text for n in mem.notes()) == ["one", "two"]
    assert not [p for p in (tmp_path / "memory").iterdir() if p.name.startswith(".")]


def test_secrets_are_masked_before_a_note_reaches_the_disk(tmp_path: Path) -> None:
    masker = SecretMasker()
    masker.set(["tok_supersecret_42"])
    note = memory(tmp_path, Clock(), masker=masker).record(
        "auth tok_supersecret_42", "export API_TOKEN=tok_supersecret_42", ticket="ABC-1"
    )
    assert "tok_supersecret_42" not in note.path.read_text()
    assert "API_TOKEN=[redacted]" in note.path.read_text()


def test_a_person_s_plain_file_is_a_note_and_broken_files_never_fail_a_prompt(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "release-process.md").write_text("Tag with `vX.Y.Z`; CI publishes.\n")
    (folder / "broken.md").write_text("---\ntopic: [unclosed\n---\nStill read as text.\n")
    (folder / "empty.md").write_text("---\ntopic: nothing\n---\n\n")
    (folder / "binary.md").write_bytes(b"\xff\xfe\x00garbage")
    (folder / "notes.txt").write_text("not markdown, not a note")
    os.symlink("/etc/passwd", folder / "link.md")
    notes = {n.path.name: n for n in memory(tmp_path).notes()}
    assert set(notes) == {"release-process.md", "broken.md", "binary.md"}
    assert notes["release-process.md"].topic == "release process"
    assert notes["release-process.md"].source == "person"
    assert "Still read as text." in notes["broken.md"].text
    assert read_note(folder / "missing.md") is None


def test_notes_about_the_ticket_come_first_then_the_newest() -> None:
    ticket = Ticket.of(
        issue(labels=("backend",), description="The test in `tests/test_login.py` flakes."),
        files=["src/auth.py"],
    )
    old_general = Note(Path("a.md"), "release", "Tag it.", recorded=T0 - timedelta(days=9))
    new_general = Note(Path("b.md"), "deploys", "Friday freeze.", recorded=T0)
    by_label = Note(Path("c.md"), "queues", "Use the outbox.", labels=("backend",))
    by_file = Note(Path("d.md"), "auth", "Tokens expire.", files=("src",))
    by_topic = Note(Path("e.md"), "login flow", "Retry once.", recorded=T0)
    own = Note(Path("f.md"), "x", "Earlier attempt learned this.", ticket="ABC-1")
    assert relevance(old_general, ticket) == 0
    assert relevance(by_file, ticket) > 0  # a directory note covers the files under it
    order = choose([old_general, new_general, by_label, by_file, by_topic, own], ticket)
    assert [n.path.name for n in order] == ["f.md", "c.md", "d.md", "e.md", "b.md", "a.md"]


@pytest.mark.parametrize("budget", [0, 120, 250, 700, 5000])
def test_the_rendered_memory_never_exceeds_its_budget(budget: int) -> None:
    notes = [
        Note(Path(f"{n}.md"), f"topic {n}", "word " * (30 + 20 * n), ticket=f"ABC-{n}")
        for n in range(12)
    ]
    text = render(notes, budget, SecretMasker())
    if budget == 0:
        assert text is None
        return
    assert text is not None and len(text) <= budget
    if budget < 5000:
        assert "more notes not shown" in text
    if budget >= 250:
        assert text.startswith("- **topic 0** (ABC-0): word")


def test_no_notes_render_as_nil_so_templates_can_test_for_them() -> None:
    assert render([], 4000, SecretMasker()) is None


def test_record_learning_arguments_are_validated() -> None:
    assert parse_learning({"topic": "ci", "text": "Use -x.", "files": ["./src//a.py"]}) == (
        "ci", "Use -x.", ("src/a.py",),
    )  # fmt: skip
    for bad in (
        None,
        {"topic": "ci"},
        {"topic": "", "text": "x"},
        {"topic": "two\nlines", "text": "x"},
        {"topic": "t" * 101, "text": "x"},
        {"topic": "ci", "text": "x" * 2001},
        {"topic": "ci", "text": "x", "files": ["../outside"]},
        {"topic": "ci", "text": "x", "files": ["/etc/passwd"]},
        {"topic": "ci", "text": "x", "extra": 1},
    ):
        result = parse_learning(bad)
        assert isinstance(result, ToolResult) and not result.success, bad
        assert result.output["error"] == "invalid_arguments"


def test_the_daemon_notes_each_failed_gate_and_how_the_fix_went() -> None:
    def result(name: str, passed: bool) -> GateResult:
        outcome = "passed" if passed else "failed"
        detail = "exited with status 0" if passed else "exited with status 1"
        return GateResult(name, f"make {name}", outcome, 0 if passed else 1, 0.1, detail)

    fixed = Verification(
        (
            GateRound((result("lint", True), result("tests", False))),
            GateRound((result("lint", True), result("tests", True))),
        )
    )
    assert gate_lessons(fixed, "implement") == [
        (
            "gate tests",
            "In stage implement, gate `tests` (`make tests`) exited with status 1; "
            "it passed after 1 fix turn.",
        )
    ]
    stuck = Verification((GateRound((result("tests", False),)),) * 3)
    assert gate_lessons(stuck, "implement")[0][1].endswith("it still failed after 2 fix turns.")
    assert gate_lessons(Verification((GateRound((result("lint", True),)),)), "x") == []


async def test_a_learning_recorded_on_one_ticket_reaches_the_next_ticket_s_prompt(
    board: Board,
) -> None:
    board.ticket("ABC-1", priority=1)
    board.ticket("ABC-2", priority=2)
    board.write_workflow(
        agent={"max_concurrent_agents": 1},
        prompt=(
            "Work on {{ issue.identifier }}.{% if memory %}\n"
            "What earlier tickets learned:\n{{ memory }}{% endif %}"
        ),
        memory={"budget_chars": 600},
        polling_ms=200,
    )
    record = board.root / "agent.jsonl"
    env = scenario_env(
        "tool,complete",
        FAKE_AGENT_TOOL=RECORD_LEARNING,
        FAKE_AGENT_TOOL_ARGS=json.dumps(
            {"topic": "test database", "text": "Run `make db` before the integration tests."}
        ),
        FAKE_AGENT_RECORD=str(record),
    )
    notes = board.root / ".symphony" / "memory"
    run = start(board, env, watch=False)
    try:
        await run.until(lambda: notes.is_dir() and any(notes.glob("*.md")))
        board.ticket("ABC-1", state="Done")
        await run.until(lambda: "ABC-2" in run.dispatched)
        await run.until(lambda: "Work on ABC-2" in record.read_text())
    finally:
        await run.stop()
    prompts = [
        item["text"]
        for line in record.read_text().splitlines()
        if (message := json.loads(line)).get("method") == "turn/start"
        for item in message["params"]["input"]
    ]
    # A first prompt opens with the standing instruction on fenced text.
    first = next(p for p in prompts if "\n\nWork on ABC-1" in p)
    second = next(p for p in prompts if "\n\nWork on ABC-2" in p)
    assert "notes from earlier tickets" in second  # fenced as material
    assert "What earlier tickets learned" not in first
    assert "- **test database** (ABC-1, " in second
    assert "Run `make db` before the integration tests." in second
    # ABC-2's agent reported the same lesson again: it is not noted twice.
    [note] = notes.glob("*.md")
    assert "ticket: ABC-1" in note.read_text()


def test_memory_settings_default_beside_the_workflow_and_reject_bad_values(
    board: Board,
) -> None:
    board.write_workflow()
    settings = load_settings(board.workflow, {})
    assert settings.memory == MemorySettings(board.root / ".symphony" / "memory")
    board.write_workflow(memory={"folder": "notes", "budget_chars": 100, "enabled": False})
    settings = load_settings(board.workflow, {})
    assert settings.memory == MemorySettings(board.root / "notes", 100, False)
    for bad in ({"budget_chars": -1}, {"enabled": "yes"}, {"folder": ""}):
        board.write_workflow(memory=bad)
        with pytest.raises(ConfigError):
            load_settings(board.workflow, {})


def test_symphony_memory_lists_the_notes_and_render_shows_them_in_the_prompt(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1", labels=["backend"])
    board.write_workflow(prompt="Work on {{ issue.identifier }}.\n{{ memory }}")
    assert symphony_cli("memory", cwd=board.root).stdout.startswith("no notes in ")
    mem = Memory(MemorySettings(board.root / ".symphony" / "memory"), SecretMasker())
    mem.record("queues", "Use the outbox table.", ticket="ABC-0", labels=["backend"])
    listed = symphony_cli("memory", cwd=board.root)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"1 note in {board.root / '.symphony' / 'memory'}"
    assert "ABC-0" in lines[1] and "queues: Use the outbox table." in lines[1]
    rendered = symphony_cli("render", "ABC-1", cwd=board.root)
    assert rendered.returncode == 0, rendered.stderr
    assert "- **queues** (ABC-0, " in rendered.stdout
    checked = symphony_cli("check", cwd=board.root)
    assert "memory        1 note in " in checked.stdout
    board.write_workflow(memory={"enabled": False})
    assert (
        symphony_cli("memory", cwd=board.root).stdout.strip()
        == "memory is off (memory.enabled: false)"
    )


def test_a_person_s_edit_or_deletion_of_a_note_shows_in_the_next_prompt(tmp_path: Path) -> None:
    mem = memory(tmp_path, Clock())
    note = mem.record("ci", "Use -x.", ticket="ABC-1")
    assert "Use -x." in (mem.for_prompt(Ticket("ABC-2")) or "")
    note.path.write_text(note.path.read_text().replace("Use -x.", "Use --maxfail=1 instead."))
    assert "Use --maxfail=1 instead." in (mem.for_prompt(Ticket("ABC-2")) or "")
    note.path.unlink()
    assert mem.for_prompt(Ticket("ABC-2")) is None

"""What a re-read of WORKFLOW.md asks for: the file as applied, a rejection (said once per
version), or settings to apply, a tracker made only when its settings changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from symphony.config.load import load_settings
from symphony.config.sections import Settings
from symphony.daemon.reload import (
    Reloaded,
    ReloadRejected,
    StillRejected,
    Unchanged,
    reload_workflow,
)
from symphony.tracker.contract import Tracker
from tests.fakes.tracker import MemoryTracker

FRONT = """---
tracker:
  kind: local
  provider: {{path: board}}
  active_states: [Todo]
  terminal_states: [Done]
agent:
  max_concurrent_agents: {agents}
---
Work on {{{{ issue.identifier }}}}
"""


def write(path: Path, agents: int = 2, body: str | None = None) -> Path:
    path.write_text(body if body is not None else FRONT.format(agents=agents))
    return path


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    return write(tmp_path / "WORKFLOW.md")


def reload(current: Settings, tracker: Tracker, rejected: str | None = None) -> object:
    made: list[Settings] = []

    def new_tracker(settings: Settings) -> Tracker:
        made.append(settings)
        return MemoryTracker()

    answer = reload_workflow(current, tracker, {}, rejected, new_tracker)
    if isinstance(answer, Reloaded):
        assert (answer.tracker is tracker) == (not made)
    return answer


def test_the_file_as_applied_is_unchanged(workflow: Path) -> None:
    assert isinstance(reload(load_settings(workflow, {}), MemoryTracker()), Unchanged)


def test_a_changed_file_gives_new_settings_and_keeps_a_tracker_whose_settings_are_the_same(
    workflow: Path,
) -> None:
    current, tracker = load_settings(workflow, {}), MemoryTracker()
    write(workflow, agents=5)
    answer = reload(current, tracker)
    assert isinstance(answer, Reloaded)
    assert answer.settings.agent.max_concurrent_agents == 5
    assert answer.tracker is tracker


def test_a_changed_tracker_section_makes_a_new_tracker(workflow: Path) -> None:
    current, tracker = load_settings(workflow, {}), MemoryTracker()
    write(workflow, body=FRONT.format(agents=2).replace("[Todo]", "[Todo, Doing]"))
    answer = reload(current, tracker)
    assert isinstance(answer, Reloaded) and answer.tracker is not tracker


def test_an_invalid_file_is_rejected_once_per_version(workflow: Path) -> None:
    current = load_settings(workflow, {})
    write(workflow, body=FRONT.format(agents="many"))
    first = reload(current, MemoryTracker())
    assert isinstance(first, ReloadRejected) and "max_concurrent_agents" in first.message
    assert first.fingerprint is not None
    assert isinstance(reload(current, MemoryTracker(), first.fingerprint), StillRejected)


def test_a_prompt_that_does_not_parse_is_rejected(workflow: Path) -> None:
    current = load_settings(workflow, {})
    write(workflow, body=FRONT.format(agents=2).replace("{{ issue.identifier }}", "{% if %}"))
    answer = reload(current, MemoryTracker())
    assert isinstance(answer, ReloadRejected)


def test_a_missing_file_is_rejected_without_a_fingerprint(workflow: Path) -> None:
    current = load_settings(workflow, {})
    workflow.unlink()
    answer = reload(current, MemoryTracker())
    assert isinstance(answer, ReloadRejected) and answer.fingerprint is None


def test_an_adapter_bug_rejects_the_reload_instead_of_raising(workflow: Path) -> None:
    current = load_settings(workflow, {})
    write(workflow, body=FRONT.format(agents=2).replace("[Done]", "[Done, Gone]"))

    def broken(settings: Settings) -> Tracker:
        raise KeyError("token")

    answer = reload_workflow(current, MemoryTracker(), {}, None, broken)
    assert isinstance(answer, ReloadRejected) and answer.message.startswith(
        "internal error: KeyError"
    )

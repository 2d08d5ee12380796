"""Small builders for settings and issues used across the tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from symphony.base.issue import Issue
from symphony.config.codex import CodexSettings
from symphony.config.sections import (
    AgentSettings,
    HooksSettings,
    OverlapMode,
    PollingSettings,
    Settings,
    TrackerSettings,
    WorkspaceSettings,
)
from symphony.config.stages import Stage

WALL = datetime(2026, 1, 1, tzinfo=UTC)


def make_issue(identifier: str = "ABC-1", **fields: Any) -> Issue:
    values: dict[str, Any] = {
        "id": f"id-{identifier}",
        "identifier": identifier,
        "title": f"Title of {identifier}",
        "state": "Todo",
        "dispatchable": True,
    }
    values.update(fields)
    return Issue(**values)


def make_settings(
    *,
    root: Path = Path("/tmp/symphony-test-workspaces"),
    active: tuple[str, ...] = ("Todo", "In Progress"),
    terminal: tuple[str, ...] = ("Done", "Cancelled"),
    required_labels: tuple[str, ...] = (),
    max_concurrent: int = 10,
    per_state: dict[str, int] | None = None,
    max_backoff_ms: int = 300_000,
    max_turns: int = 20,
    stall_timeout_ms: int = 300_000,
    codex: CodexSettings | None = None,
    hooks: HooksSettings | None = None,
    prompt: str = "Work on {{ issue.identifier }}",
    overlap: str = "warn",
) -> Settings:
    return Settings(
        workflow_path=root.parent / "WORKFLOW.md",
        tracker=TrackerSettings(
            kind="local",
            provider=MappingProxyType({}),
            active_states=active,
            terminal_states=terminal,
            required_labels=required_labels,
        ),
        polling=PollingSettings(),
        workspace=WorkspaceSettings(root=root),
        hooks=hooks or HooksSettings(),
        agent=AgentSettings(
            max_concurrent_agents=max_concurrent,
            max_turns=max_turns,
            max_retry_backoff_ms=max_backoff_ms,
            max_concurrent_agents_by_state=MappingProxyType(per_state or {}),
            overlap=OverlapMode(overlap),
        ),
        agents=MappingProxyType(
            {"codex": codex or CodexSettings(stall_timeout_ms=stall_timeout_ms)}
        ),
        prompt_template=prompt,
        fingerprint="test",
    )


def make_stage(
    name: str,
    states: tuple[str, ...],
    *,
    on_success: str = "Human Review",
    max_total_turns: int = 4,
    **fields: Any,
) -> Stage:
    """A stage as the parser would build it, escalating to `Needs Attention`."""
    return Stage(
        name=name,
        states=states,
        prompt_template="Work",
        prompt_source="WORKFLOW.md",
        prompt_line=1,
        on_success=on_success,
        on_blocked="Needs Attention",
        on_stuck="Needs Attention",
        max_total_turns=max_total_turns,
        **fields,
    )

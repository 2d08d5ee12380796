"""One run attempt for one ticket: workspace, prompt, agent session, turn loop, hooks.

The runner reports agent events through a callback and ends by returning (a normal exit) or by
raising `AttemptFailed` with a concise reason. It never touches scheduling state: what happens
after it ends is the orchestrator's decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from symphony.agents import AgentEvent, AgentLaunch, AgentSession, EventSink, open_session
from symphony.config import Settings
from symphony.errors import SymphonyError
from symphony.issue import Issue
from symphony.observability.logging import masker
from symphony.prompt import continuation_prompt, render_prompt
from symphony.scheduling import is_routable
from symphony.tools import ToolResult
from symphony.tracker import TRACKER_RATE_LIMITED, Tracker, TrackerError
from symphony.workspace import Workspace, WorkspaceManager

log = structlog.get_logger("symphony.runner")

T = TypeVar("T")

# A tool call blocks the agent's turn; a hung tracker must not hold it for the turn timeout.
TOOL_TIMEOUT_S = 120.0
# A rate-limited refresh after a turn waits for the provider's reset when it is this close,
# rather than failing an attempt that did nothing wrong.
RATE_LIMIT_WAIT_MAX_S = 30.0


class AttemptFailed(Exception):
    """The attempt ended abnormally; the message is the reason shown to operators."""


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What one attempt runs with, captured at dispatch: a reload never changes it midway."""

    settings: Settings
    tracker: Tracker
    workspaces: WorkspaceManager
    agent_env: Mapping[str, str]
    open_session: Callable[[AgentLaunch], AgentSession] = open_session


async def run_attempt(
    issue: Issue, attempt: int | None, ctx: AttemptContext, on_event: EventSink
) -> None:
    settings = ctx.settings
    bound = log.bind(attempt=attempt)
    workspace = await _step("workspace", ctx.workspaces.prepare(issue.identifier))
    try:
        await _step("before_run hook", ctx.workspaces.before_run(workspace))
        current = issue

        async def handle_tool(name: str, arguments: Any) -> ToolResult:
            try:
                async with asyncio.timeout(TOOL_TIMEOUT_S):
                    result = await ctx.tracker.execute_tool(name, arguments, current)
            except TimeoutError:
                return ToolResult.failure(
                    "tool_timeout", f"{name} did not finish within {TOOL_TIMEOUT_S:.0f}s"
                )
            # A provider error that echoes a credential must not hand it to the agent.
            return ToolResult(result.success, masker.mask_value(result.output))

        _check_cwd(ctx.workspaces, workspace)
        launch = AgentLaunch(
            workspace=workspace.path,
            settings=settings.codex,
            env={
                **ctx.agent_env,
                "SYMPHONY_ISSUE_IDENTIFIER": issue.identifier,
                "SYMPHONY_WORKSPACE": str(workspace.path),
            },
            tools=ctx.tracker.agent_tools(),
            handle_tool=handle_tool,
            on_event=on_event,
        )
        session = ctx.open_session(launch)
        try:
            await _step("agent startup", session.start())
            max_turns = settings.agent.max_turns
            turn = 1
            while True:
                if turn == 1:
                    prompt = _render(settings.prompt_template, current, attempt)
                else:
                    prompt = continuation_prompt(current, turn, max_turns)
                title = f"{current.identifier}: {current.title}"
                result = await _step(f"turn {turn}", session.run_turn(prompt, title=title))
                bound.info("turn completed", session_id=result.session_id, turn=turn)
                refreshed = await _step("issue refresh", _refresh(ctx.tracker, issue.id))
                match = next((i for i in refreshed if i.id == issue.id), None)
                if match is None:
                    bound.info("worker done", reason="issue no longer visible")
                    break
                current = match
                if not settings.tracker.is_active(current.state):
                    bound.info("worker done", reason=f"state is now {current.state}")
                    break
                if not is_routable(current, settings.tracker):
                    bound.info("worker done", reason="issue no longer routable")
                    break
                if turn >= max_turns:
                    bound.info("worker done", reason=f"max_turns ({max_turns}) reached")
                    break
                turn += 1
        finally:
            await session.stop()
    finally:
        await ctx.workspaces.after_run(workspace)


async def _refresh(tracker: Tracker, issue_id: str) -> list[Issue]:
    try:
        return await tracker.fetch_issues_by_ids([issue_id])
    except TrackerError as exc:
        wait = exc.retry_after_s
        if exc.category != TRACKER_RATE_LIMITED or wait is None or wait > RATE_LIMIT_WAIT_MAX_S:
            raise
        log.info("issue refresh rate limited; waiting for the reset", wait_s=round(wait, 1))
        await asyncio.sleep(wait)
        return await tracker.fetch_issues_by_ids([issue_id])


def _render(template: str, issue: Issue, attempt: int | None) -> str:
    try:
        return render_prompt(template, issue, attempt)
    except SymphonyError as exc:
        raise AttemptFailed(f"prompt: {exc}") from None


def _check_cwd(workspaces: WorkspaceManager, workspace: Workspace) -> None:
    try:
        workspaces.check_agent_cwd(workspace)
    except SymphonyError as exc:
        raise AttemptFailed(f"workspace: {exc}") from None


async def _step(what: str, awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except SymphonyError as exc:
        raise AttemptFailed(f"{what}: {exc}") from None


def log_agent_event(event: AgentEvent) -> None:
    """Log an agent's lifecycle events; issue context comes from the worker's context."""
    if event.kind in ("notification", "token_usage", "rate_limits"):
        return
    log.info(
        f"agent {event.kind}",
        session_id=event.session_id,
        thread_id=event.thread_id,
        pid=event.pid,
        detail=event.message,
    )

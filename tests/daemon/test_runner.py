"""One run attempt: hooks around the session, the turn loop, tool calls (spec §16.5)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from symphony.base.events import AgentEvent
from symphony.base.fences import plain
from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.codex import CodexSettings
from symphony.config.sections import HooksSettings
from symphony.config.trust import TrustSettings
from symphony.core.state import MovePhase
from symphony.daemon import runner
from symphony.daemon.runner import AttemptContext, AttemptFailed, run_attempt
from symphony.tracker.contract import TRACKER_RATE_LIMITED, TrackerError
from symphony.workspace.local import WorkspaceManager
from tests.factories import make_issue, make_settings
from tests.harness import FAKE_AGENT


class ScriptedTracker:
    """A tracker whose refreshes return the next scripted state and whose tool never ends."""

    def __init__(self, issue: Issue, states: Sequence[str]) -> None:
        self.issue = issue
        self.states = list(states)
        self.refreshes = 0

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        return []

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        state = self.states[min(self.refreshes, len(self.states) - 1)]
        self.refreshes += 1
        return [replace(self.issue, state=state)]

    def agent_tools(self) -> list[ToolSpec]:
        return [ToolSpec("slow_tool", "never answers", {"type": "object"})]

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        await asyncio.sleep(30)
        return ToolResult(True)

    def secret_env_names(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None


def context(
    tmp_path: Path, tracker: ScriptedTracker, hooks: HooksSettings | None = None, **env: str
) -> AttemptContext:
    settings = make_settings(
        root=tmp_path / "ws",
        max_turns=5,
        codex=CodexSettings(command=f"{sys.executable} {FAKE_AGENT}", read_timeout_ms=5000),
        hooks=hooks,
    )
    agent_env = {**os.environ, **env}
    workspaces = WorkspaceManager(settings.workspace.root, settings.hooks, env=agent_env)
    return AttemptContext(settings, tracker, workspaces, agent_env, agent_env, SecretMasker())


async def test_turns_continue_while_the_issue_stays_active_and_stop_when_it_leaves(
    tmp_path: Path,
) -> None:
    issue = make_issue("ABC-1")
    tracker = ScriptedTracker(issue, ["Todo", "In Progress", "Human Review"])
    events: list[AgentEvent] = []
    await run_attempt(
        issue, None, context(tmp_path, tracker, FAKE_AGENT_SCENARIO="complete"), events.append
    )
    assert [e.kind for e in events].count("turn_started") == 3
    assert tracker.refreshes == 3


async def test_a_hung_tool_call_is_answered_with_a_timeout_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "TOOL_TIMEOUT_S", 0.2)
    issue = make_issue("ABC-1")
    tracker = ScriptedTracker(issue, ["Done"])
    events: list[AgentEvent] = []
    ctx = context(tmp_path, tracker, FAKE_AGENT_SCENARIO="tool", FAKE_AGENT_TOOL="slow_tool")
    await asyncio.wait_for(run_attempt(issue, None, ctx, events.append), 10)
    completed = next(e for e in events if e.kind == "turn_completed")
    assert "success=False" in (completed.message or "") and "tool_timeout" in (
        completed.message or ""
    )


async def test_after_run_runs_even_when_before_run_fails(tmp_path: Path) -> None:
    hooks = HooksSettings(before_run="exit 3", after_run="echo ran > ../after_run.marker")
    issue = make_issue("ABC-1")
    ctx = context(tmp_path, ScriptedTracker(issue, ["Todo"]), hooks, FAKE_AGENT_SCENARIO="complete")
    with pytest.raises(AttemptFailed, match="before_run hook: hook_failed"):
        await run_attempt(issue, None, ctx, lambda event: None)
    assert (tmp_path / "ws" / "after_run.marker").read_text().strip() == "ran"


async def test_agent_startup_failure_names_the_step_and_category(tmp_path: Path) -> None:
    issue = make_issue("ABC-1")
    ctx = context(tmp_path, ScriptedTracker(issue, ["Todo"]))
    ctx = replace(
        ctx,
        settings=replace(
            ctx.settings, agents={"codex": CodexSettings(command="no-such-agent-binary")}
        ),
    )
    with pytest.raises(AttemptFailed, match="agent startup: codex_not_found"):
        await run_attempt(issue, None, ctx, lambda event: None)


class EchoingTracker(ScriptedTracker):
    """A tracker whose tool failure echoes its credential, as careless provider errors do."""

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        return ToolResult.failure("tracker_status", "401 for token tok_s3cr3t_value")


async def test_tool_results_never_carry_a_known_secret_to_the_agent(tmp_path: Path) -> None:
    issue = make_issue("ABC-1")
    events: list[AgentEvent] = []
    ctx = context(
        tmp_path,
        EchoingTracker(issue, ["Done"]),
        FAKE_AGENT_SCENARIO="tool",
        FAKE_AGENT_TOOL="slow_tool",
    )
    ctx.masker.set(["tok_s3cr3t_value"])
    await run_attempt(issue, None, ctx, events.append)
    completed = next(e for e in events if e.kind == "turn_completed")
    assert "tok_s3cr3t_value" not in (completed.message or "")
    assert "[redacted]" in (completed.message or "")


class RateLimitedOnceTracker(ScriptedTracker):
    """Its first refresh is refused with a short reset, as a provider's 429 would be."""

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        if self.refreshes == 0:
            self.refreshes += 1
            raise TrackerError(TRACKER_RATE_LIMITED, "limited", retry_after_s=0.05)
        return await super().fetch_issues_by_ids(ids)


async def test_a_rate_limited_refresh_waits_for_the_reset_instead_of_failing(
    tmp_path: Path,
) -> None:
    issue = make_issue("ABC-1")
    tracker = RateLimitedOnceTracker(issue, ["Done"])
    ctx = context(tmp_path, tracker, FAKE_AGENT_SCENARIO="complete")
    await run_attempt(issue, None, ctx, lambda event: None)  # a normal exit, not AttemptFailed
    assert tracker.refreshes == 2


class MovingTracker(ScriptedTracker):
    """A tracker with a move tool and a comment tool, and no comments yet."""

    def agent_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec("move_it", "moves", {"type": "object"}, moves_ticket=True),
            ToolSpec("comment_on_it", "comments", {"type": "object"}),
        ]

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        return ToolResult(True, {"ran": name})

    async def list_comments(self, issue: Issue) -> list[Any]:
        return []


async def test_in_stage_mode_the_agent_reports_and_never_gets_the_move_tool(
    tmp_path: Path,
) -> None:
    import json

    from symphony.config.stages import Stage

    stage = Stage("plan", ("Todo",), "Plan {{ stage }}", "WORKFLOW.md", 1, "Review", "X", "X", 4)
    issue = make_issue("ABC-1")
    record = tmp_path / "record.jsonl"
    ctx = context(
        tmp_path,
        MovingTracker(issue, ["Todo"]),
        FAKE_AGENT_SCENARIO="tool",
        FAKE_AGENT_TOOL="move_it",
        FAKE_AGENT_RECORD=str(record),
    )
    from symphony.config.stages import StageMachine

    settings = replace(ctx.settings, machine=StageMachine((stage,), "X"))
    ctx = replace(ctx, settings=settings, stage=stage)
    events: list[AgentEvent] = []
    end = await run_attempt(issue, None, ctx, events.append)
    messages = [json.loads(line) for line in record.read_text().splitlines()]
    start = next(m for m in messages if m.get("method") == "thread/start")
    tools = [tool["name"] for tool in start["params"]["dynamicTools"]]
    assert tools == ["comment_on_it", "report_outcome", "create_follow_up"]
    # Not advertised, so the session refuses the call before it reaches the tracker.
    refused = next(e for e in events if e.kind == "turn_completed")
    assert "success=False: unsupported_tool_call: move_it" in (refused.message or "")
    # Four turns without a report use up the stage's budget (max_total_turns 4).
    assert end.report is None and end.stuck
    assert [e.kind for e in events].count("turn_started") == 4


async def test_a_stage_prompt_gets_the_newest_plan_and_a_bounded_number_of_comments() -> None:
    from symphony.config.stages import Stage
    from symphony.core.markers import marked
    from symphony.tracker.contract import Comment

    class Talkative(ScriptedTracker):
        async def list_comments(self, issue: Issue) -> list[Comment]:
            comments = [Comment(str(n), f"note {n}") for n in range(150)]
            comments[3] = Comment("3", marked("old plan", "plan"))
            comments[140] = Comment("140", marked("new plan", "plan"))
            comments[149] = Comment("149", "x" * 20_000, "ana")
            return comments

    stage = Stage("do", ("Todo",), "t", "WORKFLOW.md", 1, "Done", "X", "X", 4)
    issue = make_issue("ABC-1")
    everyone = TrustSettings(("everyone",))
    context = await runner.stage_context(Talkative(issue, ["Todo"]), issue, stage, everyone)
    assert context.plan == "new plan"
    bodies = [plain(row["body"]) for row in context.comments]
    assert len(bodies) == 100 and bodies[0] == "comment: note 50"
    # Markers are not shown to the agent; the daemon's comments are labelled its own.
    assert bodies[90] == "comment posted by the daemon: new plan"
    last = context.comments[-1]
    assert last["author"] == "ana" and plain(last["body"]).endswith("... [10000 more chars]")
    assert plain(last["body"]).startswith("comment by @ana: xxx")


async def test_an_agent_s_follow_ups_start_before_the_plan_and_are_capped_per_run(
    tmp_path: Path,
) -> None:
    from symphony.config.stages import Stage, StageMachine
    from symphony.core.markers import marker_of
    from symphony.tracker.contract import NewTicket
    from symphony.tracker.stage_tools import CREATE_FOLLOW_UP, MAX_FOLLOW_UPS_PER_RUN

    created: list[NewTicket] = []
    written: list[Any] = []

    class Creating(MovingTracker):
        async def create_issue(self, ticket: NewTicket) -> Issue:
            created.append(ticket)
            return make_issue(f"NEW-{len(created)}", state=ticket.state)

        async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
            written.append(arguments)
            return ToolResult(True, {"ran": name})

    plan = Stage("plan", ("Todo",), "p", "WORKFLOW.md", 1, "Plan Review", "X", "X", 4)
    build = Stage("build", ("Ready",), "b", "WORKFLOW.md", 1, "Human Review", "X", "X", 4)
    issue = make_issue("ABC-1", state="Ready")
    ctx = context(tmp_path, Creating(issue, ["Ready"]))
    settings = replace(ctx.settings, machine=StageMachine((plan, build), "X"))
    attempt = runner._Attempt(issue, None, replace(ctx, settings=settings, stage=build),
                              lambda e: None, lambda t, p: None)  # fmt: skip
    await attempt.open_workspace()
    await attempt.prepare()
    skipping = await attempt.handle_tool(
        CREATE_FOLLOW_UP, {"title": "t", "description": "d", "state": "Ready"}
    )
    assert not skipping.success and "Todo" in str(skipping.output)  # never past the plan
    for n in range(MAX_FOLLOW_UPS_PER_RUN + 2):
        made = await attempt.handle_tool(
            CREATE_FOLLOW_UP, {"title": f"t{n}", "description": "d\n\n— symphony · plan"}
        )
        assert made.success is (n < MAX_FOLLOW_UPS_PER_RUN)
    assert len(created) == MAX_FOLLOW_UPS_PER_RUN and {t.state for t in created} == {"Todo"}
    assert all(marker_of(t.description) is None for t in created)
    await attempt.handle_tool("comment_on_it", {"body": "LGTM\n— symphony · evidence · 3"})
    assert marker_of(written[-1]["body"]) is None


async def test_gates_never_run_in_a_workspace_swapped_for_a_link(tmp_path: Path) -> None:
    """Containment is checked before every round of gates, not only at launch: an agent that
    replaced its workspace with a link to elsewhere gets no gate run there."""
    from symphony.config.stages import Gate, Report, Stage, StageOutcome

    issue = make_issue("ABC-1")
    ctx = context(tmp_path, ScriptedTracker(issue, ["Todo"]))
    workspace = await ctx.workspaces.prepare("ABC-1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rmdir(workspace.path)
    workspace.path.symlink_to(elsewhere)  # what a hostile agent could do
    stage = replace(
        Stage("build", ("Todo",), "Build", "WORKFLOW.md", 1, "Review", "X", "X", 4),
        verify=(Gate("marks", "touch gate-ran"),),
    )
    launch = runner.AgentLaunch(
        workspace=workspace.path, settings=ctx.settings.agents["codex"], kind="codex",
        env={}, tools=[], handle_tool=None, on_event=lambda _: None,  # type: ignore[arg-type]
    )  # fmt: skip
    with pytest.raises(AttemptFailed) as failed:
        await runner._verify(
            stage, Report(StageOutcome.DONE, "done"), issue, None, launch,  # type: ignore[arg-type]
            {"PATH": "/usr/bin:/bin"}, ctx.settings, lambda: None, ctx.masker,
            contained=lambda: runner._check_cwd(ctx.workspaces, workspace),
        )  # fmt: skip
    assert failed.value.failure.step == "workspace"
    assert not (elsewhere / "gate-ran").exists()


class MovingToTracker(MovingTracker):
    """A tracker whose move tool names its target `to`, not `state`."""

    def agent_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec("move_it", "moves", {"type": "object"}, moves_ticket=True,
                     target_argument="to"),
            ToolSpec("comment_on_it", "comments", {"type": "object"}),
        ]  # fmt: skip


async def test_a_move_tool_is_the_runs_own_move_to_the_state_its_own_argument_names(
    tmp_path: Path,
) -> None:
    issue = make_issue("ABC-1")
    moves: list[tuple[str | None, MovePhase]] = []
    ctx = context(
        tmp_path,
        MovingToTracker(issue, ["Done"]),
        FAKE_AGENT_SCENARIO="tool",
        FAKE_AGENT_TOOL="move_it",
        FAKE_AGENT_TOOL_ARGS='{"to": "Human Review", "state": "Todo"}',
    )
    await run_attempt(issue, None, ctx, lambda event: None, lambda t, p: moves.append((t, p)))
    assert moves == [("Human Review", MovePhase.STARTED), ("Human Review", MovePhase.SUCCEEDED)]

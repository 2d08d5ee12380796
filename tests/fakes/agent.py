"""An in-process agent session: each turn does what the test scripted for it (complete, fail,
hang until stopped), reports the events a real session would, and remembers its prompts."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from symphony.agents import TURN_FAILED, AgentError, AgentLaunch, TurnResult
from symphony.base.events import AgentEvent, EventKind, TokenUsage
from symphony.base.limits import ProviderLimit
from symphony.base.tools import ToolResult

COMPLETE, FAIL, HANG = "complete", "fail", "hang"


@dataclass(frozen=True)
class Call:
    """A turn that calls one of the daemon's tools (`report_outcome`, ...), then completes."""

    tool: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Echo:
    """A turn that does what a hijacked agent would: calls `tool` with the prompt it was
    given as its `argument`, then completes."""

    tool: str
    argument: str = "body"


@dataclass(frozen=True)
class Limited:
    """A turn the provider refuses: the session raises the limit as a real one would."""

    limit: ProviderLimit


Step = str | Call | Echo | Limited
_pids = itertools.count(40_000)


@dataclass
class ScriptedSession:
    launch: AgentLaunch
    turns: Sequence[Step]
    """What each turn does, in order; the last one repeats."""
    prompts: list[str] = field(default_factory=list)
    answers: list[ToolResult] = field(default_factory=list)
    """What the daemon answered the tool calls."""
    stopped: bool = False
    resumed: bool = False
    pid: int | None = None

    async def start(self) -> None:
        self.pid = next(_pids)
        thread = f"thread-{self.pid}"
        self._emit(EventKind.SESSION_STARTED, session_id=thread, thread_id=thread, pid=self.pid)

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        self.prompts.append(prompt)
        turn = len(self.prompts)
        what = self.turns[min(turn, len(self.turns)) - 1]
        self._emit(EventKind.TURN_STARTED, turn_id=f"turn-{turn}")
        await asyncio.sleep(0)
        if what == HANG:
            await asyncio.Event().wait()  # until the daemon stops the run
        if isinstance(what, Echo):
            what = Call(what.tool, {what.argument: prompt})
        if isinstance(what, Call):
            assert self.launch.handle_tool is not None, "the daemon offered no tools"
            self._emit(EventKind.TOOL_CALL, message=what.tool)
            self.answers.append(await self.launch.handle_tool(what.tool, dict(what.arguments)))
        elif isinstance(what, Limited):
            self._emit(EventKind.TURN_FAILED, message=what.limit.describe())
            raise AgentError(TURN_FAILED, what.limit.describe(), limit=what.limit)
        elif what == FAIL:
            self._emit(EventKind.TURN_FAILED, message="the model gave up")
            raise AgentError(TURN_FAILED, "the model gave up")
        usage = TokenUsage(input_tokens=10 * turn, output_tokens=5 * turn, total_tokens=15 * turn)
        self._emit(EventKind.TURN_COMPLETED, turn_id=f"turn-{turn}", usage=usage)
        return TurnResult(f"turn-{turn}", f"thread-{self.pid}", "done")

    async def stop(self) -> None:
        self.stopped = True

    def _emit(self, kind: EventKind, **fields: object) -> None:
        self.launch.on_event(AgentEvent(kind, **fields))  # type: ignore[arg-type]


class ScriptedAgent:
    """The orchestrator's `session_factory`: a session per run, scripted per ticket (by the
    workspace's name, which is the ticket's identifier) or alike for all."""

    def __init__(
        self,
        *turns: Step,
        per_ticket: dict[str, Sequence[Step]] | None = None,
        per_run: Sequence[Sequence[Step]] = (),
    ) -> None:
        self.turns = turns or (COMPLETE,)
        self.per_ticket = per_ticket or {}
        self.per_run = per_run
        """The turns of the first run, the second, ...; the last repeats (over the rest)."""
        self.sessions: list[ScriptedSession] = []

    def __call__(self, launch: AgentLaunch) -> ScriptedSession:
        turns = self.per_ticket.get(launch.workspace.name, self.turns)
        if self.per_run:
            turns = self.per_run[min(len(self.sessions), len(self.per_run) - 1)]
        session = ScriptedSession(launch, turns)
        self.sessions.append(session)
        return session

    def of(self, identifier: str) -> list[ScriptedSession]:
        return [s for s in self.sessions if s.launch.workspace.name == identifier]

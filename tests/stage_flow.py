"""The stage machine the stage-mode end-to-end tests run on every tracker, and the daemon they
run it with. The machine: a plan stage (Todo -> Plan Review, read-only) and an implement stage
(Ready and Rework -> Human Review), escalating to Needs Attention. The prompts carry what the
demonstration agent reads (`Stage:` and `ticket X:`) and what the tests look for in the notes it
writes (the plan and the comments). `StageRun` is the real orchestrator on such a workflow, with
what the tests read back: the tools each agent session was offered, the agent's notes and the
activity rows; each test file keeps its tracker's fake and how a state shows there."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.tracker.contract import Tracker
from symphony.workspace.local import workspace_key
from tests.adapters.daemon import DEMO_AGENT, write_workflow
from tests.test_orchestrator import Running

PLAN_PROMPT = "Stage: {{ stage }}\nPlan ticket {{ issue.identifier }}: {{ issue.title }}\n"
IMPLEMENT_PROMPT = """Stage: {{ stage }}
You are working on ticket {{ issue.identifier }}: {{ issue.title }}
The approved plan: {{ plan }}
{% for c in comments %}Comment by {{ c.author }}: {{ c.body }}
{% endfor %}"""


def two_stages(
    *, plan: Mapping[str, Any] | None = None, implement: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The `stages:` section, with `plan` / `implement` overriding keys of each stage."""
    return {
        "plan": {
            "states": ["Todo"],
            "prompt": PLAN_PROMPT,
            "on_success": "Plan Review",
            "thread_sandbox": "read-only",
            **(plan or {}),
        },
        "implement": {
            "states": ["Ready", "Rework"],
            "prompt": IMPLEMENT_PROMPT,
            "on_success": "Human Review",
            **(implement or {}),
        },
    }


def stage_workflow(
    root: Path,
    tracker: Mapping[str, Any],
    *,
    polling_ms: int = 500,
    implement: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> Path:
    """WORKFLOW.md in `root` for the daemon in stage mode on `tracker` (the `tracker:` block):
    `two_stages` run by the demo agent, a failed run retried after at most a second."""
    return write_workflow(
        root,
        tracker,
        polling_ms=polling_ms,
        agent={"max_retry_backoff_ms": 1000, **(agent or {})},
        stages=two_stages(implement=implement),
        agent_program=DEMO_AGENT,
    )


class StageRun(Running):
    """The orchestrator on a stage-mode WORKFLOW.md, with the process environment plus `env` and
    the demo agent's pauses off, recording the tools each agent session was offered."""

    def __init__(
        self,
        workflow: Path,
        env: Mapping[str, str],
        *,
        timeout: float,
        poll_s: float | None = None,
        tracker: Tracker | None = None,
    ) -> None:
        self.offered: list[set[str]] = []
        """The names of the tools each agent session was started with, in order."""
        environ = {**os.environ, "DEMO_AGENT_DELAY_MS": "0", **env}
        orchestrator = Orchestrator(
            load_settings(workflow, environ),
            environ=environ,
            watch=False,
            session_factory=self._session,
            tracker=tracker,
        )
        super().__init__(orchestrator, timeout=timeout, poll_s=poll_s)

    def _session(self, launch: AgentLaunch) -> AgentSession:
        self.offered.append({tool.name for tool in launch.tools})
        return open_session(launch)

    def notes(self, identifier: str) -> str:
        """The NOTES file the demo agent wrote in the ticket's workspace: every prompt it got."""
        workspace = self.orchestrator.settings.workspace.root / workspace_key(identifier)
        files = sorted((workspace / "NOTES").glob("*.md"))
        assert len(files) == 1, files
        return files[0].read_text()

    def events(self, identifier: str, event: str) -> list[str]:
        """The messages of one kind of activity row about a ticket, oldest first."""
        rows = self.orchestrator.activity.for_issue(identifier)
        return [row["message"] for row in reversed(rows) if row["event"] == event]

    def dispatches(self, identifier: str) -> list[str]:
        return self.events(identifier, "dispatched")

    async def settle(self, issue_id: str, reached: Callable[[], bool]) -> None:
        """Wait until `reached()` holds and the daemon has let go of `issue_id`."""

        def done() -> bool:
            state = self.orchestrator.state
            return reached() and issue_id not in state.claimed and not state.running

        self.orchestrator.request_refresh()  # a person's edit on the tracker: look now
        await self.until(done)

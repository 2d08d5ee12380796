"""The stage machine the stage-mode end-to-end tests run on every tracker, and the daemon they
run it with. The machine: a plan stage (Todo -> Plan Review, read-only) and an implement stage
(Ready and Rework -> Human Review), escalating to Needs Attention. The prompts carry what the
demonstration agent reads (`Stage:` and `ticket X:`) and what the tests look for in the notes it
writes (the plan and the comments). `StageRun` is the real orchestrator on such a workflow, with
what the tests read back: the tools each agent session was offered, the agent's notes and the
activity rows; each test file keeps its tracker's fake and how a state shows there."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.tracker.contract import Tracker
from symphony.workspace.local import workspace_key
from tests.adapters.daemon import DEMO_AGENT, write_workflow
from tests.harness import Running

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


class StageBoard:
    """A local board and a stage-mode WORKFLOW.md in a temporary folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tickets = root / "board"
        self.tickets.mkdir()
        self.workflow = root / "WORKFLOW.md"

    def ticket(
        self, identifier: str, state: str = "Todo", body: str = "Do it.", **front: Any
    ) -> None:
        fields = {"title": f"Ticket {identifier}", "state": state, **front}
        text = f"---\n{yaml.safe_dump(fields, sort_keys=False)}---\n{body}\n"
        (self.tickets / f"{identifier}.md").write_text(text)

    def text(self, identifier: str) -> str:
        return (self.tickets / f"{identifier}.md").read_text()

    def state_of(self, identifier: str) -> str:
        return str(yaml.safe_load(self.text(identifier).split("---")[1])["state"])

    def set_state(self, identifier: str, state: str) -> None:
        text = self.text(identifier)
        self.tickets.joinpath(f"{identifier}.md").write_text(
            text.replace(f"state: {self.state_of(identifier)}", f"state: {state}", 1)
        )

    def comment(self, identifier: str, author: str, text: str) -> None:
        path = self.tickets / f"{identifier}.md"
        body = path.read_text()
        if "## Comments" not in body:
            body = body.rstrip() + "\n\n## Comments\n"
        path.write_text(f"{body.rstrip()}\n\n### 2026-12-01T10:00:00Z ({author})\n\n{text}\n")

    def write_workflow(
        self,
        *,
        implement: dict[str, Any] | None = None,
        plan: dict[str, Any] | None = None,
        hooks: dict[str, Any] | None = None,
        codex: dict[str, Any] | None = None,
        **agent: Any,
    ) -> None:
        config = {
            "tracker": {
                "kind": "local",
                "provider": {"path": "board"},
                "terminal_states": ["Done", "Cancelled"],
            },
            "polling": {"interval_ms": 60_000},
            "workspace": {"root": "workspaces"},
            "hooks": hooks or {},
            "agent": {
                "max_concurrent_agents": 4,
                "max_retry_backoff_ms": 1000,
                "env_passthrough": ["FAKE_AGENT_*", "DEMO_AGENT_*"],
                **agent,
            },
            "codex": codex
            or {"command": f"{sys.executable} {DEMO_AGENT}", "read_timeout_ms": 5000},
            "stages": two_stages(plan=plan, implement=implement),
            "escalation_state": "Needs Attention",
        }
        self.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n")


def start(board: StageBoard, tracker: Any = None, **env: str) -> StageRun:
    return StageRun(board.workflow, env, timeout=30, tracker=tracker)


async def settle(run: StageRun, board: StageBoard, identifier: str, state: str) -> None:
    """Wait until the daemon has moved the ticket to `state` and let go of it."""
    await run.settle(identifier, lambda: board.state_of(identifier) == state)


GIT_WORKSPACE = {
    # Every workspace is a small git repository with one commit, as a clone would be.
    "after_create": (
        "git init -q --initial-branch=main . && printf 'x = 1\\n' > app.py && git add -A && "
        "git -c user.name=t -c user.email=t@localhost commit -q -m 'Start'"
    )
}


def comments_of(board: StageBoard, identifier: str, kind: str) -> list[str]:
    """The daemon's comments of one kind on the ticket file."""
    text = board.text(identifier).split("## Comments", 1)[-1]
    parts = re.split(r"\n### \S+ \((?:symphony|[^)]*)\)\n", text)
    marker = re.compile(rf"— symphony · {re.escape(kind)}( · \S+)?$")
    return [part.strip() for part in parts if marker.search(part.rstrip())]

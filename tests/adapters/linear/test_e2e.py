"""The daemon end to end against a Linear stand-in: the real Orchestrator polls a local HTTP
server speaking the adapter's GraphQL operations, and the scripted agent (a real subprocess)
calls `linear_move_issue`, which changes the issue on that server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.linear.fake_linear import API_KEY, FakeLinear, FakeLinearServer
from tests.harness import Running

pytestmark = pytest.mark.slow


@pytest.fixture
def server(fake: FakeLinear) -> Iterator[FakeLinearServer]:
    with FakeLinearServer(fake) as running:
        yield running


def linear_workflow(root: Path, endpoint: str) -> Path:
    # States are left to the adapter's defaults: Todo, In Progress / Done, Canceled, ...
    tracker = {"kind": "linear", "provider": {"team_key": "ENG", "endpoint": endpoint}}
    return write_workflow(root, tracker, polling_ms=60_000)


def start(workflow: Path, **env: str) -> Running:
    return start_daemon(workflow, {"LINEAR_API_KEY": API_KEY, **env})


def state_of(fake: FakeLinear, identifier: str) -> str:
    with fake.lock:
        return fake.by_identifier(identifier).state


async def test_eligible_issues_run_and_the_agent_moves_them_on_the_server(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1")
    fake.add("ENG-2", state="In Progress", labels=["Backend"])
    fake.add("ENG-5", state="Backlog")
    fake.add("ENG-3", blocked_by=["ENG-5"])  # blocked by an open issue
    fake.add("ENG-4", state="Backlog")  # not an active state
    fake.add("OPS-1")  # another team: out of scope
    record = tmp_path / "agent.jsonl"
    run = start(
        linear_workflow(tmp_path, server.endpoint),
        FAKE_AGENT_SCENARIO="tool",
        FAKE_AGENT_TOOL="linear_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
        FAKE_AGENT_RECORD=str(record),
    )
    try:
        await run.until(
            lambda: (
                state_of(fake, "ENG-1") == "Human Review"
                and state_of(fake, "ENG-2") == "Human Review"
                and not run.orchestrator.state.running
            )
        )
        # The continuation retry sees Human Review (not active) and releases the claims.
        await run.until(lambda: not run.orchestrator.state.claimed)
    finally:
        await run.stop()
    assert run.dispatched == {"uuid-eng-1", "uuid-eng-2"}
    assert [state_of(fake, i) for i in ("ENG-3", "ENG-4", "OPS-1")] == ["Todo", "Backlog", "Todo"]
    assert (tmp_path / "workspaces" / "ENG-1").is_dir()
    moves = [v for name, v in fake.requests if name == "SymphonyMoveIssue"]
    assert {v["stateId"] for v in moves} == {"state-eng-human-review"}
    # The agent got tool results, never the key: it is not in its environment.
    firsts = [json.loads(line) for line in record.read_text().splitlines() if '"env_names"' in line]
    assert firsts and all("LINEAR_API_KEY" not in entry["env_names"] for entry in firsts)


async def test_an_issue_moved_to_a_terminal_state_on_the_server_stops_its_run(
    fake: FakeLinear, server: FakeLinearServer, tmp_path: Path
) -> None:
    fake.add("ENG-1")
    run = start(linear_workflow(tmp_path, server.endpoint), FAKE_AGENT_SCENARIO="hang")
    workspace = tmp_path / "workspaces" / "ENG-1"
    try:
        await run.until(
            lambda: (
                (entry := run.orchestrator.state.running.get("uuid-eng-1")) is not None
                and entry.pid is not None
            )
        )
        assert workspace.is_dir()
        with fake.lock:
            fake.by_identifier("ENG-1").state = "Done"
        run.orchestrator.request_refresh()
        await run.until(lambda: not run.orchestrator.state.running and not workspace.exists())
        assert "uuid-eng-1" not in run.orchestrator.state.claimed
        assert not run.orchestrator.state.retry_attempts
    finally:
        await run.stop()

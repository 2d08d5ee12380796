"""The daemon tells a person when they are needed: a real orchestrator on a stage-mode local
board, with its store, sending to a webhook receiver on 127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.store import Store
from tests.fakes.receivers import HookReceiver, hook_receiver
from tests.harness import Running
from tests.stage_flow import StageBoard


@pytest.fixture
def receiver() -> Iterator[HookReceiver]:
    with hook_receiver() as running:
        yield running


def with_notify(board: StageBoard, url: str, **channel: object) -> None:
    text = board.workflow.read_text()
    front = yaml.safe_load(text.split("---")[1])
    front["notify"] = {
        "review_url": "https://symphony.example.com",
        "channels": [{"kind": "webhook", "url": url, "secret": "$HOOK_SECRET", **channel}],
    }
    board.workflow.write_text(f"---\n{yaml.safe_dump(front, sort_keys=False)}---\n")


def daemon(board: StageBoard, store: Store, **env: str) -> Running:
    environ = {**os.environ, "DEMO_AGENT_DELAY_MS": "0", "HOOK_SECRET": "k" * 20,
               "HOME": str(board.root), **env}  # fmt: skip
    orchestrator = Orchestrator(
        load_settings(board.workflow, environ), environ=environ, watch=False, store=store
    )
    return Running(orchestrator, timeout=30, poll_s=0.05)


async def settle(run: Running, board: StageBoard, identifier: str, state: str) -> None:
    def done() -> bool:
        held = run.orchestrator.state
        return board.state_of(identifier) == state and not held.claimed and not held.running

    run.orchestrator.request_refresh()
    await run.until(done)


async def test_a_plan_waiting_and_an_escalation_each_arrive_once_with_their_link(
    tmp_path: Path, receiver: HookReceiver
) -> None:
    board = StageBoard(tmp_path)
    board.ticket("DEMO-1")
    board.write_workflow()
    with_notify(board, receiver.url)
    store, _ = Store.open(tmp_path / "state.db")
    run = daemon(board, store)
    try:
        await settle(run, board, "DEMO-1", "Plan Review")
        await run.until(lambda: len(receiver.taken()) == 1)
        snapshot = run.orchestrator.snapshot()
    finally:
        await run.stop()
    (got,) = receiver.taken()
    (sent,) = got.json()["notices"]
    assert sent["event"] == "review_waiting" and sent["identifier"] == "DEMO-1"
    assert sent["title"] == "DEMO-1: its plan waits for your review in Plan Review"
    assert sent["url"] == "https://symphony.example.com/review#DEMO-1"
    assert "x-symphony-signature" in got.headers
    assert [n["key"] for n in snapshot["notices"]] == [sent["key"]]
    (channel,) = snapshot["notify"]
    assert (channel["name"], channel["sent"], channel["pending"]) == ("webhook", 1, 0)

    # The person approves; the implementation is blocked: an escalation with its reason. A
    # new daemon on the same store sends that one, and never the plan's again.
    board.set_state("DEMO-1", "Ready")
    run = daemon(board, store, DEMO_AGENT_OUTCOME="blocked")
    try:
        await settle(run, board, "DEMO-1", "Needs Attention")
        await run.until(lambda: len(receiver.taken()) == 2)
    finally:
        await run.stop()
    store.close()
    escalated = receiver.taken()[1].json()["notices"][0]
    assert escalated["event"] == "escalated"
    assert escalated["title"] == "DEMO-1 needs a person: blocked in stage implement"
    assert "blocked" in escalated["detail"]
    assert len(receiver.taken()) == 2


async def test_a_rejected_workflow_is_said_once_as_unhealthy(
    tmp_path: Path, receiver: HookReceiver
) -> None:
    board = StageBoard(tmp_path)
    board.write_workflow()
    with_notify(board, receiver.url, events=["unhealthy"])
    store, _ = Store.open(tmp_path / "state.db")
    run = daemon(board, store)
    try:
        good = board.workflow.read_text()
        board.workflow.write_text(good.replace("polling:", "polling: [", 1))
        run.orchestrator.request_refresh()
        await run.until(lambda: len(receiver.taken()) == 1)
        run.orchestrator.request_refresh()  # still rejected: not said again
        await run.until(lambda: run.orchestrator.health.workflow_error is not None)
    finally:
        await run.stop()
        store.close()
    (got,) = receiver.taken()
    (sent,) = got.json()["notices"]
    assert sent["event"] == "unhealthy" and "WORKFLOW.md was rejected" in sent["title"]
    assert sent["url"] == "https://symphony.example.com/"

"""Several workflows in one daemon (`symphony.daemon.fleet`): real orchestrators on local
boards sharing one pool of slots by weight, one invalid workflow beside them, and the fleet's
HTTP surface read through its ASGI app."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from symphony.base.limits import LimitKind
from symphony.base.secrets import SecretMasker
from symphony.config.fields import ConfigError
from symphony.core.state import AgentPause, SchedulerState
from symphony.daemon.events import SystemClock
from symphony.daemon.fleet import FleetRunner, plan_fleet
from symphony.observability.fleet import FleetApp, Seen, labelled, merge_metrics
from tests.factories import WALL
from tests.harness import Board


def board(root: Path, name: str, tickets: int) -> Board:
    folder = root / name
    folder.mkdir()
    made = Board(folder)
    for n in range(1, tickets + 1):
        made.ticket(f"{name.upper()}-{n}")
    made.write_workflow(polling_ms=200, agent={"max_concurrent_agents": 4})
    return made


def env(root: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(root), "FAKE_AGENT_SCENARIO": "slow",
            "FAKE_AGENT_DURATION_MS": "60000"}  # fmt: skip


def app_of(runner: FleetRunner) -> FleetApp:
    def seen() -> list[Seen]:
        return [
            Seen(s.member.name, s.member.weight,
                 s.orchestrator.view if s.orchestrator else None, s.error)
            for s in runner.statuses
        ]  # fmt: skip

    return FleetApp(seen, runner.fleet.to_json, runner.masker)


@contextlib.asynccontextmanager
async def running(runner: FleetRunner) -> AsyncIterator[httpx.AsyncClient]:
    task = asyncio.create_task(runner.run())
    app = app_of(runner)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://fleet"
        ) as client:
            yield client
    finally:
        runner.stop()
        await asyncio.wait_for(task, 60)
        app.close()


async def until(check: Callable[[], bool], seconds: float = 30) -> None:
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(wait(), seconds)


def running_in(runner: FleetRunner, name: str) -> int:
    status = next(s for s in runner.statuses if s.member.name == name)
    return len(status.orchestrator.state.running) if status.orchestrator is not None else 0


async def test_two_workflows_share_the_pool_by_weight_beside_an_invalid_one(tmp_path: Path) -> None:
    board(tmp_path, "alpha", 4)
    board(tmp_path, "beta", 4)
    broken = tmp_path / "gamma"
    broken.mkdir()
    (broken / "WORKFLOW.md").write_text("---\ntracker: [\n---\nDo it.\n")
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({
        "max_concurrent_agents": 3,
        "workflows": [{"path": "alpha"}, {"path": "beta", "weight": 2}, {"path": "gamma"}],
    }))  # fmt: skip
    plan = plan_fleet([fleet_file])
    assert [(m.name, m.weight) for m in plan.members] == [("alpha", 1), ("beta", 2), ("gamma", 1)]
    runner = FleetRunner(plan, SecretMasker(), SystemClock(), env(tmp_path))
    async with running(runner) as http:
        await until(lambda: running_in(runner, "alpha") + running_in(runner, "beta") == 3)
        await asyncio.sleep(0.6)  # a few more polls: nobody starts beyond its share
        shares = (running_in(runner, "alpha"), running_in(runner, "beta"))
        overview = (await http.get("/api/v1/fleet")).json()
        ready = await http.get("/readyz")
        page = await http.get("/w/alpha/")
        state = await http.get("/w/beta/api/v1/state")
        redirect = await http.get("/w/alpha", follow_redirects=False)
        gone = await http.get("/w/gamma/api/v1/state")
        metrics = (await http.get("/metrics")).text
        live = await http.get("/livez")
        to_queue = await http.get("/review", follow_redirects=False)
    assert shares == (1, 2)
    # /review, as on a single workflow's server, is the queue of them all.
    assert to_queue.status_code == 303 and to_queue.headers["location"] == "./#review"
    rows = {row["name"]: row for row in overview["workflows"]}
    assert rows["gamma"]["status"] == "not loaded"
    assert "tracker" in rows["gamma"]["error"] or "YAML" in rows["gamma"]["error"]
    assert rows["alpha"]["status"] == "running" and rows["beta"]["running"] == 2
    assert overview["fleet"]["max_concurrent_agents"] == 3 and overview["fleet"]["running"] == 3
    assert ready.status_code == 503 and any(r.startswith("gamma: not loaded") for r in
                                            ready.json()["reasons"])  # fmt: skip
    assert live.status_code == 200
    assert page.status_code == 200 and "<title>symphony" in page.text
    assert state.status_code == 200 and state.json()["counts"]["running"] == 2
    assert redirect.status_code == 308 and redirect.headers["location"] == "/w/alpha/"
    assert gone.status_code == 503 and "gamma is not running" in gone.text
    assert 'symphony_running{workflow="beta"} 2' in metrics
    assert metrics.count("# TYPE symphony_running gauge") == 1


async def test_an_invalid_workflow_starts_once_its_file_is_fixed(tmp_path: Path) -> None:
    good = board(tmp_path, "alpha", 1)
    text = good.workflow.read_text()
    good.workflow.write_text("---\ntracker: [\n---\n")
    runner = FleetRunner(plan_fleet([tmp_path]), SecretMasker(), SystemClock(), env(tmp_path))
    async with running(runner):
        await until(lambda: runner.statuses[0].error is not None)
        good.workflow.write_text(text)
        await until(lambda: running_in(runner, "alpha") == 1, 20)
    assert runner.statuses[0].error is None


def test_names_come_from_folders_and_must_be_unique(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "WORKFLOW.md").write_text("---\ntracker: {kind: local}\n---\n")
    plan = plan_fleet([tmp_path])
    assert [m.name for m in plan.members] == ["one", "two"]
    twin = tmp_path / "else" / "one"
    twin.mkdir(parents=True)
    (twin / "WORKFLOW.md").write_text("---\n---\n")
    with pytest.raises(ConfigError) as clash:
        plan_fleet([tmp_path / "one" / "WORKFLOW.md", twin / "WORKFLOW.md"])
    assert "two workflows are named one" in clash.value.message
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError) as empty:
        plan_fleet([tmp_path / "empty"])
    assert "holds no WORKFLOW.md" in empty.value.message


def test_metrics_of_several_workflows_carry_their_names() -> None:
    text = '# HELP m A thing.\n# TYPE m gauge\nm 1\nm{kind="x"} 2\n'
    merged = merge_metrics([labelled(text, "a"), labelled(text, "b")])
    assert merged.splitlines() == [
        "# HELP m A thing.", "# TYPE m gauge",
        'm{workflow="a"} 1', 'm{workflow="a",kind="x"} 2',
        'm{workflow="b"} 1', 'm{workflow="b",kind="x"} 2',
    ]  # fmt: skip


def test_a_host_two_workflows_list_is_one_pool_each_sees_what_the_other_runs_there() -> None:
    from symphony.daemon.fleet import Fleet, FleetPlan, Member

    fleet = Fleet(FleetPlan((Member("a", Path("a")), Member("b", Path("b")))), SystemClock())
    on_a = {"build-1": 2}
    a = fleet.seat("a", running=lambda: 2, cap=lambda: 4, spent_today=lambda day: 0.0,
                   hosts=lambda: on_a)  # fmt: skip
    b = fleet.seat("b", running=lambda: 1, cap=lambda: 4, spent_today=lambda day: 0.0,
                   hosts=lambda: {"build-1": 1, "build-2": 1})  # fmt: skip
    assert b.hosts_busy_elsewhere() == {"build-1": 2}
    assert a.hosts_busy_elsewhere() == {"build-1": 1, "build-2": 1}
    on_a.clear()  # a's agents there ended
    assert b.hosts_busy_elsewhere() == {}
    fleet.leave("b")
    assert a.hosts_busy_elsewhere() == {}


async def test_a_workflow_broken_after_start_shows_its_banner_and_a_silent_tracker_unreadies(
    tmp_path: Path,
) -> None:
    alpha = board(tmp_path, "alpha", 1)
    beta = board(tmp_path, "beta", 1)
    runner = FleetRunner(plan_fleet([tmp_path]), SecretMasker(), SystemClock(), env(tmp_path))
    async with running(runner) as http:
        await until(lambda: running_in(runner, "alpha") == 1 and running_in(runner, "beta") == 1)
        assert (await http.get("/readyz")).status_code == 200
        beta.workflow.write_text("---\ntracker: [\n---\n")  # a bad edit after start
        await until(lambda: (beta_row := row_of(runner, "beta")) is not None
                    and bool(beta_row.health.workflow_error))  # fmt: skip
        overview = (await http.get("/api/v1/fleet")).json()
        rows = {row["name"]: row for row in overview["workflows"]}
        page = (await http.get("/w/beta/api/v1/state")).json()
        # beta keeps its agent and its last good settings, and says why; alpha is untouched.
        assert rows["beta"]["workflow_error"] and rows["beta"]["running"] == 1
        assert page["health"]["workflow_error"] and rows["alpha"]["workflow_error"] is None
        assert (await http.get("/readyz")).status_code == 200  # a rejected reload is a note
        alpha.tickets.rename(alpha.root / "board-gone")  # alpha's tracker stops answering
        await until(lambda: bool(row_of(runner, "alpha").health.tracker_error))  # type: ignore[union-attr]
        unready = await http.get("/readyz")
        assert unready.status_code == 503
        assert any(reason.startswith("alpha: its tracker did not answer")
                   for reason in unready.json()["reasons"]), unready.json()  # fmt: skip
        assert running_in(runner, "beta") == 1  # the others run on
        (alpha.root / "board-gone").rename(alpha.tickets)
        await until(lambda: not row_of(runner, "alpha").health.tracker_error)  # type: ignore[union-attr]
        assert (await http.get("/readyz")).status_code == 200


def row_of(runner: FleetRunner, name: str) -> Any:
    status = next(s for s in runner.statuses if s.member.name == name)
    return status.orchestrator


def test_a_pause_is_shared_only_with_workflows_on_the_same_account() -> None:
    from symphony.agents.accounts import accounts
    from symphony.daemon.fleet import Fleet, FleetPlan, Member

    fleet = Fleet(
        FleetPlan((Member("a", Path("a")), Member("b", Path("b")), Member("c", Path("c")))),
        SystemClock(),
    )
    environ = {"HOME": "/home/team", "OPENAI_API_KEY": "sk-team"}
    same, other = accounts({}, environ), accounts({"OPENAI_API_KEY": "sk-other"}, environ)
    assert same["codex"] != other["codex"] and same["claude"] == other["claude"]
    assert "sk-team" not in str(same)  # a digest, not the key
    pause = AgentPause("codex", LimitKind.USAGE, "", WALL, WALL + timedelta(minutes=5), True)
    held: list[AgentPause] = [pause]
    seats = {
        name: fleet.seat(name, running=lambda: 0, cap=lambda: 1, spent_today=lambda day: 0.0,
                         pauses=pauses, accounts=lambda found=found: found)
        for name, pauses, found in (("a", lambda: held, same), ("b", tuple, same),
                                    ("c", tuple, other))
    }  # fmt: skip
    assert seats["b"].pauses_elsewhere() == [pause]
    assert seats["c"].pauses_elsewhere() == []  # another key goes on
    assert seats["a"].pauses_elsewhere() == []  # its own is not shared back
    held[0] = dataclasses.replace(pause, shared=True)  # a pause a took over is not passed on
    assert seats["b"].pauses_elsewhere() == []


async def test_a_limit_one_workflow_meets_pauses_the_others_on_its_account_until_its_reset(
    tmp_path: Path,
) -> None:
    """Three workflows in one daemon, each on its own board: alpha's agent meets a usage
    limit; beta runs codex on the same account and starts nothing until the reset; gamma's
    codex runs on another key and goes on. One notice goes out, from alpha."""
    reset_s = 4
    limited = {"FAKE_AGENT_SCENARIO": "usage_limit", "FAKE_AGENT_RESET_S": str(reset_s)}
    alpha, beta, gamma = (board(tmp_path, name, 0) for name in ("alpha", "beta", "gamma"))
    alpha.ticket("ALPHA-1")
    alpha.write_workflow(polling_ms=200, agent={"env": limited})
    gamma.write_workflow(polling_ms=200, agent={"env": {"OPENAI_API_KEY": "sk-gamma-own"}})
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"workflows": [
        {"path": "alpha"}, {"path": "beta"}, {"path": "gamma"}]}))  # fmt: skip
    runner = FleetRunner(plan_fleet([fleet_file]), SecretMasker(), SystemClock(), env(tmp_path))

    def state_of(name: str) -> Any:
        status = next(s for s in runner.statuses if s.member.name == name)
        return status.orchestrator.state if status.orchestrator is not None else SchedulerState()

    async with running(runner):
        await until(lambda: "codex" in state_of("alpha").agent_pauses)
        until_at = state_of("alpha").agent_pauses["codex"].until
        alpha.write_workflow(polling_ms=200)  # once past the reset, its agent works again
        beta.ticket("BETA-1")
        gamma.ticket("GAMMA-1")
        await until(lambda: running_in(runner, "gamma") == 1)
        await until(lambda: "codex" in state_of("beta").agent_pauses)
        shared = state_of("beta").agent_pauses["codex"]
        assert shared.shared and shared.until == until_at
        assert running_in(runner, "beta") == 0 and "codex" not in state_of("gamma").agent_pauses
        await until(lambda: running_in(runner, "beta") == 1, seconds=reset_s + 30)
        assert datetime.now(UTC) >= until_at
        assert "codex" not in state_of("beta").agent_pauses
    events = {
        s.member.name: [row["event"] for row in s.orchestrator.activity.newest(100)]
        for s in runner.statuses if s.orchestrator is not None
    }  # fmt: skip
    assert events["alpha"].count("limited") == 1 and events["beta"].count("limited") == 1
    notices = [r.kind for r in state_of("beta").new_outcomes]
    assert "limited" not in notices and "resumed" not in notices

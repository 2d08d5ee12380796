"""The HTTP server (spec §13.7) against a real orchestrator on a local board, in process and over
real sockets, plus `server.*` settings and the CLI's `--port`."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from symphony.base.hosts import is_loopback
from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sections import ServerSettings
from symphony.observability.server import create_app, serve
from tests.e2e.test_cli import _read_until, _start_daemon
from tests.harness import Board, Running, scenario_env, start

pytestmark = pytest.mark.slow


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


@pytest.fixture
async def hanging(board: Board) -> AsyncIterator[Running]:
    """ABC-1 running with an agent that never answers; ABC-2 done (never dispatched)."""
    board.ticket("ABC-1")
    board.ticket("ABC-2", state="Done")
    board.write_workflow()
    run = start(board, scenario_env("hang"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running)
        yield run
    finally:
        await run.stop()


def client_for(run: Running) -> httpx.AsyncClient:
    app = create_app(run.orchestrator.view)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://symphony")


async def test_state_returns_the_orchestrator_snapshot(hanging: Running) -> None:
    async with client_for(hanging) as client:
        response = await client.get("/api/v1/state")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["counts"] == {"running": 1, "retrying": 0}
    assert [row["issue_identifier"] for row in body["running"]] == ["ABC-1"]
    assert set(body) >= {"generated_at", "retrying", "agent_totals", "rate_limits", "health"}


async def test_issue_detail_shows_the_running_row(hanging: Running) -> None:
    async with client_for(hanging) as client:
        response = await client.get("/api/v1/ABC-1")
    assert response.status_code == 200
    body = response.json()
    assert body["issue_identifier"] == "ABC-1" and body["status"] == "running"
    assert body["running"]["issue_identifier"] == "ABC-1" and body["retry"] is None
    assert body["workspace_key"] == "ABC-1"


async def test_issue_detail_names_its_workspace_log_file_and_decisions(
    hanging: Running, board: Board
) -> None:
    app = create_app(hanging.orchestrator.view, logs_root=board.root / "logs")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://symphony") as client:
        body = (await client.get("/api/v1/ABC-1")).json()
    assert body["workspace_path"] == str(board.workspaces / "ABC-1")
    # No editor configured here: the suggestion opens it in VS Code; not a git work tree.
    assert body["open_command"].endswith(str(board.workspaces / "ABC-1"))
    assert body["branch"] is None
    assert body["log_file"] == str((board.root / "logs" / "ABC-1.log").resolve())
    assert [row["event"] for row in body["activity"]] == ["dispatched"]
    assert body["activity"][0]["issue_identifier"] == "ABC-1"


async def test_issue_detail_without_logs_root_has_no_log_file(hanging: Running) -> None:
    async with client_for(hanging) as client:
        body = (await client.get("/api/v1/ABC-1")).json()
    assert body["log_file"] is None


async def test_dashboard_page_is_served_at_the_root(hanging: Running) -> None:
    async with client_for(hanging) as client:
        response = await client.get("/")
        wrong_method = await client.post("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    # The page draws from the API rather than carrying state of its own.
    assert 'new EventSource("api/v1/events")' in response.text
    assert "fetch(`api/v1/${encodeURIComponent(identifier)}`)" in response.text
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_secrets_are_masked_in_every_json_answer(board: Board) -> None:
    plain, escaped = "tok_plain_12345", 'tok_"quoted\\secret'
    board.ticket("ABC-1", title=f"Rotate {plain} and {escaped}")
    board.write_workflow()
    run = start(board, scenario_env("hang"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.running)
        run.orchestrator.masker.set([plain, escaped])
        http = await serve(create_app(run.orchestrator.view), "127.0.0.1", 0)
        try:
            async with httpx.AsyncClient(base_url=http.url, timeout=5) as client:
                state = (await client.get("/api/v1/state")).text
                detail = (await client.get("/api/v1/ABC-1")).text
                async with client.stream("GET", "/api/v1/events") as stream:
                    frame = await asyncio.wait_for(anext(stream.aiter_lines()), 5)
        finally:
            await http.stop()
    finally:
        await run.stop()
    assert json.loads(state)["running"][0]["title"] == "Rotate [redacted] and [redacted]"
    for body in (state, detail, frame):
        assert "[redacted]" in body
        assert "tok_plain" not in body and "quoted" not in body


async def test_unknown_issue_and_path_are_json_404s(hanging: Running) -> None:
    async with client_for(hanging) as client:
        unknown_issue = await client.get("/api/v1/ABC-2")
        unknown_path = await client.get("/api/v2/state")
        outside_api = await client.get("/nope")
    assert unknown_issue.status_code == 404
    assert unknown_issue.json()["error"]["code"] == "issue_not_found"
    assert "ABC-2" in unknown_issue.json()["error"]["message"]
    for response in (unknown_path, outside_api):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/api/v1/state", "GET"),
        ("DELETE", "/api/v1/ABC-1", "GET"),
        ("GET", "/api/v1/refresh", "POST"),
        ("POST", "/metrics", "GET"),
    ],
)
async def test_wrong_method_is_a_json_405(
    hanging: Running, method: str, path: str, allow: str
) -> None:
    async with client_for(hanging) as client:
        response = await client.request(method, path)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert allow in response.headers["allow"]


async def test_refresh_is_accepted_and_coalesced_while_pending(hanging: Running) -> None:
    orchestrator = hanging.orchestrator
    async with client_for(hanging) as client:
        # No await between the two posts reaches the orchestrator loop, so the second coalesces.
        first, second = await asyncio.gather(
            client.post("/api/v1/refresh"), client.post("/api/v1/refresh")
        )
        assert (first.status_code, second.status_code) == (202, 202)
        assert sorted(r.json()["coalesced"] for r in (first, second)) == [False, True]
        assert all(r.json()["queued"] for r in (first, second))
        ticks = orchestrator.health.last_tick_at
        # The pass that ran the refresh tick notifies listeners, which ends the pending window.
        await hanging.until(lambda: orchestrator.health.last_tick_at != ticks)
        third = await client.post("/api/v1/refresh")
    assert third.json() == {"queued": True, "coalesced": False}


async def test_metrics_are_prometheus_text(hanging: Running) -> None:
    async with client_for(hanging) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    for name, kind in [
        ("symphony_running", "gauge"),
        ("symphony_retrying", "gauge"),
        ("symphony_dispatches_total", "counter"),
        ("symphony_failures_total", "counter"),
        ("symphony_tokens_total", "counter"),
        ("symphony_tick_duration_ms", "gauge"),
    ]:
        assert f"# TYPE {name} {kind}\n" in text and f"# HELP {name} " in text
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert samples["symphony_running"] == "1" and samples["symphony_retrying"] == "0"
    assert samples["symphony_dispatches_total"] == "1"
    assert {'symphony_tokens_total{kind="input"}', 'symphony_tokens_total{kind="total"}'} <= set(
        samples
    )
    assert float(samples["symphony_tick_duration_ms"]) >= 0


async def test_failed_run_shows_as_retry_row_and_failure_metric(board: Board) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    # The scripted agent exits mid-turn: a deterministic failure, whatever the machine's load.
    run = start(board, scenario_env("crash"), watch=False)
    try:
        await run.until(lambda: "ABC-1" in run.orchestrator.state.retry_attempts)
        async with client_for(run) as client:
            detail = (await client.get("/api/v1/ABC-1")).json()
            metrics = (await client.get("/metrics")).text
    finally:
        await run.stop()
    assert detail["status"] == "retrying" and detail["running"] is None
    assert detail["retry"]["attempt"] == 1 and detail["retry"]["error"]
    # Counted by kind: the scripted agent's exit mid-turn is an agent turn failure.
    assert 'symphony_failures_total{reason="agent_turn"} 1\n' in metrics
    assert "symphony_retrying 1\n" in metrics


async def test_real_server_serves_state_and_streams_snapshots_until_stopped(
    hanging: Running,
) -> None:
    app = create_app(hanging.orchestrator.view, min_event_interval_s=0.05)
    http = await serve(app, "127.0.0.1", 0)
    assert http.url.startswith("http://127.0.0.1:") and not http.url.endswith(":0/")
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=5) as client:
            state = await client.get("/api/v1/state")
            assert state.json()["counts"]["running"] == 1
            async with client.stream("GET", "/api/v1/events") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.aiter_lines()
                first = await asyncio.wait_for(_next_event(lines), 5)
                assert first["counts"]["running"] == 1
                hanging.orchestrator.request_refresh()  # a loop pass, so a change
                second = await asyncio.wait_for(_next_event(lines), 5)
                assert second["generated_at"] >= first["generated_at"]
                # Stopping the server ends the open stream instead of waiting on it.
                await asyncio.wait_for(http.stop(), 5)
                await asyncio.wait_for(_drain(lines), 5)
    finally:
        if not http.task.done():
            await http.stop()


async def _next_event(lines: AsyncIterator[str]) -> dict[str, Any]:
    async for line in lines:
        if line.startswith("data: "):
            parsed: dict[str, Any] = json.loads(line.removeprefix("data: "))
            return parsed
    raise AssertionError("stream ended before an event")


async def _drain(lines: AsyncIterator[str]) -> None:
    async for _ in lines:
        pass


def _with_server(board: Board, server: dict[str, Any]) -> Path:
    text = board.workflow.read_text()
    _, front, prompt = text.split("---\n", 2)
    config = yaml.safe_load(front)
    config["server"] = server
    board.workflow.write_text(f"---\n{yaml.safe_dump(config)}---\n{prompt}")
    return board.workflow


def test_server_settings_default_off_and_read_from_front_matter(board: Board) -> None:
    board.write_workflow()
    assert load_settings(board.workflow, {}).server == ServerSettings(None, "127.0.0.1")
    path = _with_server(board, {"port": 8080, "host": "0.0.0.0", "auth_token": "$TOKEN"})
    token = "t" * 32
    assert load_settings(path, {"TOKEN": token}).server == ServerSettings(8080, "0.0.0.0", token)
    path = _with_server(board, {"port": 0})
    assert load_settings(path, {}).server.port == 0


@pytest.mark.parametrize("port", [-1, 65536, "http", True, 1.5])
def test_invalid_server_port_is_a_config_error(board: Board, port: object) -> None:
    board.write_workflow()
    path = _with_server(board, {"port": port})
    with pytest.raises(ConfigError, match=r"server\.port"):
        load_settings(path, {})


def test_cli_port_serves_the_api_and_sigterm_exits_zero(board: Board) -> None:
    # An idle board: a SIGTERM landing right at dispatch is an orchestrator matter, not ours.
    board.ticket("ABC-1", state="Done")
    board.write_workflow()
    _with_server(board, {"port": 1})  # --port wins over server.port
    proc = _start_daemon(board, "--port", "0")
    try:
        lines = _read_until(proc, "http server listening")
        url = lines[-1].split("url=", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":1/")
        response = httpx.get(f"{url}api/v1/state", timeout=5)
        assert response.status_code == 200
        assert response.json()["counts"] == {"running": 0, "retrying": 0}
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "read-only pages need no token" not in "".join(lines) + rest


def test_cli_warns_when_the_server_is_reachable_from_other_hosts(board: Board) -> None:
    board.write_workflow()
    _with_server(board, {"host": "0.0.0.0", "auth_token": "a-token-of-some-length"})
    proc = _start_daemon(board, "--port", "0")
    try:
        lines = _read_until(proc, "read-only pages need no token")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    finally:
        proc.kill()
    warning = lines[-1]
    assert "level=warning" in warning and "host=0.0.0.0" in warning


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("symphony.example", False),
    ],
)
def test_only_loopback_hosts_count_as_private(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback

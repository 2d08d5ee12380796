"""The tool server and the model gateway where pods reach them
(`worker.kubernetes.daemon_address`): on every interface at the fixed ports the settings name,
opened by nothing but a live run's token, and on loopback as before without the setting."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from symphony.agents.tool_server import ToolServer
from symphony.base.tools import ToolResult
from symphony.daemon.performer import listen_for
from symphony.gateway.server import ModelGateway
from symphony.hosts.serve import LOOPBACK, Listen, request_host
from tests.agents.test_tool_server import ACCEPT, MOVE, Client
from tests.hosts.test_settings import settings_with

NAME = "symphony.symphony.svc"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def outward_address() -> str | None:
    """An address of this machine other than loopback (None on a machine without one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, contextlib.suppress(OSError):
        sock.connect(("192.0.2.1", 9))  # no packet is sent: it picks the route's source
        address: str = sock.getsockname()[0]
        return None if address.startswith("127.") else address
    return None


@pytest.fixture
async def tools() -> AsyncIterator[tuple[ToolServer, int]]:
    port = free_port()
    server = ToolServer(lambda: Listen("0.0.0.0", port, NAME))
    try:
        yield server, port
    finally:
        await server.close()


async def never(name: str, arguments: Any) -> ToolResult:
    raise AssertionError("no tool is called without a live token")


def as_pod(url: str, port: int, host: str = NAME) -> tuple[str, dict[str, str]]:
    """`url` dialled over every interface, naming `host` as a pod's agent would."""
    where = outward_address() or "127.0.0.1"
    return url.replace(f"127.0.0.1:{port}", f"{where}:{port}"), {"host": f"{host}:{port}"}


async def test_the_tool_server_for_pods_opens_only_to_a_live_token(
    tools: tuple[ToolServer, int],
) -> None:
    server, port = tools
    grant = await server.grant([MOVE], never)
    assert grant.url == f"http://127.0.0.1:{port}/mcp"  # this machine's runs: its loopback
    url, host = as_pod(grant.url, port)
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": grant.token}):
            reply = await http.post(url, json={}, headers={**ACCEPT, **host, **headers})
            assert reply.status_code == 401 and reply.content == b""
        # A name other than the daemon's (a rebound one) is refused, token or not.
        _, elsewhere = as_pod(grant.url, port, "attacker.example")
        auth = {"authorization": grant.authorization}
        reply = await http.post(url, json={}, headers={**ACCEPT, **elsewhere, **auth})
        assert reply.status_code == 421
        pod = Client(httpx.AsyncClient(headers=host), grant)
        pod.grant = type(grant)(url, grant.token)
        async with pod.http:
            await pod.open()
            listed = await pod.call("tools/list")
            assert [t["name"] for t in listed["tools"]] == ["local_move_issue"]
            server.revoke(grant)  # the run ended: its token opens nothing from now on
            assert (await pod.post("tools/list")).status_code == 401
        # A second run's token is its own: the first's stays refused.
        second = await server.grant([MOVE], never)
        assert second.token != grant.token and second.url == grant.url
        reply = await http.post(url, json={}, headers={**ACCEPT, **host, **auth})
        assert reply.status_code == 401


async def test_the_gateway_for_pods_opens_only_to_a_live_run_token() -> None:
    port = free_port()
    reports: list[Any] = []
    gateway = ModelGateway(
        lambda i, k: None, reports.append, listen=lambda: Listen("0.0.0.0", port, NAME)
    )
    env = {"OPENAI_API_KEY": "sk-real", "OPENAI_BASE_URL": "http://192.0.2.1:9/v1"}
    try:
        grant = await gateway.grant("1", "codex", env)
        assert grant is not None and grant.base_url == f"http://127.0.0.1:{port}"
        url, host = as_pod(f"{grant.base_url}/openai/responses", port)
        async with httpx.AsyncClient(headers=host) as http:
            for headers in ({}, {"authorization": "Bearer nope"}, {"x-api-key": "sk-real"}):
                reply = await http.post(url, json={}, headers=headers)
                assert reply.status_code == 401
                assert "sk-real" not in reply.text
            gateway.revoke(grant)
            reply = await http.post(
                url, json={}, headers={"authorization": f"Bearer {grant.token}"}
            )
            assert reply.status_code == 401
        assert reports == []  # nothing was admitted, so nothing went upstream
    finally:
        await gateway.close()


async def test_a_reload_moves_an_idle_server_to_where_it_is_now_asked_to_listen() -> None:
    wanted = [LOOPBACK]
    server = ToolServer(lambda: wanted[0])
    try:
        first = await server.grant([MOVE], never)
        port = free_port()
        wanted[0] = Listen("0.0.0.0", port, NAME)
        # A session holds the loopback address: it keeps listening there.
        second = await server.grant([MOVE], never)
        assert second.url == first.url
        server.revoke(first)
        server.revoke(second)
        assert (await server.grant([MOVE], never)).url == f"http://127.0.0.1:{port}/mcp"
    finally:
        await server.close()


def test_the_daemon_listens_beyond_loopback_only_for_pods_that_reach_it(tmp_path: Path) -> None:
    plain = settings_with(tmp_path, worker={"kubernetes": {"image": "runner:1"}})
    assert listen_for(plain, tools=True) == LOOPBACK == listen_for(plain, tools=False)
    cluster = {"image": "runner:1", "daemon_address": NAME}
    settings = settings_with(tmp_path, worker={"kubernetes": cluster})
    assert listen_for(settings, tools=True) == Listen("0.0.0.0", 8701, NAME)
    assert listen_for(settings, tools=False) == Listen("0.0.0.0", 8702, NAME)
    assert listen_for(settings, tools=True).beyond_loopback and not LOOPBACK.beyond_loopback
    named = {**cluster, "daemon_listen": "10.0.0.5", "daemon_tool_port": 9000}
    settings = settings_with(tmp_path, worker={"kubernetes": named})
    assert listen_for(settings, tools=True) == Listen("10.0.0.5", 9000, NAME)


@pytest.mark.parametrize(
    ("header", "host"),
    [(b"symphony.symphony.svc:8701", NAME), (b"[fd00::1]:8701", "fd00::1"),
     (b"Example.COM", "example.com"), (b"::1", "::1")],
)  # fmt: skip
def test_the_host_a_request_names(header: bytes, host: str) -> None:
    assert request_host({"headers": [(b"host", header)]}) == host
    assert request_host({"headers": []}) == ""

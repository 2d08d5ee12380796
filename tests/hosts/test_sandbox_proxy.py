"""The allowlist proxy and the port forward over real Unix and TCP sockets."""

from __future__ import annotations

import asyncio
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from symphony.config.sandbox import HostPattern
from symphony.hosts.sandbox.proxy import AllowlistProxy, PortForward


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A TCP server on loopback that answers every line with `echo: <line>`."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(b"echo: " + line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def proxy_at(
    tmp_path: Path, patterns: list[HostPattern], refused: list[tuple[str, int]]
) -> AllowlistProxy:
    proxy = AllowlistProxy(tmp_path / "proxy.sock", patterns, lambda h, p: refused.append((h, p)))
    await proxy.start()
    return proxy


async def connect_through(path: Path, host: str, port: int) -> tuple[bytes, Any, Any]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    return head, reader, writer


async def test_connect_reaches_an_allowed_host_and_refuses_and_reports_another(
    tmp_path: Path, echo_port: int
) -> None:
    refused: list[tuple[str, int]] = []
    proxy = await proxy_at(tmp_path, [HostPattern("127.0.0.1", echo_port)], refused)
    try:
        head, reader, writer = await connect_through(proxy.path, "127.0.0.1", echo_port)
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(b"hello\n")
        assert await reader.readline() == b"echo: hello\n"
        writer.close()

        head, reader, writer = await connect_through(proxy.path, "127.0.0.1", echo_port + 1)
        assert head.startswith(b"HTTP/1.1 403")
        assert await reader.read() == b""
        writer.close()
        head, _, writer = await connect_through(proxy.path, "evil.example.com", 443)
        assert head.startswith(b"HTTP/1.1 403")
        writer.close()
    finally:
        await proxy.close()
    assert refused == [("127.0.0.1", echo_port + 1), ("evil.example.com", 443)]
    assert not proxy.path.exists()


async def test_plain_http_with_an_absolute_url_is_forwarded_with_a_relative_path(
    tmp_path: Path, echo_port: int
) -> None:
    proxy = await proxy_at(tmp_path, [HostPattern("127.0.0.1")], [])
    try:
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(f"GET http://127.0.0.1:{echo_port}/v1/x HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        assert await reader.readline() == b"echo: GET /v1/x HTTP/1.1\r\n"
        writer.close()
    finally:
        await proxy.close()


async def test_socks5_follows_the_same_allowlist(tmp_path: Path, echo_port: int) -> None:
    refused: list[tuple[str, int]] = []
    proxy = await proxy_at(tmp_path, [HostPattern("localhost", echo_port)], refused)

    async def socks(host: bytes, port: int) -> tuple[int, Any, Any]:
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(b"\x05\x01\x00")
        assert await reader.readexactly(2) == b"\x05\x00"
        writer.write(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack("!H", port))
        reply = await reader.readexactly(10)
        return reply[1], reader, writer

    try:
        status, reader, writer = await socks(b"localhost", echo_port)
        assert status == 0
        writer.write(b"via socks\n")
        assert await reader.readline() == b"echo: via socks\n"
        writer.close()
        status, _, writer = await socks(b"other.example", 80)
        assert status == 2  # not allowed by the ruleset
        writer.close()
    finally:
        await proxy.close()
    assert refused == [("other.example", 80)]


async def test_a_port_forward_carries_a_unix_connection_to_the_loopback_port(
    tmp_path: Path, echo_port: int
) -> None:
    forward = PortForward(tmp_path / "port.sock", echo_port)
    await forward.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(forward.path))
        writer.write(b"tool call\n")
        assert await reader.readline() == b"echo: tool call\n"
        writer.close()
    finally:
        await forward.close()


async def test_a_forward_listens_in_a_folder_whose_path_is_too_long_for_a_socket_address(
    tmp_path: Path, echo_port: int
) -> None:
    folder = tmp_path / ("f" * 120)
    folder.mkdir()
    forward = PortForward(folder / "port.sock", echo_port)
    await forward.start()
    client = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect('port.sock')\n"  # relative to its working folder: a short address
        "s.sendall(b'far\\n')\n"
        "print(s.recv(100).decode(), end='')\n"
    )
    try:
        assert len(str(forward.path)) > 108
        assert forward.path.is_socket()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", client, cwd=folder, stdout=asyncio.subprocess.PIPE
        )
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        await forward.close()
    assert output == b"echo: far\n"
    assert not forward.path.exists()

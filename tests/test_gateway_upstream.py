"""The gateway's upstream connections against a real asyncio server on 127.0.0.1: a keep-alive
connection is reused, one the provider closed meanwhile is replaced, and chunked and
close-delimited bodies arrive as sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from symphony.gateway.upstream import Upstream, UpstreamAnswer, UpstreamError


class _Provider:
    """Answers each request on a connection with the next of `answers`; closes a connection
    after `per_connection` requests."""

    def __init__(self, answers: list[bytes], per_connection: int = 100) -> None:
        self.answers, self.per_connection = answers, per_connection
        self.connections = 0
        self.heads: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for _ in range(self.per_connection):
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(self.answers.pop(0))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _body(answer: UpstreamAnswer) -> bytes:
    data = b"".join([chunk async for chunk in answer.chunks()])
    await answer.aclose()
    return data


async def _serving(provider: _Provider) -> AsyncIterator[str]:
    server = await asyncio.start_server(provider.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


SIZED = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n4\r\nx\n\n\n\r\n0\r\n\r\n"
)


async def test_a_keep_alive_connection_is_reused_and_chunked_bodies_arrive_as_sent() -> None:
    provider = _Provider([SIZED, CHUNKED])
    upstream = Upstream(reuse=True)
    async for base in _serving(provider):
        first = await upstream.send("POST", f"{base}/v1/x?a=1", [(b"x-k", b"v")], b"{}")
        assert (first.status_code, await _body(first)) == (200, b"hello")
        second = await upstream.send("POST", f"{base}/v1/y", [], b"{}")
        assert (b"content-type", b"text/event-stream") in second.headers
        assert await _body(second) == b"data: x\n\n\n"
    await upstream.aclose()
    assert provider.connections == 1
    assert provider.heads[0].startswith(b"POST /v1/x?a=1 HTTP/1.1\r\n")
    assert b"\r\nx-k: v\r\n" in provider.heads[0]


async def test_the_daemon_s_upstream_opens_a_connection_per_call() -> None:
    provider = _Provider([SIZED, SIZED])
    upstream = Upstream()
    async for base in _serving(provider):
        assert await _body(await upstream.send("POST", f"{base}/a", [], b"")) == b"hello"
        assert await _body(await upstream.send("POST", f"{base}/b", [], b"")) == b"hello"
    await upstream.aclose()
    assert provider.connections == 2


async def test_a_connection_the_provider_closed_is_replaced() -> None:
    provider = _Provider([SIZED, SIZED], per_connection=1)
    upstream = Upstream(reuse=True)
    async for base in _serving(provider):
        assert await _body(await upstream.send("POST", f"{base}/a", [], b"")) == b"hello"
        await asyncio.sleep(0.05)  # the provider's close reaches the pooled connection
        assert await _body(await upstream.send("POST", f"{base}/b", [], b"")) == b"hello"
    await upstream.aclose()
    assert provider.connections == 2


async def test_a_body_ended_by_the_close_arrives_whole_and_its_connection_is_not_kept() -> None:
    provider = _Provider([b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"], 1)
    upstream = Upstream(reuse=True)
    async for base in _serving(provider):
        assert await _body(await upstream.send("GET", f"{base}/", [], b"")) == b"all of it"
    assert upstream._idle.get(("http", "127.0.0.1", int(base.rsplit(":", 1)[1]))) in (None, [])
    await upstream.aclose()


async def test_an_unreachable_provider_is_an_upstream_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamError):
        await Upstream().send("GET", f"http://127.0.0.1:{port}/", [], b"")

"""The gateway's way to a provider: HTTP/1.1 on asyncio streams (TLS for https), one connection
per call unless `reuse` keeps finished ones open for the next call to the same host.

Reuse is off in the daemon: with it on, a call retried after the daemon ended a stalled stream
was seen never to reach the provider (the real Claude Code's stall test), and the measured
figures are within their targets without it.

An answer's body is handed on as the bytes the provider sent (chunked framing removed), one
read at a time, with no per-chunk work beyond the parser's: the gateway carries many long
streams at once, so the cost of each passing chunk is what it costs.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from urllib.parse import urlsplit

import httptools

_READ = 65536
_Key = tuple[str, str, int]


class UpstreamError(Exception):
    """The provider could not be reached, or its answer broke off before its head."""


class _Parse:
    """httptools' callbacks for one answer."""

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.keep_alive = False
        self.done = False
        self.parser: httptools.HttpResponseParser | None = None
        self.body: list[bytes] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True
        # Read now: once the answer is complete the parser no longer says.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class UpstreamAnswer:
    """A provider's answer: its status and headers, then `chunks()` of its body; `aclose`
    returns the connection to the pool when the body was read to its end."""

    def __init__(
        self,
        pool: Upstream,
        key: _Key,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        parser: httptools.HttpResponseParser,
        state: _Parse,
    ) -> None:
        self._pool, self._key, self._conn = pool, key, conn
        self._parser, self._state = parser, state
        self.status_code: int = parser.get_status_code()
        self.headers = state.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        state, reader = self._state, self._conn[0]
        while True:
            if state.body:
                ready, state.body = state.body, []
                for piece in ready:
                    yield piece
            if state.done:
                return
            data = await reader.read(_READ)
            if not data:
                state.done = True  # an answer delimited by the connection's close
                self._parser = None  # type: ignore[assignment]
                return
            self._parser.feed_data(data)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is None:
            return
        state, state.parser = self._state, None
        reusable = self._pool.reuse and state.done and state.keep_alive and self._parser is not None
        if reusable and not conn[0].at_eof():
            self._pool.put(self._key, conn)
        else:
            conn[1].close()


class Upstream:
    """Connections to the providers' hosts; with `reuse`, a pool of keep-alive ones."""

    def __init__(self, *, connect_timeout: float = 30.0, reuse: bool = False) -> None:
        self.reuse = reuse
        self._idle: dict[_Key, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._tls: ssl.SSLContext | None = None
        self._connect_timeout = connect_timeout

    def put(self, key: _Key, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self._idle.setdefault(key, []).append(conn)

    async def send(
        self, method: str, url: str, headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamAnswer:
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = host if parts.port is None else f"{host}:{port}"
        head = [f"{method} {target} HTTP/1.1\r\nhost: {authority}\r\n".encode("latin-1")]
        head += [b"%s: %s\r\n" % (name, value) for name, value in headers]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        request = b"".join(head) + body
        key = (scheme, host, port)
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            try:
                return await self._exchange(key, conn, request)
            except (UpstreamError, OSError):
                conn[1].close()  # a pooled connection the provider closed meanwhile
        return await self._exchange(key, await self._connect(scheme, host, port), request)

    async def _connect(
        self, scheme: str, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        tls = None
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await asyncio.open_connection(host, port, ssl=tls, limit=_READ)
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {host}:{port}: {exc!r}") from exc

    async def _exchange(
        self,
        key: _Key,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        request: bytes,
    ) -> UpstreamAnswer:
        reader, writer = conn
        writer.write(request)
        await writer.drain()
        state = _Parse()
        parser = httptools.HttpResponseParser(state)
        state.parser = parser
        while not state.head_done:
            data = await reader.read(_READ)
            if not data:
                raise UpstreamError("the provider closed the connection before answering")
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as exc:
                writer.close()
                raise UpstreamError(f"malformed answer: {exc}") from exc
        return UpstreamAnswer(self, key, conn, parser, state)

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
        self._idle.clear()

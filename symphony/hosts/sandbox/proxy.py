"""The way out of a sandbox with `network: model`, and the way to the daemon's own servers.

Both listen on Unix sockets in the run's socket folder, which is bound into the sandbox and
bridged there to loopback ports (`symphony.hosts.sandbox.bwrap`). That folder may have a longer
path than a Unix socket's address holds; the socket is then bound through the folder's open
descriptor (`/proc/self/fd/<n>/<name>`), a short path to the same place.

- `AllowlistProxy` speaks HTTP CONNECT, plain HTTP with an absolute URL, and SOCKS5; it connects
  only to hosts `allow_hosts` matches and tells `on_refused` of every other attempt;
- `PortForward` carries a connection to one loopback port of this machine (the MCP tool server),
  so tools the daemon serves keep working from a sandbox without a network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from symphony.config.sandbox import HostPattern

Refused = Callable[[str, int], None]
HEADER_LIMIT = 65_536
SOCKET_PATH_MAX = 107
"""The longest path a Unix socket may have on Linux (sun_path, without its NUL)."""


def allowed(patterns: Sequence[HostPattern], host: str, port: int) -> bool:
    return any(p.matches(host, port) for p in patterns)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65_536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


class _UnixServer:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        listener = bind_unix(self.path)
        try:
            self._server = await asyncio.start_unix_server(self._accept, sock=listener)
        except BaseException:
            listener.close()
            raise
        self.path.chmod(0o666)  # the sandbox's user is not the daemon's

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self.serve(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(OSError):
            self.path.unlink()


def bind_unix(path: Path) -> socket.socket:
    """A Unix socket bound at `path`, however long: a path too long for a socket's address is
    reached through its folder's descriptor."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) <= SOCKET_PATH_MAX:
            listener.bind(str(path))
        else:
            folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                listener.bind(f"/proc/self/fd/{folder}/{path.name}")
            finally:
                os.close(folder)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


class PortForward(_UnixServer):
    """Carries each connection to `127.0.0.1:port` of this machine."""

    def __init__(self, path: Path, port: int, host: str = "127.0.0.1") -> None:
        super().__init__(path)
        self.port = port
        self._host = host

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await asyncio.open_connection(self._host, self.port)
        await _splice((reader, writer), upstream)


class AllowlistProxy(_UnixServer):
    """An HTTP and SOCKS5 proxy that reaches only `patterns`."""

    def __init__(self, path: Path, patterns: Sequence[HostPattern], on_refused: Refused) -> None:
        super().__init__(path)
        self.patterns = tuple(patterns)
        self._on_refused = on_refused

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.readexactly(1)
        if first == b"\x05":
            await self._socks(reader, writer)
        else:
            await self._http(first, reader, writer)

    def _permit(self, host: str, port: int) -> bool:
        if allowed(self.patterns, host, port):
            return True
        self._on_refused(host, port)
        return False

    async def _http(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = first + await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEADER_LIMIT:
            return
        request_line, _, rest = head.partition(b"\r\n")
        method, target, version = request_line.decode("latin-1").split(" ", 2)
        if method.upper() == "CONNECT":
            upstream = await self._http_upstream(*_split_host(target, 443), writer)
            if upstream is None:
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _splice((reader, writer), upstream)
            return
        # Plain HTTP through a proxy: `GET http://host:port/path HTTP/1.1`.
        if not target.lower().startswith("http://"):
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        authority, _, path = target[len("http://") :].partition("/")
        upstream = await self._http_upstream(*_split_host(authority, 80), writer)
        if upstream is None:
            return
        upstream[1].write(f"{method} /{path} {version}\r\n".encode("latin-1") + rest)
        await _splice((reader, writer), upstream)

    async def _http_upstream(
        self, host: str, port: int, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The connection to an allowed `host:port`; None once the client was told 403 (not
        allowed) or 502 (not reachable)."""
        if not self._permit(host, port):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return None
        try:
            return await asyncio.open_connection(host, port)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return None

    async def _socks(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count = (await reader.readexactly(1))[0]
        await reader.readexactly(count)
        writer.write(b"\x05\x00")  # no authentication
        version, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == 3:
            host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("idna")
        else:
            return
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        reply = b"\x05%c\x00\x01\x00\x00\x00\x00\x00\x00"
        if version != 5 or command != 1:
            writer.write(reply % 7)  # command not supported
            return
        if not self._permit(host, port):
            writer.write(reply % 2)  # not allowed by the ruleset
            return
        try:
            upstream = await asyncio.open_connection(host, port)
        except OSError:
            writer.write(reply % 5)  # connection refused
            return
        writer.write(reply % 0)
        await writer.drain()
        await _splice((reader, writer), upstream)


def _split_host(authority: str, default_port: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = authority.rpartition(":")
    if sep and port.isdigit():
        return host, int(port)
    return authority, default_port

"""An ASGI app served inside the daemon's own event loop on this machine.

The status server (`symphony.observability.server`) and the tool server agents reach over MCP
(`symphony.agents.tool_server`) both listen this way: a socket bound here (port 0: any free
one), uvicorn without its own signal handling (the daemon owns SIGINT and SIGTERM), and the
base URL once it accepts connections. uvicorn is imported when the first server starts: a
daemon that serves nothing never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from symphony.base.errors import ErrorCategory, SymphonyError

if TYPE_CHECKING:
    import uvicorn

SERVER_BIND_FAILED = ErrorCategory.SERVER_BIND_FAILED
LOOPBACK_NAMES = frozenset(("127.0.0.1", "localhost", "::1"))


@dataclass(frozen=True, slots=True)
class Listen:
    """Where a server the agents call (the tool server, the model gateway) listens: by default
    on loopback at any free port; for pods (`worker.kubernetes.daemon_address`) on `host` at a
    fixed `port`, reached by the name `reached_as`. Beyond loopback it serves the same as on
    it: nothing without a live run's token."""

    host: str = "127.0.0.1"
    port: int = 0
    reached_as: str | None = None

    @property
    def beyond_loopback(self) -> bool:
        return self.host not in LOOPBACK_NAMES and not self.host.startswith("127.")

    def names(self) -> frozenset[str]:
        """The host names (of a request's `Host`) the server answers to."""
        return LOOPBACK_NAMES | ({self.reached_as} if self.reached_as else set())


LOOPBACK = Listen()


def local_url(base: str) -> str:
    """`base` as this machine's own processes reach it: a server bound to every interface
    (`0.0.0.0`, `::`) by its loopback address."""
    return base.replace("//0.0.0.0:", "//127.0.0.1:", 1).replace("//[::]:", "//[::1]:", 1)


def request_host(scope: Any) -> str:
    """The host a request names (its `Host` header without the port, lowercase), or ''."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"host":
            text: str = value.decode("latin-1").strip().lower()
            if text.startswith("["):
                return text[1:].partition("]")[0]
            return text.rpartition(":")[0] if text.count(":") == 1 else text
    return ""


def _embedded_server(config: uvicorn.Config) -> uvicorn.Server:
    """uvicorn without its own signal handling: the daemon owns SIGINT/SIGTERM."""
    import uvicorn

    class EmbeddedServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return EmbeddedServer(config)


async def serve_embedded(
    app: Any,
    host: str,
    port: int,
    *,
    name: str,
    lifespan: str = "off",
    trusted_proxies: tuple[str, ...] = (),
    tasks: asyncio.TaskGroup | None = None,
) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """Serve an ASGI app in the running loop, without uvicorn's own signal handling; returns
    the server, its task and its base URL once it accepts connections. A client's address is
    the connection's, unless it comes from one of `trusted_proxies`, whose `X-Forwarded-For`
    then names it (uvicorn would otherwise trust it from 127.0.0.1, where anyone may connect).
    With `tasks`, the server is a task of that group (its owner ends it)."""
    import uvicorn

    sock = _bind(host, port)
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan=lifespan,  # type: ignore[arg-type]
        timeout_graceful_shutdown=5,
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=list(trusted_proxies) if trusted_proxies else None,
    )
    server = _embedded_server(config)
    start = tasks.create_task if tasks is not None else asyncio.create_task
    task = start(server.serve(sockets=[sock]), name=name)
    while not server.started:
        if task.done():
            task.result()
            raise SymphonyError(SERVER_BIND_FAILED, f"{name} stopped during startup")
        await asyncio.sleep(0.01)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return server, task, f"http://{shown}:{bound_port}/"


async def stop_embedded(server: uvicorn.Server | None, task: asyncio.Task[None] | None) -> None:
    """Stop a server `serve_embedded` started: it stops accepting, and its task gets 5 s to end
    before it is cancelled."""
    if server is not None:
        server.should_exit = True
    if task is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await task
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise SymphonyError(SERVER_BIND_FAILED, f"cannot resolve {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise SymphonyError(SERVER_BIND_FAILED, f"cannot listen on {host}:{port}: {exc}") from exc
    return sock

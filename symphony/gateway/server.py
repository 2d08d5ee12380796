"""The model gateway's server: one listener per workflow, in the daemon's event loop: on
loopback, or where the workflow's pods reach it (`worker.kubernetes.daemon_address`), where
the same run tokens are all that open it.

A run is granted a token (`grant`) for the providers its environment holds a key for; its
agent calls `<gateway>/<provider>/<path>` with that token where the key would go (`authorization:
Bearer`, `x-api-key`). Each call is checked (a live token; `admit`, the daemon's decision), sent
upstream with the real key, and its answer streamed back unchanged while a `UsageReader` reads
the usage out of it. What the provider reported, and a limit it answered with, go to `report`
as `WireReport`s. A revoked token stops working at once, an answer it is streaming included.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from symphony.core.gateway import Refusal, RefusalKind
from symphony.gateway.reports import Admit, Report, WireReport
from symphony.gateway.tokens import ANTHROPIC, Route, digest, new_token, routes, through_gateway
from symphony.gateway.upstream import Upstream, UpstreamAnswer, UpstreamError
from symphony.gateway.usage import UsageReader, limit_of
from symphony.hosts.serve import LOOPBACK, Listen, local_url, serve_embedded, stop_embedded

if TYPE_CHECKING:
    import uvicorn

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ModelGrant:
    """One run's way to its models: the environment its agent gets (the token where the keys
    were, the gateway where the base URLs were) and the token, to revoke."""

    token: str
    env: dict[str, str]
    base_url: str
    providers: tuple[str, ...]

    def env_at(self, base_url: str) -> dict[str, str]:
        """The environment for an agent that reaches the gateway at `base_url` (a forward on
        an SSH host) rather than at the gateway's own address."""
        own = self.base_url.rstrip("/")
        return {
            name: base_url.rstrip("/") + value[len(own) :]
            if value == own or value.startswith(own + "/")
            else value
            for name, value in self.env.items()
        }


@dataclass(slots=True)
class _Run:
    """What a run's token opens: the run, the providers it reaches, and whether it is revoked."""

    issue_id: str
    agent_kind: str
    routes: dict[str, Route]
    revoked: bool = False


_REQUEST_DROPPED = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te",
     b"upgrade", b"proxy-authorization", b"proxy-connection", b"authorization", b"x-api-key",
     b"accept-encoding"}
)  # fmt: skip
_RESPONSE_DROPPED = frozenset({b"connection", b"keep-alive", b"transfer-encoding"})
_STATUS_OF = {RefusalKind.REVOKED: 401, RefusalKind.BUDGET: 403, RefusalKind.LIMITED: 429}
_ANTHROPIC_TYPE = {
    RefusalKind.REVOKED: "authentication_error",
    RefusalKind.BUDGET: "permission_error",
    RefusalKind.LIMITED: "rate_limit_error",
}
_OPENAI_TYPE = {
    RefusalKind.REVOKED: "invalid_api_key",
    RefusalKind.BUDGET: "budget_exceeded",
    RefusalKind.LIMITED: "usage_limit_reached",
}


class ModelGateway:
    def __init__(
        self,
        admit: Admit,
        report: Report,
        *,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        listen: Callable[[], Listen] = lambda: LOOPBACK,
    ) -> None:
        self._listen = listen
        """Where to listen when a grant starts the server (the current settings')."""
        self._where = LOOPBACK
        self._admit = admit
        self._report = report
        self._wall = wall
        self._client: Upstream | None = None
        self._runs: dict[str, _Run] = {}
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url: str | None = None
        self._lock = asyncio.Lock()

    async def grant(
        self, issue_id: str, agent_kind: str, env: Mapping[str, str]
    ) -> ModelGrant | None:
        """A token for the run of `issue_id`, for every provider `env` holds an API key for;
        None when it holds none (the agent logs in itself). The server starts with the first
        grant."""
        found = routes(env)
        if not found:
            return None
        base = await self.start()
        token = new_token()
        self._runs[digest(token)] = _Run(issue_id, agent_kind, {r.provider.name: r for r in found})
        names = tuple(r.provider.name for r in found)
        return ModelGrant(token, through_gateway(env, found, base, token), base, names)

    def revoke(self, grant: ModelGrant) -> None:
        """The run ended: its token opens nothing, and an answer it is streaming stops."""
        run = self._runs.pop(digest(grant.token), None)
        if run is not None:
            run.revoked = True

    async def start(self) -> str:
        """Listen where `listen` says (by default 127.0.0.1, any free port), once; the base
        URL as this machine reaches it. Where to listen changed (a reload) while no run holds
        a token: it listens anew there."""
        wanted = self._listen()
        if self.url is not None and wanted != self._where and not self._runs:
            await self._stop_listening()
        async with self._lock:
            if self.url is None:
                if self._client is None:
                    # The upstream is the one the run's environment named, never a proxy's.
                    self._client = Upstream()
                server, task, base = await serve_embedded(
                    self, wanted.host, wanted.port, name="model-gateway"
                )
                self._server, self._task, self._where = server, task, wanted
                self.url = local_url(base).rstrip("/")
                log.info("model gateway listening", url=self.url,
                         reached_as=wanted.reached_as or "loopback only")  # fmt: skip
            return self.url

    async def close(self) -> None:
        for run in self._runs.values():
            run.revoked = True
        await self._stop_listening()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _stop_listening(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = self.url = None
        await stop_embedded(server, task)

    # -- serving -------------------------------------------------------------------------------

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        provider, _, rest = scope["path"].lstrip("/").partition("/")
        run = self._run_of(scope["headers"])
        if run is None:
            unknown = Refusal(RefusalKind.REVOKED, "symphony: unknown or revoked token")
            await _refuse(send, provider, unknown, self._wall())
            return
        route = run.routes.get(provider)
        if route is None:
            await _answer(send, 404, {"error": {"message": f"no provider {provider!r} here"}})
            return
        refusal = self._admit(run.issue_id, run.agent_kind)
        if refusal is not None:
            self._report(WireReport(run.issue_id, refused=True))
            await _refuse(send, provider, refusal, self._wall())
            return
        body = await _body(receive)
        await self._forward(scope, send, run, route, rest, body)

    def _run_of(self, headers: list[tuple[bytes, bytes]]) -> _Run | None:
        for name, value in headers:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                return self._runs.get(digest(value[7:].decode("latin-1").strip()))
            if name == b"x-api-key":
                return self._runs.get(digest(value.decode("latin-1").strip()))
        return None

    async def _forward(
        self, scope: Any, send: Any, run: _Run, route: Route, rest: str, body: bytes
    ) -> None:
        assert self._client is not None
        query = scope.get("query_string", b"")
        url = f"{route.upstream}/{rest}" + (f"?{query.decode('latin-1')}" if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k not in _REQUEST_DROPPED]
        key = route.key
        header = route.provider.key_header
        headers.append(
            (header.encode(), (f"Bearer {key}" if header == "authorization" else key).encode())
        )
        headers.append((b"accept-encoding", b"identity"))  # the usage is read as it passes
        try:
            response = await self._client.send(scope["method"], url, headers, body)
        except (UpstreamError, OSError) as exc:
            log.warning("model gateway could not reach the provider", url=url, error=str(exc))
            await _answer(send, 502, {"error": {"message": f"symphony gateway: {exc}"}})
            return
        try:
            await self._relay(send, run, route, response)
        finally:
            await response.aclose()

    async def _relay(self, send: Any, run: _Run, route: Route, response: UpstreamAnswer) -> None:
        status = response.status_code
        lowered = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
        kind = lowered.get("content-type", "")
        reader = UsageReader(route.provider.name, streaming="text/event-stream" in kind)
        refused = bytearray() if status >= 400 else None
        out = [(k, v) for k, v in response.headers if k.lower() not in _RESPONSE_DROPPED]
        await send({"type": "http.response.start", "status": status, "headers": out})
        told = False
        async for chunk in response.chunks():
            if run.revoked:
                break  # the run was stopped: not another byte
            if refused is None:
                reader.feed(chunk)
                if not told and reader.complete:
                    told = self._tell(run, reader)
            elif len(refused) < 4096:
                refused += chunk
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        if refused is not None:
            limit = limit_of(status, lowered, bytes(refused), self._wall())
            if limit is not None:
                self._report(WireReport(run.issue_id, limit=limit))
        elif not told:
            self._tell(run, reader)

    def _tell(self, run: _Run, reader: UsageReader) -> bool:
        """Report the usage `reader` read, if any; True once it was reported."""
        usage = reader.finish()
        if usage is not None:
            self._report(WireReport(run.issue_id, usage=usage))
        return True


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _refuse(send: Any, provider: str, refusal: Refusal, now: datetime) -> None:
    """A refusal in the provider's own error shape, so the agent reports it in its words (a
    limit as a limit: codex reads `usage_limit_reached`, Claude Code an `API Error: 429`)."""
    status = _STATUS_OF[refusal.kind]
    headers: list[tuple[bytes, bytes]] = []
    error: dict[str, Any]
    if provider == ANTHROPIC:
        error = {"type": _ANTHROPIC_TYPE[refusal.kind], "message": refusal.message}
        payload: dict[str, Any] = {"type": "error", "error": error}
    else:
        error = {"type": _OPENAI_TYPE[refusal.kind], "message": refusal.message}
        payload = {"error": error}
    if refusal.resets_at is not None:
        error["resets_at"] = int(refusal.resets_at.timestamp())
        wait = max(int((refusal.resets_at - now).total_seconds()), 1)
        headers.append((b"retry-after", str(wait).encode()))
    await _answer(send, status, payload, headers)


async def _answer(
    send: Any,
    status: int,
    payload: Mapping[str, Any],
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    body = json.dumps(payload).encode()
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), *headers],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})

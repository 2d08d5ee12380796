"""The optional HTTP server (spec §13.7): a JSON API, Prometheus metrics and a live event stream.

Every endpoint reads the orchestrator's snapshot and health; the only thing a client can ask of
the orchestrator is an early poll (`POST /api/v1/refresh`). Errors are always the JSON envelope
`{"error": {"code", "message"}}`. `serve` runs the app with uvicorn inside the daemon's event
loop, on a socket bound here so a busy port is a readable error and `0` yields the real port.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from symphony.base.secrets import SecretMasker
from symphony.core.review_actions import Refusal
from symphony.hosts.serve import serve_embedded
from symphony.observability.auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Guard,
    Refused,
    same_origin,
)
from symphony.observability.health import notes, unready
from symphony.observability.local_page import local_file_page
from symphony.observability.logging import issue_log_path
from symphony.observability.metrics import render_metrics
from symphony.observability.web_guard import WebGuard, accepted_hosts, safe_next
from symphony.tracker.webhooks import MAX_DELIVERY_BYTES, WebhookReceiver

if TYPE_CHECKING:
    import uvicorn

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def encode(content: Any, masker: SecretMasker) -> bytes:
    """JSON for a client, with the daemon's secrets masked as in the logs.

    orjson: the state snapshot is tens of KiB, and the standard encoder took about as long to
    write it as the snapshot took to build.
    """
    return masker.mask_json(orjson.dumps(content))


class JSONResponse(_StarletteJSON):
    def __init__(
        self,
        content: Any,
        masker: SecretMasker,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._masker = masker  # before the base class renders the content
        super().__init__(content, status_code=status_code, headers=headers)

    def render(self, content: Any) -> bytes:
        return encode(content, self._masker)


class Observed(Protocol):
    """What the server needs of a workflow's daemon: its read side (`DaemonView`), which does
    every read of files, git and the store, so no handler here does."""

    masker: SecretMasker

    def snapshot(self) -> dict[str, Any]: ...

    async def issue_detail(self, wanted: str) -> dict[str, Any] | None:
        """The issue in detail, with its workspace, its open command and its branch."""

    def request_refresh(self, ids: Sequence[str] | None = None) -> None: ...

    def webhook(self, kind: str) -> WebhookReceiver | None: ...

    def follow_webhook(self, kind: str, headers: Mapping[str, str]) -> bool: ...

    def add_listener(self, listener: Any) -> None: ...

    def pause(self, by: str) -> bool: ...

    def resume(self, by: str) -> bool: ...

    async def ticket_action(
        self, wanted: str, action: str, *, comment: str, by: str, tickets: object = None,
        comments: object = None,
    ) -> dict[str, Any] | Refusal: ...  # fmt: skip

    def review_queue(self) -> dict[str, Any]: ...

    async def review_detail(self, wanted: str) -> dict[str, Any] | None: ...

    def local_file(self, kind: str, wanted: str) -> tuple[str, str] | None:
        """(path, text) of a ticket's local board file ("ticket") or local pull request file
        ("pull"), only the one the daemon names for it."""


class _Changes:
    """Fans the orchestrator's one change callback out to every open event stream.

    The orchestrator offers no way to remove a listener, so the app registers once and streams
    subscribe here. Closing wakes every stream so it can end before the server stops.
    """

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Event] = set()
        self.closed = False
        self.refresh_pending = False

    def notify(self) -> None:
        # The orchestrator calls this after a loop pass, so any queued refresh has been handled.
        self.refresh_pending = False
        for event in self._subscribers:
            event.set()

    def close(self) -> None:
        self.closed = True
        for event in self._subscribers:
            event.set()

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._subscribers.add(event)
        try:
            yield event
        finally:
            self._subscribers.discard(event)


def create_app(
    orchestrator: Observed,
    *,
    keepalive_s: float = 15.0,
    min_event_interval_s: float = 0.25,
    logs_root: Path | None = None,
    auth_token: str | None = None,
) -> Starlette:
    """The API app; `app.state.changes.close()` ends open event streams (done by `serve`).
    `auth_token` opens a person's actions (`symphony.observability.auth`)."""
    guard = Guard(auth_token)
    changes = _Changes()
    orchestrator.add_listener(changes.notify)
    api = _Api(
        orchestrator,
        guard,
        changes,
        logs_root=logs_root.resolve() if logs_root is not None else None,
        keepalive_s=keepalive_s,
        min_event_interval_s=min_event_interval_s,
    )
    app = Starlette(
        routes=[
            Route("/", api.dashboard, methods=["GET"]),
            Route("/review", api.review, methods=["GET"]),
            Route("/api/v1/review", api.review_queue, methods=["GET"]),
            Route("/api/v1/state", api.state, methods=["GET"]),
            Route("/api/v1/refresh", api.refresh, methods=["POST"]),
            Route("/api/v1/actions/{action}", api.act, methods=["POST"]),
            Route("/login", api.login_page, methods=["GET"]),
            Route("/login", api.login, methods=["POST"]),
            Route("/logout", api.logout, methods=["POST"]),
            Route("/api/v1/events", api.events, methods=["GET"]),
            Route("/api/v1/webhooks/{kind}", api.webhook, methods=["POST"]),
            Route("/local/{kind:str}/{issue_identifier:path}", api.local_file, methods=["GET"]),
            # Identifiers may hold a slash (GitHub's `acme/widgets#1`): the longer routes first.
            Route(
                "/api/v1/{issue_identifier:path}/actions/{action}",
                api.ticket_action,
                methods=["POST"],
            ),
            Route("/api/v1/{issue_identifier:path}/review", api.review_detail, methods=["GET"]),
            Route("/api/v1/{issue_identifier:path}", api.issue, methods=["GET"]),
            Route("/metrics", api.metrics, methods=["GET"]),
            Route("/livez", api.livez, methods=["GET"]),
            Route("/readyz", api.readyz, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.state.changes = changes
    app.state.masker = api.masker
    return app


class _Api:
    """One app's route handlers, over what they share: the observed daemon (and the masker it
    had when the app was made), the action guard, the change fan-out and where issue logs live.

    Handlers only read the daemon or pass a request on to it; none of them decides.
    """

    def __init__(
        self,
        orchestrator: Observed,
        guard: Guard,
        changes: _Changes,
        *,
        logs_root: Path | None,
        keepalive_s: float,
        min_event_interval_s: float,
    ) -> None:
        self.orchestrator = orchestrator
        self.masker = orchestrator.masker
        self.guard = guard
        self.changes = changes
        self.logs_root = logs_root
        self.keepalive_s = keepalive_s
        self.min_event_interval_s = min_event_interval_s
        # Read once: the pages are served on every visit and never change while running.
        self.page = resources.files(__package__).joinpath("dashboard.html").read_bytes()
        self.review_page = resources.files(__package__).joinpath("review.html").read_bytes()

    def _json(
        self, content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
    ) -> Response:
        return JSONResponse(content, self.masker, status_code=status_code, headers=headers)

    def _refused(self, error: Refused) -> Response:
        headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s else None
        body = {"error": {"code": error.code, "message": error.message}}
        return self._json(body, status_code=error.status, headers=headers)

    def _authorize(self, request: Request) -> str:
        """Who acts, or `Refused` (see `Guard.authorize`)."""
        return self.guard.authorize(
            request.method,
            _lower(request.headers),
            request.cookies,
            _base_url(request),
            client=_client(request),
        )

    # Pages

    async def dashboard(self, request: Request) -> Response:
        return Response(self.page, media_type="text/html; charset=utf-8")

    async def review(self, request: Request) -> Response:
        return Response(self.review_page, media_type="text/html; charset=utf-8")

    # Reading

    async def state(self, request: Request) -> Response:
        return self._json(self.orchestrator.snapshot())

    async def issue(self, request: Request) -> Response:
        wanted = request.path_params["issue_identifier"]
        if wanted == "refresh":
            raise HTTPException(405, headers={"Allow": "POST"})
        detail = await self.orchestrator.issue_detail(wanted)
        if detail is None:
            raise IssueNotFound(wanted)
        identifier = detail["issue_identifier"]
        logs_root = self.logs_root
        detail["log_file"] = str(issue_log_path(logs_root, identifier)) if logs_root else None
        return self._json(detail)

    async def local_file(self, request: Request) -> Response:
        """A local board's ticket or a local pull request, which `file://` links name and a
        browser will not open from a web page."""
        kind, wanted = request.path_params["kind"], request.path_params["issue_identifier"]
        found = self.orchestrator.local_file(kind, wanted) if kind in ("ticket", "pull") else None
        if found is None:
            raise IssueNotFound(wanted)
        path, text = found
        page = local_file_page(kind, wanted, path, self.masker.mask(text), _root(request))
        return Response(page, media_type="text/html; charset=utf-8")

    async def review_queue(self, request: Request) -> Response:
        return self._json({
            **self.orchestrator.review_queue(), "actions": self.guard.enabled,
            "signed_in": self.guard.signed_in(request.cookies),
        })  # fmt: skip

    async def review_detail(self, request: Request) -> Response:
        wanted = request.path_params["issue_identifier"]
        detail = await self.orchestrator.review_detail(wanted)
        if detail is None:
            raise IssueNotFound(wanted)
        return self._json(detail)

    async def events(self, request: Request) -> Response:
        return StreamingResponse(
            _event_stream(
                self.orchestrator, self.changes, self.keepalive_s, self.min_event_interval_s
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def metrics(self, request: Request) -> Response:
        text = self.masker.mask(render_metrics(self.orchestrator.snapshot()))
        return PlainTextResponse(text, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def livez(self, request: Request) -> Response:
        return self._json({"live": True})

    async def readyz(self, request: Request) -> Response:
        snapshot = self.orchestrator.snapshot()
        reasons = unready(snapshot)
        body = {"ready": not reasons, "reasons": reasons, "notes": notes(snapshot)}
        return self._json(body, status_code=200 if not reasons else 503)

    # Asking the daemon

    async def refresh(self, request: Request) -> Response:
        coalesced = self.changes.refresh_pending
        if not coalesced:
            self.changes.refresh_pending = True
            self.orchestrator.request_refresh()
        return self._json({"queued": True, "coalesced": coalesced}, status_code=202)

    async def webhook(self, request: Request) -> Response:
        kind = request.path_params["kind"]
        receiver = self.orchestrator.webhook(kind)
        if receiver is None:
            raise HTTPException(
                404, f"no webhook for {kind!r}: set tracker.provider.webhook_secret"
            )
        body = await _bounded_body(request)
        if body is None:
            raise HTTPException(413, f"a delivery is at most {MAX_DELIVERY_BYTES:,} bytes")
        headers = _lower(request.headers)
        if not receiver.verify(headers, body, time.time()):
            return self._json({"error": "unauthorized"}, status_code=401)
        payload = _json_body(body, "the delivery")
        if self.orchestrator.follow_webhook(kind, headers):
            return self._json({"queued": True, "pull_requests": True}, status_code=202)
        try:
            ids = receiver.issue_ids(payload)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError):
            raise HTTPException(400, f"the delivery is not shaped as {kind} sends one") from None
        if ids is None:
            self.orchestrator.request_refresh()
        elif ids:
            self.orchestrator.request_refresh(ids)
        answer = {"queued": True, "issues": list(ids) if ids is not None else None}
        return self._json(answer, status_code=202)

    # A person's actions

    async def act(self, request: Request) -> Response:
        action = request.path_params["action"]
        try:
            by = self._authorize(request)
        except Refused as error:
            return self._refused(error)
        if action == "pause":
            if not self.orchestrator.pause(by):
                return self._refused(Refused(409, "already_paused", "dispatch is paused already"))
            return self._json({"action": "pause", "by": by, "paused": True})
        if action == "resume":
            if not self.orchestrator.resume(by):
                return self._refused(Refused(409, "not_paused", "dispatch is not paused"))
            return self._json({"action": "resume", "by": by, "paused": False})
        raise HTTPException(404, f"no daemon action {action!r}: pause or resume")

    async def ticket_action(self, request: Request) -> Response:
        wanted, action = request.path_params["issue_identifier"], request.path_params["action"]
        try:
            by = self._authorize(request)
        except Refused as error:
            return self._refused(error)
        body = await _bounded_body(request)
        if body is None:
            raise HTTPException(413, "an action's body is small")
        fields = _json_body(body, "the body") if body.strip() else {}
        comment = fields.get("comment", "") if isinstance(fields, dict) else ""
        if not isinstance(comment, str):
            raise HTTPException(400, "comment must be text")
        tickets = fields.get("tickets") if isinstance(fields, dict) else None
        lines = fields.get("comments") if isinstance(fields, dict) else None
        answer = await self.orchestrator.ticket_action(
            wanted, action, comment=comment, by=by, tickets=tickets, comments=lines
        )
        if isinstance(answer, Refusal):
            status = _REFUSAL_STATUS.get(answer.code, 409)
            return self._refused(Refused(status, answer.code, answer.message))
        return self._json(answer)

    # Logging in

    async def login_page(self, request: Request) -> Response:
        target = safe_next(request.query_params.get("next", ""), _root(request))
        page_bytes = _login_form(self.guard.enabled, target, _root(request))
        return Response(page_bytes, media_type="text/html; charset=utf-8")

    async def login(self, request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and not same_origin(origin, _base_url(request)):
            return self._refused(
                Refused(403, "cross_origin", f"a login from {origin} is not taken")
            )
        body = await _bounded_body(request)
        if body is None:
            raise HTTPException(413, "a login form is small")
        fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        try:
            session_id, session = self.guard.login(
                _client(request), fields.get("token", ""), fields.get("name", "")
            )
        except Refused as error:
            return self._refused(error)
        root = _root(request)
        target = safe_next(fields.get("next", ""), root)  # never a redirect to another site
        response = Response(status_code=303, headers={"Location": target})
        secure = request.url.scheme == "https"
        # Under a fleet's `/w/<name>/` each workflow keeps its own session.
        response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="strict",
                            secure=secure, path=root)  # fmt: skip
        response.set_cookie(CSRF_COOKIE, session.csrf, samesite="strict", secure=secure, path=root)
        return response

    async def logout(self, request: Request) -> Response:
        self.guard.logout(request.cookies)
        root = _root(request)
        response = Response(status_code=303, headers={"Location": root})
        response.delete_cookie(SESSION_COOKIE, path=root)
        response.delete_cookie(CSRF_COOKIE, path=root)
        return response


_REFUSAL_STATUS = {
    "unknown_action": 404,
    "not_found": 404,
    "comment_required": 400,
    "comment_too_long": 400,
    "tracker_unreachable": 503,
    "tickets_required": 400,
    "comments_invalid": 400,
    "code_host_unreachable": 502,
    "not_running": 409,
    "nothing_to_retry": 409,
}
"""A refused ticket action's HTTP status; any other refusal is 409 (not at that checkpoint)."""


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _client(request: Request) -> str:
    """The client's address: the connection's (`server.trusted_proxies` decides whether a
    proxy's `X-Forwarded-For` replaced it)."""
    return request.client.host if request.client is not None else "?"


def _json_body(body: bytes, what: str) -> Any:
    """The JSON of a body, or a 400 saying it is not (malformed, or nested past what is
    parsed: a JSON array a hundred thousand levels deep is not a delivery)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise HTTPException(400, f"{what} is not JSON") from None


def _base_url(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


def _root(request: Request) -> str:
    """Where this app is mounted (`/w/<name>/` in a fleet), ending in a slash."""
    return str(request.scope.get("root_path") or "").rstrip("/") + "/"


_TOKEN_FROM_FRAGMENT = (
    # A printed login link carries the token in its fragment (`#token=`), which no request
    # sends: fill it in, take it out of the address bar and the history, and ask for the name.
    "<script>(() => { const token = new URLSearchParams(location.hash.slice(1)).get('token');"
    " if (!token) return; document.querySelector('input[name=token]').value = token;"
    " history.replaceState(null, '', location.pathname + location.search);"
    " document.querySelector('input[name=name]').focus(); })();</script>"
)


def _login_form(enabled: bool, target: str = "/", root: str = "/") -> bytes:
    """The page a browser logs in on; the token is posted, never put in a URL. `target` is
    where it goes after (a path here, `safe_next`)."""
    if not enabled:
        note = (
            "<p>Actions are off: set <code>server.auth_token</code> in WORKFLOW.md (for "
            "example <code>$SYMPHONY_TOKEN</code>) and restart the daemon.</p>"
        )
    else:
        note = (
            f'<form method="post" action="{root}login">'
            f'<input type="hidden" name="next" value="{html.escape(target, quote=True)}">'
            '<label>Your name <input name="name" '
            'autocomplete="username" required></label> <label>Token <input name="token" '
            'type="password" autocomplete="current-password" required></label> '
            '<button type="submit">Log in</button></form>' + _TOKEN_FROM_FRAGMENT
        )
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><title>symphony: log in</title>"
        "<body style='font-family: system-ui, sans-serif; margin: 3rem'><h1>symphony</h1>"
        f"<p>Reading needs no login; approving, sending back and pausing do.</p>{note}</body>"
        "</html>"
    ).encode()


async def _bounded_body(request: Request) -> bytes | None:
    """The body, or None as soon as it is known to exceed MAX_DELIVERY_BYTES."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_DELIVERY_BYTES:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_DELIVERY_BYTES:
            return None
    return bytes(body)


class IssueNotFound(HTTPException):
    def __init__(self, identifier: str) -> None:
        super().__init__(404, f"no running or retrying issue {identifier!r}")


_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if isinstance(exc, IssueNotFound):
        code = "issue_not_found"
    else:
        code = _ERROR_CODES.get(exc.status_code, "http_error")
    message = exc.detail
    if code == "not_found":
        message = f"no such endpoint: {request.url.path}"
    elif code == "method_not_allowed":
        message = f"{request.method} is not allowed on {request.url.path}"
    return JSONResponse(
        {"error": {"code": code, "message": message}},
        request.app.state.masker,
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(
        {"error": {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}},
        request.app.state.masker,
        status_code=500,
    )


# Event stream


async def _event_stream(
    orchestrator: Observed, changes: _Changes, keepalive_s: float, min_interval_s: float
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    with changes.subscribe() as changed:
        yield _sse(orchestrator.snapshot(), orchestrator.masker)
        sent_at = loop.time()
        while not changes.closed:
            try:
                async with asyncio.timeout(keepalive_s):
                    await changed.wait()
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if changes.closed:
                break
            # Throttle: changes arriving in the wait are folded into the next snapshot.
            await asyncio.sleep(max(sent_at + min_interval_s - loop.time(), 0.0))
            changed.clear()
            if changes.closed:
                break
            yield _sse(orchestrator.snapshot(), orchestrator.masker)
            sent_at = loop.time()


def _sse(snapshot: dict[str, Any], masker: SecretMasker) -> str:
    return f"data: {encode(snapshot, masker).decode()}\n\n"


# Serving


@dataclass(slots=True)
class RunningServer:
    """The daemon's HTTP server while it runs: where it listens, and how to stop it."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    url: str
    app: Starlette

    async def stop(self) -> None:
        """End open event streams, then stop accepting and wait for the server task."""
        self.app.state.changes.close()
        self.server.should_exit = True
        await self.task


async def serve(
    app: Starlette,
    host: str,
    port: int,
    *,
    allowed_hosts: tuple[str, ...] = (),
    trusted_proxies: tuple[str, ...] = (),
    tasks: asyncio.TaskGroup | None = None,
) -> RunningServer:
    """Bind `host:port` (0 = any free port) and serve `app` in the running loop, behind the
    web guard (`symphony.observability.web_guard`)."""
    guarded = WebGuard(app, accepted_hosts(host, allowed_hosts))
    server, task, url = await serve_embedded(
        guarded, host, port, name="http-server", trusted_proxies=trusted_proxies, tasks=tasks
    )
    return RunningServer(server, task, url, app)

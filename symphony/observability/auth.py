"""Who may act through the HTTP server: a person's actions need `server.auth_token`.

Reading stays open (the dashboard, the API); an action (`POST /api/v1/actions/...`) is taken
from a request that carries the token as a bearer header, or from a browser that logged in
once (`POST /login` with the token sets an HttpOnly, SameSite=Strict session cookie) and sends
its session's CSRF token back in the `X-Symphony-CSRF` header. A request whose `Origin` is not
the server's own is refused whatever it carries. Without a token configured every action is
refused. Failed logins and wrong bearer tokens are limited per client address.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SESSION_COOKIE = "symphony_session"
CSRF_COOKIE = "symphony_csrf"
CSRF_HEADER = "x-symphony-csrf"
ACTOR_HEADER = "x-symphony-actor"
LOGIN_FAILURES = 5
"""Failed logins from one address within `LOGIN_WINDOW_S` before it must wait."""
LOGIN_WINDOW_S = 60.0
MAX_SESSIONS = 1_000
MAX_NAME_CHARS = 80


class Refused(Exception):
    """Why a request may not act: an HTTP status, a stable code and words for a person."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Session:
    """A browser's login: the name it acts under, and the CSRF token it must send back."""

    name: str
    csrf: str


@dataclass(slots=True)
class Guard:
    """The server's check of every action, and its login sessions (kept in memory: a restart
    logs everybody out)."""

    token: str | None
    clock: Callable[[], float] = time.monotonic
    sessions: dict[str, Session] = field(default_factory=dict)
    failures: dict[str, deque[float]] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.token is not None

    def authorize(
        self,
        method: str,
        headers: Mapping[str, str],
        cookies: Mapping[str, str],
        host_url: str,
        client: str = "?",
    ) -> str:
        """The name of who acts; raises Refused. `headers` are lower-cased names. Wrong
        bearer tokens from `client` count as failed logins do."""
        if self.token is None:
            raise Refused(
                403, "actions_disabled",
                "actions are off: set server.auth_token in WORKFLOW.md (for example "
                "$SYMPHONY_TOKEN) and restart the daemon",
            )  # fmt: skip
        if method != "POST":
            raise Refused(405, "method_not_allowed", "an action is a POST")
        origin = headers.get("origin")
        if origin is not None and not same_origin(origin, host_url):
            raise Refused(403, "cross_origin", f"an action from {origin} is not taken here")
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            self._hold_back(client)
            if not hmac.compare_digest(bearer[7:].strip().encode(), self.token.encode()):
                self.failures[client].append(self.clock())
                raise Refused(401, "unauthorized", "the bearer token is not server.auth_token")
            self.failures.pop(client, None)
            return _name(headers.get(ACTOR_HEADER)) or "api"
        session = self.sessions.get(cookies.get(SESSION_COOKIE, ""))
        if session is None:
            raise Refused(
                401, "unauthorized", "log in at /login, or send the token as a bearer header"
            )
        sent = headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise Refused(403, "csrf", f"the {CSRF_HEADER} header does not match the session")
        return session.name

    def signed_in(self, cookies: Mapping[str, str]) -> str | None:
        """Whose session the cookies carry, or None: what the pages show as signed in."""
        session = self.sessions.get(cookies.get(SESSION_COOKIE, ""))
        return session.name if session is not None else None

    def login(self, client: str, token: str, name: str) -> tuple[str, Session]:
        """A new session for the right token (its id and its CSRF token); raises Refused when
        actions are off, the token is wrong, or `client` failed too often lately."""
        if self.token is None:
            raise Refused(403, "actions_disabled", "actions are off: set server.auth_token")
        self._hold_back(client)
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            self.failures[client].append(self.clock())
            raise Refused(401, "unauthorized", "that is not the server's token")
        self.failures.pop(client, None)
        if len(self.sessions) >= MAX_SESSIONS:
            self.sessions.pop(next(iter(self.sessions)))
        session_id = secrets.token_urlsafe(32)
        session = Session(_name(name) or "someone", secrets.token_urlsafe(32))
        self.sessions[session_id] = session
        return session_id, session

    def _hold_back(self, client: str) -> None:
        """Refuse (429) a client with LOGIN_FAILURES wrong tokens in the last window."""
        now = self.clock()
        failed = self.failures.setdefault(client, deque())
        while failed and now - failed[0] > LOGIN_WINDOW_S:
            failed.popleft()
        if len(failed) >= LOGIN_FAILURES:
            wait = max(int(LOGIN_WINDOW_S - (now - failed[0])) + 1, 1)
            raise Refused(429, "too_many_logins", f"too many wrong tokens; wait {wait} s", wait)

    def logout(self, cookies: Mapping[str, str]) -> None:
        self.sessions.pop(cookies.get(SESSION_COOKIE, ""), None)


def same_origin(origin: str, host_url: str) -> bool:
    mine, theirs = urlsplit(host_url), urlsplit(origin)
    return (theirs.scheme, theirs.netloc.lower()) == (mine.scheme, mine.netloc.lower())


def _name(raw: str | None) -> str:
    """Who a person says they are, as shown in the activity: printable and short."""
    if not raw:
        return ""
    return "".join(ch for ch in raw.strip() if ch.isprintable())[:MAX_NAME_CHARS]

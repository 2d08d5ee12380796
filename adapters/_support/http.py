"""The HTTP client every tracker adapter uses: timeouts, bounded retries, rate limits, errors.

- Transport failures and 5xx answers are retried a bounded number of times with exponential
  backoff (tenacity); what still fails becomes `tracker_request` / `tracker_status`. A request
  that is not idempotent (by default a POST: it creates a comment or a ticket) is retried only
  when it cannot have reached the provider (the connection was never made): after a 5xx or a
  lost answer it may have been applied, and sending it again could create it twice.
- Rate limits are read from the provider's headers. A limited answer (429, or 403 with no
  remaining quota) blocks the client until the provider's reset time or `Retry-After`: calls made
  before then fail at once with `tracker_rate_limited` and spend nothing.
- Conditional GETs (`ETag` / `If-None-Match`) let an unchanged resource cost no quota where the
  provider supports it; a 304 returns the cached body, marked `from_cache`, so a caller can tell
  that nothing changed without comparing bodies.
- An optional `limiter` (`adapters._support.ratelimit`) keeps every request of the client, each
  retry included, within a provider's published per-window limit as the provider counts it
  (Kaiten: 5 per second).
- Error messages name the provider, the status and the provider's own message, never a
  request header, so a credential cannot leak through them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_RATE_LIMITED,
    TRACKER_REQUEST,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    TrackerError,
)

from .ratelimit import SlidingWindowLimiter

DEFAULT_WAIT_S = 60.0
"""How long to stay away after a limited answer that names no reset time."""

_RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RateLimitHeaders:
    """Where a provider reports its quota. `reset` is epoch seconds unless `reset_is_delta`."""

    remaining: str | None = "x-ratelimit-remaining"
    reset: str | None = "x-ratelimit-reset"
    reset_is_delta: bool = False
    reset_in_ms: bool = False


@dataclass(frozen=True, slots=True)
class Response:
    """A provider's answer to one request, with its body decoded."""

    status: int
    headers: httpx.Headers
    body: Any
    """Decoded JSON (None for an empty body), or the text itself when asked for `text`."""
    url: str
    from_cache: bool = False
    """The provider answered 304: this is the body cached with the ETag it matched."""


@dataclass(slots=True)
class Quota:
    """What the provider last said about the quota, and what this client has spent."""

    remaining: int | None = None
    reset_at: float | None = None
    requests: int = 0
    not_modified: int = 0
    blocked_until: float = 0.0


class _Retryable(Exception):
    def __init__(self, error: TrackerError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class HttpClient:
    """A provider's HTTP API, called with the module's retries, rate limits and conditional GETs."""

    provider: str
    """Human name used in messages: `GitHub`, `Linear`, ..."""
    base_url: str
    headers: Mapping[str, str]
    rate_limits: RateLimitHeaders = field(default_factory=RateLimitHeaders)
    timeout_s: float = 30.0
    attempts: int = 3
    backoff_s: float = 0.5
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    transport: httpx.AsyncBaseTransport | None = None
    quota: Quota = field(default_factory=Quota)
    limiter: SlidingWindowLimiter | None = None
    """When set, every request waits for room in it and holds it until answered."""
    _client: httpx.AsyncClient | None = field(default=None, init=False, repr=False)
    _etags: dict[str, tuple[str, Response]] = field(default_factory=dict, init=False, repr=False)

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        conditional: bool = False,
        ok: tuple[int, ...] = (200, 201, 204),
        idempotent: bool | None = None,
        text: bool = False,
    ) -> Response:
        """Send one request (retried while transient) and return its decoded answer.

        `idempotent` says whether sending it twice is harmless; by default every method but POST.
        `text`: the answer is plain text (a job log), kept as `str` rather than decoded as JSON.
        """
        if idempotent is None:
            idempotent = method.upper() != "POST"
        now = self.clock()
        if self.quota.blocked_until > now:
            wait = self.quota.blocked_until - now
            raise TrackerError(
                TRACKER_RATE_LIMITED,
                f"{self.provider} rate limit: waiting {wait:.0f}s more before the next request",
                retry_after_s=wait,
            )
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=8 * self.backoff_s),
            retry=retry_if_exception_type(_Retryable),
            sleep=self.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._send_once(
                        method, url, params, json_body, conditional, ok, idempotent, text
                    )
        except _Retryable as exc:
            raise exc.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send_once(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None,
        json_body: Any,
        conditional: bool,
        ok: tuple[int, ...],
        idempotent: bool = True,
        text: bool = False,
    ) -> Response:
        client = self._http()
        cache_key = f"{url}?{sorted((params or {}).items())}"
        headers: dict[str, str] = {}
        cached = self._etags.get(cache_key) if conditional else None
        if cached is not None:
            headers["If-None-Match"] = cached[0]
        try:
            async with self.limiter.slot() if self.limiter else contextlib.nullcontext():
                answer = await client.request(
                    method, url, params=params, json=json_body, headers=headers
                )
        except httpx.TransportError as exc:
            error = TrackerError(
                TRACKER_REQUEST,
                f"{self.provider} unreachable at {_address(exc, client, url)}: {_reason(exc)}",
            )
            if idempotent or isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                raise _Retryable(error) from None
            raise TrackerError(
                TRACKER_REQUEST,
                f"{self.provider}: {type(exc).__name__} after sending {method} {url}; it may "
                "have been applied, so it is not sent again blindly",
            ) from None
        self.quota.requests += 1
        self._note_quota(answer.headers)
        if answer.status_code == 304 and cached is not None:
            self.quota.not_modified += 1
            return dataclasses.replace(cached[1], from_cache=True)
        if self._is_rate_limited(answer):
            raise self.rate_limited(answer.headers, _provider_message(answer))
        if answer.status_code in _RETRYABLE_STATUSES:
            if not idempotent:
                raise self._status_error(answer)
            raise _Retryable(self._status_error(answer))
        if answer.status_code not in ok:
            raise self._status_error(answer)
        body = answer.text if text else _decode(answer, self.provider)
        response = Response(answer.status_code, answer.headers, body, str(answer.url))
        etag = answer.headers.get("etag")
        if conditional and etag:
            self._etags[cache_key] = (etag, response)
        return response

    def rate_limited(self, headers: httpx.Headers, detail: str | None = None) -> TrackerError:
        """Block the client until the provider's reset and describe it (also for GraphQL
        errors that report a limit inside a 200 answer)."""
        wait = self._wait_from(headers)
        self.quota.blocked_until = max(self.quota.blocked_until, self.clock() + wait)
        suffix = f": {detail}" if detail else ""
        return TrackerError(
            TRACKER_RATE_LIMITED,
            f"{self.provider} rate limit reached; next request in {wait:.0f}s{suffix}",
            retry_after_s=wait,
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # Helpers

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=dict(self.headers),
                timeout=self.timeout_s,
                transport=self.transport,
                follow_redirects=True,
            )
        return self._client

    def _note_quota(self, headers: httpx.Headers) -> None:
        names = self.rate_limits
        remaining = _number(headers.get(names.remaining)) if names.remaining else None
        if remaining is not None:
            self.quota.remaining = int(remaining)
        reset = self._reset_at(headers)
        if reset is not None:
            self.quota.reset_at = reset

    def _reset_at(self, headers: httpx.Headers) -> float | None:
        names = self.rate_limits
        value = _number(headers.get(names.reset)) if names.reset else None
        if value is None:
            return None
        if names.reset_in_ms:
            value /= 1000
        return self.clock() + value if names.reset_is_delta else value

    def _is_rate_limited(self, answer: httpx.Response) -> bool:
        if answer.status_code == 429:
            return True
        if answer.status_code == 403:
            names = self.rate_limits
            remaining = _number(answer.headers.get(names.remaining)) if names.remaining else None
            return remaining == 0 or "retry-after" in answer.headers
        return False

    def _wait_from(self, headers: httpx.Headers) -> float:
        retry_after = headers.get("retry-after")
        if retry_after is not None:
            seconds = _number(retry_after)
            if seconds is None:
                parsed = email.utils.parsedate_to_datetime(retry_after) if retry_after else None
                seconds = parsed.timestamp() - self.clock() if parsed is not None else None
            if seconds is not None:
                return max(seconds, 1.0)
        reset = self._reset_at(headers)
        if reset is not None:
            return max(reset - self.clock(), 1.0)
        return DEFAULT_WAIT_S

    def _status_error(self, answer: httpx.Response) -> TrackerError:
        status = answer.status_code
        detail = _provider_message(answer)
        if status == 401:
            text = "authentication failed (401): check the token"
        elif status == 403:
            text = "forbidden (403): the token lacks access"
        elif status == 404:
            text = f"not found (404): {answer.request.url.path}"
        else:
            text = f"answered {status}"
        suffix = f": {detail}" if detail else ""
        return TrackerError(TRACKER_STATUS, f"{self.provider} {text}{suffix}")


def _decode(answer: httpx.Response, provider: str) -> Any:
    if not answer.content:
        return None
    try:
        return answer.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TrackerError(
            TRACKER_RESPONSE,
            f"{provider} answered {answer.status_code} with a body that is not JSON",
        ) from None


def _provider_message(answer: httpx.Response) -> str | None:
    try:
        body = answer.json()
    except ValueError:
        text = answer.text.strip()
        return text[:200] or None
    if isinstance(body, dict):
        for key in ("message", "error_description", "error"):
            value = body.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()[:200]
    return None


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.strip())
    except ValueError:
        return None


Params = Mapping[str, Any] | None
NextPage = Callable[[httpx.Headers, str, Params], tuple[str, Params] | None]
"""Where the page after (url, params) is, from that page's headers; None on the last page."""


def follow_link(headers: httpx.Headers, url: str, params: Params) -> tuple[str, Params] | None:
    """The next page from the `Link` header; its URL carries every parameter."""
    link = next_link(headers)
    return (link, None) if link else None


async def get_pages(
    client: HttpClient,
    url: str,
    params: Params,
    page_limit: int,
    next_page: NextPage = follow_link,
) -> list[Any]:
    """Every item of a paginated REST list, at most `page_limit` pages, each a conditional GET.

    A page that is not a list fails the read, and so does a next page already visited.
    """
    items: list[Any] = []
    seen: set[str] = set()
    for _ in range(page_limit):
        response = await client.request("GET", url, params=params, conditional=True)
        if not isinstance(response.body, list):
            raise TrackerError(
                TRACKER_RESPONSE, f"{client.provider} {url} did not answer with a list"
            )
        items.extend(response.body)
        following = next_page(response.headers, url, params)
        if following is None:
            break
        key = f"{following[0]}?{sorted((following[1] or {}).items())}"
        if key in seen:
            raise TrackerError(TRACKER_PAGINATION, f"{client.provider} {url} pagination loops")
        seen.add(key)
        url, params = following
    return items


def next_link(headers: httpx.Headers) -> str | None:
    """The `rel="next"` URL of an RFC 8288 `Link` header (GitHub, GitLab), if any."""
    for part in headers.get("link", "").split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            link: str = url.strip().strip("<>")
            return link
    return None


def _address(exc: httpx.TransportError, client: httpx.AsyncClient, url: str) -> str:
    """Where a failed request went, as scheme, host and port only: a path or a query may hold
    what is not for a log line."""
    try:
        target = exc.request.url
    except RuntimeError:  # raised before a request was made
        target = client.base_url.join(url)
    port = f":{target.port}" if target.port is not None else ""
    return f"{target.scheme}://{target.host}{port}"


def _reason(exc: httpx.TransportError) -> str:
    """Why the connection failed, in the operating system's words where it gave some."""
    said = str(exc).strip()
    cause: BaseException | None = exc
    for _ in range(8):  # the socket's own error lies a few causes down
        cause = cause.__cause__ or cause.__context__ if cause is not None else None
        if isinstance(cause, OSError) and (cause.errno or cause.strerror):
            # By its number: asyncio words a refused connection "Connect call failed (...)".
            words = os.strerror(cause.errno) if cause.errno else str(cause.strerror)
            said = f"{said} ({words})" if said else words
            break
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__

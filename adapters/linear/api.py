"""Linear's GraphQL endpoint over the shared HTTP client, with Linear's error conventions.

`_support.graphql()` fits providers whose failures come back as HTTP statuses. Linear answers
many failures (authentication, rate limits, invalid queries) with HTTP 400 and a GraphQL
`errors[]` body whose `extensions` say what happened, and the agent's `linear_graphql` tool
needs the `errors` and any partial `data` as they are. So this module reads the envelope itself
and classifies errors the Linear way, while every byte still goes through `HttpClient`
(retries, rate-limit blocking, messages that never include a request header).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from symphony.tracker.contract import TRACKER_RESPONSE, TRACKER_STATUS, TrackerError

from .._support.graphql import is_mutation
from .._support.http import HttpClient, RateLimitHeaders

# Linear reports its request budget in these headers; the reset is an epoch instant in
# milliseconds (Linear's SDK and API docs). Read as milliseconds, a reset mistakenly sent in
# seconds lands in 1970 and costs a 1 s wait, while the opposite reading would block for
# millennia: milliseconds is the safe interpretation. `Retry-After`, when sent, wins anyway.
RATE_LIMIT_HEADERS = RateLimitHeaders(
    remaining="x-ratelimit-requests-remaining",
    reset="x-ratelimit-requests-reset",
    reset_in_ms=True,
)

_AUTH_TYPES = frozenset({"authentication error", "forbidden"})
_AUTH_CODES = frozenset({"AUTHENTICATION_ERROR", "FORBIDDEN"})
REDACTED = "[redacted]"


@dataclass(frozen=True, slots=True)
class Answer:
    """A GraphQL answer that was not a rate limit or an authentication failure."""

    data: dict[str, Any] | None
    errors: list[dict[str, Any]] = field(default_factory=list)

    def first_error(self) -> str:
        message = self.errors[0].get("message") if self.errors else None
        return str(message or "unknown error")[:300]


def is_rate_limited(error: Mapping[str, Any]) -> bool:
    """Linear's documented `extensions.type == "ratelimited"`, or the `RATELIMITED` code."""
    extensions = error.get("extensions")
    if not isinstance(extensions, Mapping):
        return False
    kind = extensions.get("type")
    code = extensions.get("code")
    return (isinstance(kind, str) and kind.lower() == "ratelimited") or code == "RATELIMITED"


def is_auth_failure(error: Mapping[str, Any]) -> bool:
    extensions = error.get("extensions")
    if not isinstance(extensions, Mapping):
        return False
    kind = extensions.get("type")
    return (isinstance(kind, str) and kind.lower() in _AUTH_TYPES) or extensions.get(
        "code"
    ) in _AUTH_CODES


class LinearApi:
    """One Linear workspace reached with one API key."""

    def __init__(
        self,
        endpoint: str,
        api_key: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.endpoint = endpoint
        self._key = api_key
        self.http = HttpClient(
            provider="Linear",
            base_url=endpoint,
            # A personal API key goes in as it is; "Bearer" is only for OAuth tokens.
            headers={"Authorization": api_key},
            rate_limits=RATE_LIMIT_HEADERS,
            transport=transport,
            clock=clock,
            sleep=sleep,
        )

    async def send(self, query: str, variables: Mapping[str, Any] | None = None) -> Answer:
        """Run one operation. Rate limits and authentication failures raise `TrackerError`;
        other GraphQL errors come back in the answer, beside any partial data."""
        try:
            # The endpoint is passed whole: httpx would add a slash to a bare base URL.
            response = await self.http.request(
                "POST",
                self.endpoint,
                json_body={"query": query, "variables": dict(variables or {})},
                ok=(200, 400),
                idempotent=not is_mutation(query),
            )
        except TrackerError as exc:
            raise self._scrubbed(exc) from None
        body = response.body
        if not isinstance(body, dict):
            raise TrackerError(TRACKER_RESPONSE, "Linear's GraphQL answer is not a JSON object")
        raw_errors = body.get("errors")
        errors = (
            [e if isinstance(e, dict) else {"message": str(e)} for e in raw_errors]
            if isinstance(raw_errors, list)
            else []
        )
        answer = Answer(body.get("data") if isinstance(body.get("data"), dict) else None, errors)
        if any(is_rate_limited(e) for e in errors):
            raise self._scrubbed(self.http.rate_limited(response.headers, answer.first_error()))
        if any(is_auth_failure(e) for e in errors):
            raise TrackerError(
                TRACKER_STATUS,
                self.scrub(f"Linear rejected the API key or its access: {answer.first_error()}"),
            )
        if response.status != 200 and not errors:
            raise TrackerError(TRACKER_STATUS, f"Linear answered {response.status}")
        return answer

    async def data(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The `data` of an operation that must succeed completely (the daemon's own reads)."""
        answer = await self.send(query, variables)
        if answer.errors:
            raise TrackerError(
                TRACKER_RESPONSE, self.scrub(f"Linear GraphQL error: {answer.first_error()}")
            )
        if answer.data is None:
            raise TrackerError(TRACKER_RESPONSE, "Linear's GraphQL answer has no data")
        return answer.data

    def scrub(self, value: Any) -> Any:
        """`value` with the API key replaced wherever a string holds it (belt and braces:
        nothing is known to echo it, but tool output and messages reach the agent and logs)."""
        if isinstance(value, str):
            return value.replace(self._key, REDACTED) if self._key in value else value
        if isinstance(value, dict):
            return {key: self.scrub(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrub(item) for item in value]
        return value

    def _scrubbed(self, exc: TrackerError) -> TrackerError:
        if self._key not in exc.message:
            return exc
        return TrackerError(exc.category, self.scrub(exc.message), retry_after_s=exc.retry_after_s)

    async def aclose(self) -> None:
        await self.http.aclose()

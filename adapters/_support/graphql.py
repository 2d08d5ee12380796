"""GraphQL over the shared HTTP client: one POST, errors mapped to tracker categories."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from symphony.tracker.contract import TRACKER_RESPONSE, TrackerError

from .http import HttpClient


def is_mutation(query: str) -> bool:
    """Whether the document is a mutation (a query may be sent again safely; a mutation not)."""
    return re.match(r"\s*(#[^\n]*\n\s*)*mutation\b", query) is not None


def _never_limited(error: Mapping[str, Any]) -> bool:
    return False


async def graphql(
    client: HttpClient,
    query: str,
    variables: Mapping[str, Any],
    *,
    path: str = "",
    is_rate_limited: Callable[[Mapping[str, Any]], bool] = _never_limited,
) -> dict[str, Any]:
    """Run one operation and return its `data`; any `errors` entry fails the call.

    Providers report some limits inside a 200 answer; `is_rate_limited` recognizes them so the
    client blocks until the reset its headers give.
    """
    response = await client.request(
        "POST",
        path,
        json_body={"query": query, "variables": variables},
        idempotent=not is_mutation(query),
    )
    body = response.body
    if not isinstance(body, dict):
        raise TrackerError(TRACKER_RESPONSE, f"{client.provider} GraphQL answer is not an object")
    errors = body.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0] if isinstance(errors[0], dict) else {}
        message = str(first.get("message") or "unknown error")[:300]
        if any(isinstance(e, dict) and is_rate_limited(e) for e in errors):
            raise client.rate_limited(response.headers, message)
        raise TrackerError(TRACKER_RESPONSE, f"{client.provider} GraphQL error: {message}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise TrackerError(TRACKER_RESPONSE, f"{client.provider} GraphQL answer has no data")
    return data

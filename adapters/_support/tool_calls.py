"""Running one agent tool call so that it can only ever return a result.

A tracker failure becomes a failure result with its category (and, for a rate limit, when to
try again); any other exception is a bug, logged, and costs the one call, never the session.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import structlog

from symphony.base.issue import Issue
from symphony.base.tools import ToolResult
from symphony.tracker.contract import TrackerError

INTERNAL_ERROR = "internal_error"

log = structlog.get_logger(__name__)


async def guarded(
    provider: str, name: str, issue: Issue, call: Awaitable[ToolResult]
) -> ToolResult:
    try:
        return await call
    except TrackerError as exc:
        output: dict[str, Any] = {"error": exc.category, "message": exc.message}
        if exc.retry_after_s is not None:
            output["retry_after_s"] = round(exc.retry_after_s, 1)
        return ToolResult(False, output)
    except Exception as exc:
        log.exception(f"{provider} tool failed", tool=name, issue_identifier=issue.identifier)
        return ToolResult.failure(INTERNAL_ERROR, f"{name} failed: {type(exc).__name__}")

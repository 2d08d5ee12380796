"""What a provider's answer says of its usage and its limits: pure functions of the bytes.

The gateway passes every answer through unchanged and feeds the same bytes to a `UsageReader`,
which keeps only what it needs: in a stream of server-sent events, the lines of the events that
carry usage (OpenAI Responses `response.completed`, Anthropic `message_start` and
`message_delta`); in a JSON answer, its `usage` object. `limit_of` reads a refusal (429, 529)
as the provider's limit, in the same words the agents' own reports use
(`symphony.agents.limits`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from symphony.agents.limits import from_epoch, kind_of_status, names_usage_limit
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.base.wire import WireUsage
from symphony.gateway.tokens import ANTHROPIC, OPENAI

JSON_LIMIT = 4 * 1024 * 1024
"""The most of a JSON answer kept to read its usage (a longer one is passed on unread)."""
_MARKERS: Mapping[str, tuple[bytes, ...]] = {
    OPENAI: (b'"response.completed"', b'"response.incomplete"', b'"response.failed"'),
    ANTHROPIC: (b'"message_start"', b'"message_delta"'),
}


class UsageReader:
    """Reads the usage out of one answer as its bytes pass: `feed` each chunk, then `finish`.
    `streaming` says the answer is a stream of server-sent events (else JSON)."""

    def __init__(self, provider: str, *, streaming: bool) -> None:
        self.provider = provider
        self.streaming = streaming
        self._markers = _MARKERS.get(provider, ())
        self._pending: list[bytes] = []
        self._kept = 0
        self._events: list[Mapping[str, Any]] = []

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            self._kept += len(chunk)
            if self._kept <= JSON_LIMIT:
                self._pending.append(chunk)
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            self._pending.append(chunk)
            return
        lines = b"".join((*self._pending, chunk[: end + 1])) if self._pending else chunk[:end]
        self._pending = [chunk[end + 1 :]] if end + 1 < len(chunk) else []
        if any(marker in lines for marker in self._markers):
            self._read_lines(lines)

    def _read_lines(self, lines: bytes) -> None:
        for line in lines.split(b"\n"):
            if line.startswith(b"data:") and any(m in line for m in self._markers):
                try:
                    event = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(event, Mapping):
                    self._events.append(event)

    @property
    def complete(self) -> bool:
        """Whether the stream's final usage has passed (OpenAI's closing `response.*` event,
        Anthropic's `message_delta`): it is reported before the agent reads it, so the
        agent's next call already meets what it changed."""
        if self.provider == ANTHROPIC:
            return any(e.get("type") == "message_delta" for e in self._events)
        return bool(self._events)

    def finish(self) -> WireUsage | None:
        """The usage the answer reported; None when it reported none."""
        if not self.streaming:
            if self._kept > JSON_LIMIT:
                return None
            try:
                body = json.loads(b"".join(self._pending))
            except ValueError:
                return None
            return usage_of_json(self.provider, body)
        if self._pending:
            self._read_lines(b"".join(self._pending))
            self._pending = []
        if self.provider == OPENAI:
            return openai_usage(self._events)
        if self.provider == ANTHROPIC:
            return anthropic_usage(self._events)
        return None


def openai_usage(events: list[Mapping[str, Any]]) -> WireUsage | None:
    """The usage of an OpenAI Responses stream: its final event's `response.usage`."""
    for event in reversed(events):
        response = event.get("response")
        if isinstance(response, Mapping) and isinstance(response.get("usage"), Mapping):
            return _openai(response["usage"], response.get("model"))
    return None


def _openai(usage: Mapping[str, Any], model: object) -> WireUsage:
    details = usage.get("input_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    return WireUsage(
        OPENAI,
        model if isinstance(model, str) else None,
        input_tokens=_int(usage.get("input_tokens")),
        cached_input_tokens=cached,
        output_tokens=_int(usage.get("output_tokens")),
    )


def anthropic_usage(events: list[Mapping[str, Any]]) -> WireUsage | None:
    """The usage of an Anthropic Messages stream: the input of `message_start` and the
    output of the last `message_delta` (cumulative), where a later count replaces an
    earlier one."""
    model: str | None = None
    counts: dict[str, int] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), Mapping):
            message = event["message"]
            model = message.get("model") if isinstance(message.get("model"), str) else None
            usage = message.get("usage")
        elif kind == "message_delta":
            usage = event.get("usage")
        else:
            continue
        if isinstance(usage, Mapping):
            counts.update({k: _int(v) for k, v in usage.items() if isinstance(v, int)})
    if not counts:
        return None
    return _anthropic(counts, model)


def _anthropic(usage: Mapping[str, Any], model: object) -> WireUsage:
    read = _int(usage.get("cache_read_input_tokens"))
    written = _int(usage.get("cache_creation_input_tokens"))
    return WireUsage(
        ANTHROPIC,
        model if isinstance(model, str) else None,
        input_tokens=_int(usage.get("input_tokens")) + read + written,
        cached_input_tokens=read,
        cache_write_tokens=written,
        output_tokens=_int(usage.get("output_tokens")),
    )


def usage_of_json(provider: str, body: object) -> WireUsage | None:
    """The usage of a JSON answer (a call made without streaming)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("usage"), Mapping):
        return None
    if provider == OPENAI:
        return _openai(body["usage"], body.get("model"))
    if provider == ANTHROPIC:
        return _anthropic(body["usage"], body.get("model"))
    return None


def limit_of(
    status: int, headers: Mapping[str, str], body: bytes, now: datetime
) -> ProviderLimit | None:
    """The provider's limit a refusal names: a 429 (a usage limit when its words say the
    quota is spent, else a rate limit) or a 529; None for any other answer. Its reset is the
    body's `resets_at`, else `retry-after`, else unknown. `headers` are lower-case."""
    kind = kind_of_status(status)
    if kind not in (LimitKind.RATE, LimitKind.OVERLOADED):
        return None
    text = body[:4096].decode("utf-8", "replace")
    if kind is LimitKind.RATE and names_usage_limit(text):
        kind = LimitKind.USAGE
    return ProviderLimit(kind, _reset(headers, text, now), _detail(text) or f"HTTP {status}")


def _reset(headers: Mapping[str, str], text: str, now: datetime) -> datetime | None:
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, Mapping) and (at := from_epoch(error.get("resets_at"))) is not None:
        return at
    after = headers.get("retry-after", "").strip()
    if after.isdigit():
        return now + timedelta(seconds=int(after))
    if after:
        try:
            from email.utils import parsedate_to_datetime  # only for a dated Retry-After

            return parsedate_to_datetime(after).astimezone(UTC)
        except (TypeError, ValueError):
            return None
    return None


def _detail(text: str) -> str:
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, Mapping) else None
    return message[:300] if isinstance(message, str) else ""


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

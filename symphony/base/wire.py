"""What the model gateway measured of one model call, as its provider reported it on the wire.

The gateway (`symphony.gateway`) reads each answer it passes on and reports a `WireUsage`; the
scheduling core adds it to the run and the ticket beside what the agent itself reported
(`symphony.core.gateway`), so a difference between the two shows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WireUsage:
    """The usage of one model call. `input_tokens` includes the `cached_input_tokens` read
    from the provider's prompt cache and the `cache_write_tokens` written to it (the same
    convention as `symphony.base.events.TokenUsage`)."""

    provider: str
    model: str | None = None
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

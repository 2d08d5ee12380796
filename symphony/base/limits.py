"""A provider's limit, as an agent reported it: the account or the model, not the work.

An agent's turn that ends because the provider refused it (a usage limit, a rate limit, an
overloaded or failing model server) says so with a `ProviderLimit`: what kind of limit, when
the provider said it resets (None when it did not), and the provider's words. The agent layer
recognises it per protocol (`symphony.agents`); the core pauses the agent kind that met it until
the reset (`symphony.core.limits`) instead of counting a failure of the ticket's run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class LimitKind(enum.StrEnum):
    USAGE = "usage limit"
    """The account's quota is used up until a window resets (codex `usageLimitExceeded`)."""
    RATE = "rate limit"
    """Too many requests for now (HTTP 429, codex `rateLimitExceeded`)."""
    OVERLOADED = "overloaded"
    """The provider is at capacity (HTTP 529, codex `serverOverloaded`)."""
    OUTAGE = "provider error"
    """The model server failed or could not be reached (HTTP 5xx, connection failures)."""


@dataclass(frozen=True, slots=True)
class ProviderLimit:
    """A provider's refusal of an agent's turn: the kind of limit, when it lifts, and its words."""

    kind: LimitKind
    resets_at: datetime | None = None
    """When the provider said the limit lifts; None when it named no time."""
    detail: str = ""
    """The provider's own words (masked like every agent message)."""

    def describe(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else str(self.kind)

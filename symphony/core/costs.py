"""Money: the fleet's spend per day and per model, and the words of the budget comments.

The scheduling core prices every usage report with the session's model (`symphony.config.pricing`)
and adds it to the run, the ticket (across attempts, stages and restarts), the UTC day and the
model. Tokens without a price are counted apart: a cost that includes them is unknown, never
zero. The budget decisions themselves are in `symphony.core.budgets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

UNKNOWN_MODEL = "unknown"
"""Where the spend of sessions whose agent named no model is counted."""


@dataclass(slots=True)
class Spend:
    """Spend on one UTC day or one model: the cost of the priced tokens, and every token, those
    without a price counted apart (while any, the cost is unknown)."""

    usd: float = 0.0
    """The cost of the priced tokens."""
    tokens: int = 0
    unpriced_tokens: int = 0

    def add(self, cost: float | None, tokens: int) -> None:
        self.tokens += tokens
        if cost is None:
            self.unpriced_tokens += tokens
        else:
            self.usd += cost

    @property
    def known_usd(self) -> float | None:
        return None if self.unpriced_tokens else self.usd

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "usd": round(self.usd, 6),
            "known_usd": None if self.unpriced_tokens else round(self.usd, 6),
            "tokens": self.tokens,
            "unpriced_tokens": self.unpriced_tokens,
        }


def day_key(wall: datetime) -> str:
    """The UTC day a moment belongs to, `YYYY-MM-DD` (walls are UTC throughout)."""
    return wall.date().isoformat()


def usd(amount: float | None) -> str:
    """`$4.02` (`$0.0017` below a cent, which would read as nothing), or `unknown` when a
    price was missing."""
    if amount is None:
        return "unknown"
    return f"${amount:.4f}" if 0 < amount < 0.01 else f"${amount:,.2f}"


def by_stage(costs: Mapping[str, float]) -> str:
    return ", ".join(f"{stage} {usd(cost)}" for stage, cost in costs.items()) or "nothing yet"


def budget_warning_text(
    spent: float, limit: float, warn_at: float, stages: Mapping[str, float]
) -> str:
    return (
        f"This ticket has used {usd(spent)} of its {usd(limit)} budget "
        f"({spent / limit:.0%}; the warning comes at {warn_at:.0%}). By stage: "
        f"{by_stage(stages)}. At {usd(limit)} the daemon stops the agent and moves the ticket "
        "to a person."
    )


def budget_exceeded_text(
    spent: float, limit: float, target: str, total: float, stages: Mapping[str, float]
) -> str:
    return (
        f"This ticket spent {usd(spent)} of its {usd(limit)} budget (budget.per_ticket_usd), so "
        f"the daemon stopped its agent and moved it to {target}. By stage: {by_stage(stages)}; "
        f"{usd(total)} in all. Moving it back to where it was worked on grants one more "
        f"{usd(limit)}."
    )

"""What tokens cost: prices per model, and the cost of a usage.

Prices are USD per million tokens, keyed by model name or a glob (`gpt-5*`). A workflow's
`pricing:` entries come first, then the bundled table; an exact name beats a glob, and a longer
glob beats a shorter one. A model that matches nothing has no price: its tokens are counted and
its cost is unknown (null), never zero.

Cached input is part of the input a provider reports (codex's `inputTokens` include its
`cachedInputTokens`): it is priced at the cached rate and not also at the input rate.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.config.fields import INVALID_CONFIG, ConfigError

PER_TOKENS = 1_000_000

PRICES_AS_OF = "2025-11"
"""When the bundled prices were the providers' list prices (standard tier, USD)."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None
    """None: cached input is priced as input."""
    cache_write: float | None = None
    """Writing the prompt cache (Anthropic); None: priced as input."""

    def cost_usd(self, input: int, cached_input: int, output: int, cache_write: int = 0) -> float:
        """The cost of these token counts (`input` includes `cached_input`)."""
        cached = min(cached_input, input)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        write_rate = self.input if self.cache_write is None else self.cache_write
        return (
            (input - cached) * self.input
            + cached * cached_rate
            + cache_write * write_rate
            + output * self.output
        ) / PER_TOKENS


DEFAULT_PRICES: Mapping[str, Price] = {
    # OpenAI (codex)
    "gpt-5": Price(1.25, 10.0, 0.125),
    "gpt-5-codex": Price(1.25, 10.0, 0.125),
    "gpt-5.1": Price(1.25, 10.0, 0.125),
    "gpt-5.1-codex": Price(1.25, 10.0, 0.125),
    "gpt-5-mini": Price(0.25, 2.0, 0.025),
    "gpt-5.1-codex-mini": Price(0.25, 2.0, 0.025),
    "codex-mini-latest": Price(1.5, 6.0, 0.375),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-5*": Price(1.25, 10.0, 0.125),
    "gpt-4.1": Price(2.0, 8.0, 0.5),
    "gpt-4.1-mini": Price(0.4, 1.6, 0.1),
    "o3": Price(2.0, 8.0, 0.5),
    "o4-mini": Price(1.1, 4.4, 0.275),
    # Anthropic (Claude Code)
    "claude-opus-4-5*": Price(5.0, 25.0, 0.5, 6.25),
    "claude-opus-4*": Price(15.0, 75.0, 1.5, 18.75),
    "claude-sonnet-4*": Price(3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4-5*": Price(1.0, 5.0, 0.1, 1.25),
    "claude-3-5-haiku*": Price(0.8, 4.0, 0.08, 1.0),
}


@dataclass(frozen=True, slots=True)
class Pricing:
    """The prices a workflow uses: its own entries, then the bundled ones."""

    entries: tuple[tuple[str, Price], ...] = ()

    def price_for(self, model: str | None) -> Price | None:
        if not model:
            return None
        for pattern, price in self.entries:
            if pattern == model:
                return price
        matches = [
            (n, pattern, price)
            for n, (pattern, price) in enumerate(self.entries)
            if fnmatch.fnmatchcase(model, pattern)
        ]
        if not matches:
            return None
        # The most specific glob wins; among equals, the one listed first (the workflow's).
        matches.sort(key=lambda m: (-len(m[1].replace("*", "")), m[0]))
        return matches[0][2]


def parse_pricing(raw: Any) -> Pricing:
    """`pricing:` from WORKFLOW.md (or None), before the bundled table. Raises ConfigError."""
    entries: list[tuple[str, Price]] = []
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise _error("pricing must be a map of model name or glob -> {input, output, ...}")
        for model, body in raw.items():
            where = f"pricing.{model}"
            if not isinstance(model, str) or not model.strip():
                raise _error("every pricing entry needs a model name or glob")
            if not isinstance(body, Mapping):
                raise _error(f"{where} must be a map with input and output (USD per 1M tokens)")
            unknown = sorted(set(body) - {"input", "output", "cached_input", "cache_write"})
            if unknown:
                raise _error(f"{where} has unknown key(s) {', '.join(map(str, unknown))}")
            entries.append(
                (
                    model.strip(),
                    Price(
                        _rate(body, "input", where, required=True) or 0.0,
                        _rate(body, "output", where, required=True) or 0.0,
                        _rate(body, "cached_input", where, required=False),
                        _rate(body, "cache_write", where, required=False),
                    ),
                )
            )
    return Pricing((*entries, *DEFAULT_PRICES.items()))


def _rate(body: Mapping[str, Any], key: str, where: str, *, required: bool) -> float | None:
    value = body.get(key)
    if value is None:
        if required:
            raise _error(f"{where}.{key} is required (USD per 1M tokens)")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _error(f"{where}.{key} must be a number of USD per 1M tokens, at least 0")
    return float(value)


def _error(message: str) -> ConfigError:
    return ConfigError(INVALID_CONFIG, message)

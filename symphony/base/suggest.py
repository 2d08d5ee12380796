"""The hint a message about an unknown name ends with."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean `x`?` for the closest of `known` to `name`, or "" when none is close.
    `difflib` is loaded here, by the first mistake: a valid workflow never needs it."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""

"""Instants as symphony writes them (ISO 8601 text in the store, the API and the logs), read
back leniently: anything else is no instant rather than an error."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def parse_instant(value: Any) -> datetime | None:
    """The instant an ISO 8601 string names; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None

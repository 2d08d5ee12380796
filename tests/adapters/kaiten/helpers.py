"""Building a Kaiten tracker against respx mocks, with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony_adapters.kaiten.config import parse_config
from symphony_adapters.kaiten.tracker import KaitenTracker
from tests.adapters.clock import FakeClock
from tests.adapters.kaiten.payloads import BOARD, DOMAIN

TOKEN = "kaiten_secret_token_value_123"
ENV = {"KAITEN_TOKEN": TOKEN}
ACTIVE = ("Backlog", "In Progress")
TERMINAL = ("Done",)


def make_tracker(
    provider: Mapping[str, Any] | None = None,
    *,
    clock: FakeClock | None = None,
    active: Sequence[str] = ACTIVE,
    terminal: Sequence[str] = TERMINAL,
    extra_states: Sequence[str] = (),
) -> KaitenTracker:
    clock = clock or FakeClock()
    config = parse_config({"domain": DOMAIN, "board_id": BOARD, **(provider or {})}, ENV)
    return KaitenTracker(
        config,
        workflow_states=(*active, *terminal, *extra_states),
        terminal_states=terminal,
        clock=clock,
        monotonic=clock,
        sleep=clock.sleep,
    )

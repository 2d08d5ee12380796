"""Building a GitHub tracker against respx mocks, with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony_adapters.github.config import parse_config
from symphony_adapters.github.tracker import GitHubTracker

from tests.adapters.github.payloads import API, REPO

TOKEN = "ghp_secret_token_value_123"
ENV = {"GITHUB_TOKEN": TOKEN}
ISSUES = f"{API}/repos/{REPO}/issues"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def make_tracker(
    provider: Mapping[str, Any] | None = None,
    *,
    clock: FakeClock | None = None,
    active: Sequence[str] = ("Todo", "In Progress"),
    terminal: Sequence[str] = ("Done",),
    environ: Mapping[str, str] = ENV,
) -> GitHubTracker:
    clock = clock or FakeClock()
    merged = {"repository": REPO, **(provider or {})}
    config = parse_config(merged, environ, active, terminal)
    return GitHubTracker(config, clock=clock, sleep=clock.sleep)

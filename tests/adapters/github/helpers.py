"""Building a GitHub tracker against respx mocks, with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony_adapters.github.config import parse_config
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.clock import FakeClock
from tests.adapters.github.payloads import API, REPO

TOKEN = "ghp_secret_token_value_123"
ENV = {"GITHUB_TOKEN": TOKEN}
ISSUES = f"{API}/repos/{REPO}/issues"


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

"""Building a GitLab tracker against respx mocks, with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony.base.issue import Issue
from symphony_adapters.gitlab.config import parse_config
from symphony_adapters.gitlab.tracker import GitLabTracker
from tests.adapters.clock import FakeClock
from tests.adapters.gitlab.payloads import BASE, PROJECT

TOKEN = "glpat-secret_token_value_123"
ENV = {"GITLAB_TOKEN": TOKEN}


def make_tracker(
    provider: Mapping[str, Any] | None = None,
    *,
    clock: FakeClock | None = None,
    active: Sequence[str] = ("Todo", "In Progress"),
    terminal: Sequence[str] = ("Done",),
    environ: Mapping[str, str] = ENV,
) -> GitLabTracker:
    clock = clock or FakeClock()
    merged = {"project": PROJECT, "base_url": BASE, **(provider or {})}
    config = parse_config(merged, environ, active, terminal)
    return GitLabTracker(config, clock=clock, sleep=clock.sleep)


def session_issue(iid: int = 1, *, state: str = "Todo", labels: tuple[str, ...] = ()) -> Issue:
    return Issue(
        id=str(iid),
        identifier=f"{PROJECT}#{iid}",
        title="t",
        state=state,
        dispatchable=True,
        url=f"{BASE}/{PROJECT}/-/issues/{iid}",
        labels=labels,
        native_ref={"project": PROJECT, "iid": iid, "id": 42000 + iid},
    )

"""GitHub quota benchmark: rate-limit points the `github` adapter spends polling for an hour.

Drives the adapter as the daemon does (startup terminal read, then every tick: reconcile the
running issues by id, then read the active states) for 120 ticks of 30 s on a fake clock,
against the in-process fake GitHub of the test suite (ETags, 304s, Link pagination). A request
costs a quota point unless GitHub answers 304 Not Modified.

Run: `python bench/tracker_quota.py`. Target: zero points after the first poll while the
board is unchanged.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.cli import loop
from symphony_adapters.github.config import parse_config
from symphony_adapters.github.tracker import GitHubTracker
from tests.adapters.github.fake_github import FakeGitHub, transport

TICKS = 120
INTERVAL_S = 30.0
ACTIVE = ("Todo", "In Progress")
TERMINAL = ("Done",)
TOKEN = "ghp_bench_token_value"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def board() -> FakeGitHub:
    """250 open issues (12 Todo, 3 In Progress: the running ones; one Todo blocked), 2 pull
    requests, 60 closed issues."""
    fake = FakeGitHub(token=TOKEN)
    number = 0
    for labels, count in (
        (["status:todo"], 12),
        (["status:in-progress", "p1"], 3),
        (["bug"], 235),
        (["status:todo"], 2),  # pull requests, below
    ):
        for _ in range(count):
            number += 1
            fake.add(number, labels=list(labels), pull_request=count == 2)
    fake.edit(1, blocked_by=[20])
    for _ in range(60):
        number += 1
        fake.add(number, state="closed")
    return fake


@dataclass
class Figures:
    requests: int
    points: int
    requests_after_first: int
    points_after_first: int


async def simulate(change_every: int | None) -> Figures:
    fake = board()
    clock = Clock()
    config = parse_config({"repository": fake.repo}, {"GITHUB_TOKEN": TOKEN}, ACTIVE, TERMINAL)
    tracker = GitHubTracker(config, transport=transport(fake), clock=clock, sleep=clock.sleep)
    running = ["13", "14", "15"]
    try:
        await tracker.fetch_issues_by_states(TERMINAL)  # startup cleanup
        first_points = first_requests = 0
        for tick in range(TICKS):
            if change_every and tick and tick % change_every == 0:
                # Someone relabels an issue: only the lists and issues it touches cost again.
                fake.edit(16 + tick // change_every, labels=["status:todo"])
            await tracker.fetch_issues_by_ids(running)
            candidates = await tracker.fetch_issues_by_states(ACTIVE)
            assert len(candidates) >= 15
            if tick == 0:
                first_points, first_requests = fake.quota_used, len(fake.requests)
            clock.now += INTERVAL_S
    finally:
        await tracker.aclose()
    quota = tracker.http.quota
    assert quota.requests == len(fake.requests)
    assert quota.requests - quota.not_modified == fake.quota_used
    return Figures(
        requests=len(fake.requests),
        points=fake.quota_used,
        requests_after_first=len(fake.requests) - first_requests,
        points_after_first=fake.quota_used - first_points,
    )


def main() -> None:
    print(f"GitHub label scope, {TICKS} ticks x {INTERVAL_S:.0f} s, 3 running issues reconciled")
    print("board: 250 open issues (15 with an active label), 2 PRs, 60 closed\n")
    print(f"{'scenario':<34}{'requests':>10}{'points':>8}{'req/h after 1st':>17}{'pts':>6}")
    for name, change_every in (("unchanged board", None), ("one relabel every 10 min", 20)):
        f = loop.run(simulate(change_every))
        print(
            f"{name:<34}{f.requests:>10}{f.points:>8}"
            f"{f.requests_after_first:>17}{f.points_after_first:>6}"
        )
    print("\npoints = requests GitHub does not answer 304 (5,000 per hour for a PAT)")


if __name__ == "__main__":
    main()

"""Follow-loop idle cost: what following 200 open pull requests costs GitHub in an hour when
nothing changes.

Drives the `github` code host as the daemon's follow loop does: every pull request read once
(`read_status`), then again every 30 s for an hour (120 rounds), against the in-process fake of
the test suite (ETags and 304s as GitHub answers them, GraphQL included). Each pull request has
a required check that passed and an approving review. A request costs rate-limit quota unless
GitHub answers 304 Not Modified; GraphQL always costs. A second run changes one pull request
(a new check run) every 10 minutes, to show what a change costs.

Run: `python bench/follow_idle.py`. Target: after the first round, no request that costs quota
while nothing changes (only conditional reads answered 304).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.config.repository import CodeHost, RepositorySettings
from symphony_adapters.github.pulls import GitHubPulls
from tests.adapters.github.fake_pulls import FakePulls

PULLS = 200
ROUNDS = 120
INTERVAL_S = 30.0


@dataclass
class Figures:
    requests_per_hour: int
    quota_first_round: int
    quota_per_hour_after: int
    graphql_after: int


async def simulate(change_every: int | None) -> Figures:
    fake = FakePulls(slug="acme/widgets")
    numbers = [fake.add_pull(f"symphony/T-{n}", f"{n:040x}") for n in range(PULLS)]
    for number in numbers:
        fake.add_check(number, "tests", "success", required=True)
        fake.add_review(number, "alice", "APPROVED")
    repository = RepositorySettings(
        CodeHost.GITHUB, "acme/widgets", "https://api.github.com", "ghp_bench_token", None
    )
    host = GitHubPulls(repository, transport=fake.transport())
    try:
        for number in numbers:
            await host.read_status(number)
        first_quota, first_requests = fake.quota_used, len(fake.requests)
        first_graphql = len(fake.operations())
        for round_ in range(1, ROUNDS + 1):
            if change_every and round_ % change_every == 0:
                fake.add_check(numbers[round_ % PULLS], "lint", "success")
            for number in numbers:
                await host.read_status(number)
    finally:
        await host.aclose()
    return Figures(
        requests_per_hour=len(fake.requests) - first_requests,
        quota_first_round=first_quota,
        quota_per_hour_after=fake.quota_used - first_quota,
        graphql_after=len(fake.operations()) - first_graphql,
    )


def main() -> None:
    print(f"following {PULLS} open pull requests, read every {INTERVAL_S:.0f} s for an hour")
    print(f"{'scenario':<28}{'requests/h':>12}{'quota, 1st':>12}{'quota/h':>10}{'graphql/h':>11}")
    for name, change_every in (("nothing changes", None), ("one change per 10 min", 20)):
        f = asyncio.run(simulate(change_every))
        print(
            f"{name:<28}{f.requests_per_hour:>12,}{f.quota_first_round:>12,}"
            f"{f.quota_per_hour_after:>10,}{f.graphql_after:>11,}"
        )


if __name__ == "__main__":
    main()

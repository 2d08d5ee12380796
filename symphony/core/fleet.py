"""Sharing one pool of agent slots among the workflows of a fleet: weighted, max-min fair, and
never starving a small workflow. Pure: the daemon asks before each dispatch.

Each workflow states its `Demand`: its weight, how many agents it runs, how many more it could
start now (its eligible tickets, counted by its own dispatch rules), and its own cap
(`agent.max_concurrent_agents`). `FleetShares.allocate` splits the fleet's slots by water
filling: every workflow gets its weighted share of what is left, a workflow that wants less
than that gets what it wants and the rest goes round again, so an idle workflow's share goes to
the others. Fractions of a slot do not vanish: what rounding denies a workflow accrues as
credit over time, and the slots left after rounding down go to the largest credit, so a
weight-1 workflow beside a weight-10 one gets its turn as often as its share says. The share
is a cap on starting, never a reason to stop a running agent: a workflow above its share only
waits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Demand:
    """What one workflow asks of the fleet's pool before a dispatch: its weight, the agents it runs,
    how many more it could start, and its own cap."""

    weight: int
    running: int
    waiting: int
    """Tickets it could start now if it had slots (eligible, not blocked, not held)."""
    cap: int
    """Its own `agent.max_concurrent_agents`."""

    @property
    def wants(self) -> int:
        return max(min(self.cap, self.running + self.waiting), 0)


def fair_split(total: int, demands: Mapping[str, Demand]) -> dict[str, float]:
    """Each workflow's fair share of `total` slots as a fraction (weighted water filling)."""
    shares = {name: 0.0 for name in demands}
    open_ = {name for name, d in demands.items() if d.wants > 0 and d.weight > 0}
    left = float(total)
    while open_ and left > 1e-9:
        weights = sum(demands[n].weight for n in open_)
        fair = {n: left * demands[n].weight / weights for n in open_}
        sated = {n for n in open_ if demands[n].wants - shares[n] <= fair[n] + 1e-9}
        if not sated:
            for name in open_:
                shares[name] += fair[name]
            break
        for name in sated:
            given = demands[name].wants - shares[name]
            shares[name] += given
            left -= given
        open_ -= sated
    return shares


@dataclass(slots=True)
class FleetShares:
    """What each workflow is owed: the slot-seconds its fair share held and rounding denied
    it (or gave it beyond), accrued over time; the fleet's only memory here."""

    credit: dict[str, float] = field(default_factory=dict)
    _last: float | None = None
    _previous: dict[str, tuple[float, int]] = field(default_factory=dict)

    def allocate(self, total: int, demands: Mapping[str, Demand], now: float) -> dict[str, int]:
        """Whole slots per workflow, summing to at most `total` and to no more than each
        wants. The slots left after rounding down go to the largest credit first (then the
        larger fraction, the larger weight, the name: deterministic), so over time each
        workflow holds its fair share however often it asks."""
        elapsed = 0.0 if self._last is None else max(now - self._last, 0.0)
        self._last = now
        for name, (fair_then, share_then) in self._previous.items():
            if name in demands:
                self.credit[name] = self.credit.get(name, 0.0) + (fair_then - share_then) * elapsed
        fair = fair_split(total, demands)
        shares = {name: min(math.floor(f + 1e-9), demands[name].wants) for name, f in fair.items()}
        spare = min(total, sum(d.wants for d in demands.values())) - sum(shares.values())
        hungry = [n for n in demands if shares[n] < demands[n].wants and fair[n] > shares[n]]
        hungry.sort(key=lambda n: (-self.credit.get(n, 0.0), -(fair[n] - shares[n]),
                                   -demands[n].weight, n))  # fmt: skip
        for name in hungry[: max(spare, 0)]:
            shares[name] += 1
        for name, demand in demands.items():
            if demand.wants == 0:
                self.credit.pop(name, None)  # an idle workflow is owed nothing
        for gone in set(self.credit) - set(demands):
            del self.credit[gone]
        self._previous = {name: (fair[name], shares[name]) for name in demands}
        return shares


def may_start(share: int, running: int, free: int) -> int:
    """How many agents a workflow may start now: up to its share, within the pool's free
    slots."""
    return max(min(share - running, free), 0)

"""Several workflows in one daemon: each keeps its own orchestrator (tracker, stage machine,
store, workspaces, reloads), and all of them share one pool of agent slots.

`FleetPlan` is what the command line names: the workflows (from paths, folders or a
`fleet.yaml`), each with a unique name and a weight, and the fleet's own limits. `Fleet` runs
them: a workflow that cannot be loaded at start is reported and looked at again when its file
changes, without holding up the others; each loaded one runs until the fleet stops. The pool:
before each dispatch an orchestrator asks its `Seat` how many agents it may run; the seat
reports that workflow's demand and the fleet answers from `core.fleet` with what every member
runs and wants now, and holds new work fleet-wide once `daily_budget_usd` is spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from symphony.agents.accounts import accounts
from symphony.base.errors import SymphonyError
from symphony.base.hosts import LOCAL
from symphony.base.secrets import SecretMasker
from symphony.config.fields import INVALID_CONFIG, ConfigError
from symphony.config.load import load_settings
from symphony.config.prompt import check_prompts
from symphony.config.sections import Settings
from symphony.core.costs import day_key
from symphony.core.fleet import Demand, FleetShares, may_start
from symphony.core.state import AgentPause
from symphony.daemon.events import Clock
from symphony.daemon.launch import open_workflow
from symphony.daemon.orchestrator import Orchestrator

log = structlog.get_logger("symphony.fleet")

DEFAULT_FLEET_AGENTS = 10
RETRY_LOAD_S = 2.0
"""How often a workflow that could not be loaded is looked at again (its file's change)."""


@dataclass(frozen=True, slots=True)
class Member:
    """One workflow of the fleet: its name (unique, safe in a URL), its WORKFLOW.md, and its weight
    in the shared pool."""

    name: str
    workflow: Path
    weight: int = 1


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """The fleet the command line names: its workflows, the fleet's own limits (agent slots, daily
    budget) and its server's address."""

    members: tuple[Member, ...]
    max_concurrent_agents: int = DEFAULT_FLEET_AGENTS
    daily_budget_usd: float | None = None
    port: int | None = None
    host: str = "127.0.0.1"


def plan_fleet(paths: Sequence[Path]) -> FleetPlan:
    """The fleet the command line names: WORKFLOW.md files, folders holding one (or holding
    folders that do), or one `fleet.yaml`. Raises ConfigError with what to change."""
    if len(paths) == 1 and paths[0].suffix in (".yaml", ".yml") and paths[0].is_file():
        return _fleet_file(paths[0])
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = path / "WORKFLOW.md"
            nested = sorted(path.glob("*/WORKFLOW.md"))
            if inside.is_file():
                found.append(inside)
            elif nested:
                found.extend(nested)
            else:
                raise ConfigError(
                    INVALID_CONFIG, f"{path} holds no WORKFLOW.md, nor folders that do"
                )
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(INVALID_CONFIG, f"{path} does not exist")
    return FleetPlan(_named([Member(_name_of(p), p.resolve()) for p in found]))


def _name_of(workflow: Path) -> str:
    """A workflow's name: its folder's, made safe for a URL path segment."""
    folder = workflow.resolve().parent.name or "workflow"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", folder).strip("-") or "workflow"


def _named(members: Sequence[Member]) -> tuple[Member, ...]:
    seen: dict[str, Path] = {}
    for member in members:
        if member.name in seen:
            raise ConfigError(
                INVALID_CONFIG,
                f"two workflows are named {member.name} ({seen[member.name]} and "
                f"{member.workflow}): name them in a fleet.yaml",
            )
        seen[member.name] = member.workflow
    return tuple(members)


def _fleet_file(path: Path) -> FleetPlan:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(INVALID_CONFIG, f"{path} cannot be read: {exc}") from None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("workflows"), list):
        raise ConfigError(INVALID_CONFIG, f"{path} needs `workflows:`, a list of paths or maps")
    unknown = sorted(set(raw) - {"workflows", "max_concurrent_agents", "daily_budget_usd",
                                 "server"})  # fmt: skip
    if unknown:
        raise ConfigError(INVALID_CONFIG, f"{path}: {', '.join(unknown)} is not a fleet setting")
    members = []
    for index, item in enumerate(raw["workflows"]):
        where = f"{path.name}: workflows[{index}]"
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, Mapping) or not isinstance(item.get("path"), str):
            raise ConfigError(
                INVALID_CONFIG, f"{where} needs `path:` (a WORKFLOW.md or its folder)"
            )
        target = (path.parent / item["path"]).resolve()
        if target.is_dir():
            target = target / "WORKFLOW.md"
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise ConfigError(INVALID_CONFIG, f"{where}.weight must be a whole number >= 1")
        name = item.get("name", _name_of(target))
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise ConfigError(INVALID_CONFIG, f"{where}.name must be letters, digits, . _ or -")
        members.append(Member(name, target, weight))
    agents = raw.get("max_concurrent_agents", DEFAULT_FLEET_AGENTS)
    if isinstance(agents, bool) or not isinstance(agents, int) or agents < 1:
        raise ConfigError(INVALID_CONFIG, f"{path.name}: max_concurrent_agents must be >= 1")
    budget = raw.get("daily_budget_usd")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                               or budget <= 0):  # fmt: skip
        raise ConfigError(INVALID_CONFIG, f"{path.name}: daily_budget_usd must be above 0")
    server = raw.get("server") or {}
    if not isinstance(server, Mapping):
        raise ConfigError(INVALID_CONFIG, f"{path.name}: server must be a map (port, host)")
    port = server.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                             or not 0 <= port <= 65535):  # fmt: skip
        raise ConfigError(INVALID_CONFIG, f"{path.name}: server.port must be 0-65535")
    return FleetPlan(
        _named(members), agents, float(budget) if budget is not None else None, port,
        str(server.get("host", "127.0.0.1")),
    )  # fmt: skip


@dataclass(slots=True)
class Seat:
    """One workflow's place in the fleet's pool, handed to its orchestrator."""

    fleet: Fleet
    name: str

    def slots(self, waiting: int) -> int:
        """How many agents this workflow may run now, having `waiting` more it could start."""
        return self.fleet.slots_for(self.name, waiting)

    def hosts_busy_elsewhere(self) -> dict[str, int]:
        """The agents the fleet's other workflows run on each SSH host now."""
        return self.fleet.hosts_busy_except(self.name)

    def pauses_elsewhere(self) -> list[AgentPause]:
        """The pauses the fleet's other workflows met on this one's accounts."""
        return self.fleet.pauses_shared_with(self.name)


@dataclass(slots=True)
class _Live:
    """What the fleet asks a seated workflow's orchestrator, live: its running agents, cap, spend,
    hosts, pauses and accounts."""

    running: Callable[[], int]
    cap: Callable[[], int]
    spent_today: Callable[[str], float]
    hosts: Callable[[], Mapping[str, int]]
    """Its running agents per SSH host."""
    pauses: Callable[[], Iterable[AgentPause]] = tuple
    """The agent pauses it holds."""
    accounts: Callable[[], Mapping[str, str]] = dict
    """The account each agent kind of it runs on (`symphony.agents.accounts`)."""


@dataclass(slots=True)
class Fleet:
    """The pool of agent slots the fleet's workflows share: it answers each seat how many agents its
    workflow may run now, and holds new work once the fleet's daily budget is spent."""

    plan: FleetPlan
    clock: Clock
    shares: FleetShares = field(default_factory=FleetShares)
    waiting: dict[str, int] = field(default_factory=dict)
    live: dict[str, _Live] = field(default_factory=dict)
    last_shares: dict[str, int] = field(default_factory=dict)

    def seat(
        self,
        name: str,
        *,
        running: Callable[[], int],
        cap: Callable[[], int],
        spent_today: Callable[[str], float],
        hosts: Callable[[], Mapping[str, int]] = dict,
        pauses: Callable[[], Iterable[AgentPause]] = tuple,
        accounts: Callable[[], Mapping[str, str]] = dict,
    ) -> Seat:
        self.live[name] = _Live(running, cap, spent_today, hosts, pauses, accounts)
        return Seat(self, name)

    def pauses_shared_with(self, name: str) -> list[AgentPause]:
        """The pauses the other workflows met themselves on an account `name` also uses."""
        mine = self.live[name].accounts() if name in self.live else {}
        return [
            pause
            for other, live in self.live.items() if other != name
            for pause in live.pauses()
            if not pause.shared and mine.get(pause.agent_kind)
            and live.accounts().get(pause.agent_kind) == mine.get(pause.agent_kind)
        ]  # fmt: skip

    def hosts_busy_except(self, name: str) -> dict[str, int]:
        busy: dict[str, int] = {}
        for other, live in self.live.items():
            if other != name:
                for host, count in live.hosts().items():
                    busy[host] = busy.get(host, 0) + count
        return busy

    def leave(self, name: str) -> None:
        self.live.pop(name, None)
        self.waiting.pop(name, None)

    def weight(self, name: str) -> int:
        return next((m.weight for m in self.plan.members if m.name == name), 1)

    def budget_spent(self) -> bool:
        limit = self.plan.daily_budget_usd
        if limit is None:
            return False
        today = day_key(self.clock.wall())
        return sum(live.spent_today(today) for live in self.live.values()) >= limit

    def slots_for(self, name: str, waiting: int) -> int:
        self.waiting[name] = waiting
        running = {n: live.running() for n, live in self.live.items()}
        if self.budget_spent():
            return running.get(name, 0)  # the fleet's day is spent: nothing new starts
        # A workflow that has not said what it wants yet (it has not polled) is counted as
        # wanting its whole cap, so the first to poll cannot take the others' shares.
        demands = {
            n: Demand(self.weight(n), running[n], self.waiting.get(n, live.cap()), live.cap())
            for n, live in self.live.items()
        }
        self.last_shares = self.shares.allocate(
            self.plan.max_concurrent_agents, demands, self.clock.monotonic()
        )
        free = self.plan.max_concurrent_agents - sum(running.values())
        mine = running.get(name, 0)
        return mine + may_start(self.last_shares.get(name, 0), mine, free)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_concurrent_agents": self.plan.max_concurrent_agents,
            "daily_budget_usd": self.plan.daily_budget_usd,
            "budget_spent": self.budget_spent(),
            "running": sum(live.running() for live in self.live.values()),
            "shares": dict(self.last_shares),
        }


async def wait_for_change(path: Path, seen: float | None) -> None:
    """Until `path`'s modification time differs from `seen` (polled: the file may be on a
    volume without inotify)."""
    while True:
        with contextlib.suppress(OSError):
            if path.stat().st_mtime != seen:
                return
        await asyncio.sleep(RETRY_LOAD_S)


@dataclass(slots=True)
class MemberStatus:
    """What the fleet's surfaces show of one workflow."""

    member: Member
    orchestrator: Orchestrator | None = None
    error: str | None = None
    """Why it is not running (its WORKFLOW.md rejected at start, its store locked)."""


async def run_member(
    status: MemberStatus,
    fleet: Fleet,
    masker: SecretMasker,
    *,
    started: Callable[[MemberStatus], None],
    stopping: asyncio.Event,
    reloading: Callable[[], Coroutine[Any, Any, None]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Load one workflow and run it until the fleet stops; one that cannot be loaded is said
    and looked at again whenever its file changes or a reload is asked (`reloading`), never
    stopping the others."""
    member = status.member
    bound = log.bind(workflow=member.name)
    # Everything this workflow logs, from this task and every task it starts, says its name.
    structlog.contextvars.bind_contextvars(workflow=member.name)
    while not stopping.is_set():
        try:
            seen = member.workflow.stat().st_mtime
        except OSError:
            seen = None
        try:
            settings = load_settings(member.workflow, environ)
            check_prompts(settings)
        except SymphonyError as exc:
            if status.error != str(exc):
                bound.error(
                    "workflow not loaded; fix the file and it is picked up", reason=str(exc)
                )
            status.error = str(exc)
            async with asyncio.TaskGroup() as tasks:
                waits = {
                    tasks.create_task(wait_for_change(member.workflow, seen)),
                    tasks.create_task(stopping.wait()),
                }
                if reloading is not None:
                    waits.add(tasks.create_task(reloading()))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for wait in waits:
                    wait.cancel()
            continue
        await _serve_member(status, settings, fleet, masker, started, stopping, bound, environ)
        return


async def _serve_member(
    status: MemberStatus,
    settings: Settings,
    fleet: Fleet,
    masker: SecretMasker,
    started: Callable[[MemberStatus], None],
    stopping: asyncio.Event,
    bound: Any,
    environ: Mapping[str, str] | None,
) -> None:
    member = status.member
    with contextlib.ExitStack() as held:
        try:
            orchestrator = held.enter_context(open_workflow(settings, masker, environ=environ))
        except SymphonyError as exc:
            status.error = str(exc)
            bound.error("workflow not started", reason=str(exc))
            return
        held.callback(fleet.leave, member.name)
        await _run_seated(status, orchestrator, fleet, started, stopping)


async def _run_seated(
    status: MemberStatus,
    orchestrator: Orchestrator,
    fleet: Fleet,
    started: Callable[[MemberStatus], None],
    stopping: asyncio.Event,
) -> None:
    """Run one workflow's orchestrator on its seat of the pool until it or the fleet stops."""
    member = status.member
    orchestrator.seat = fleet.seat(
        member.name,
        running=lambda: len(orchestrator.state.running),
        cap=lambda: orchestrator.settings.agent.max_concurrent_agents,
        spent_today=lambda day: _spent(orchestrator, day),
        hosts=lambda: _on_hosts(orchestrator),
        pauses=lambda: orchestrator.state.agent_pauses.values(),
        accounts=lambda: accounts(orchestrator.settings.agent.env, orchestrator.environ),
    )
    status.orchestrator, status.error = orchestrator, None
    started(status)
    async with asyncio.TaskGroup() as tasks:
        run = tasks.create_task(orchestrator.run())
        stop = tasks.create_task(stopping.wait())
        await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not run.done():
            orchestrator.stop()
        stop.cancel()


def _on_hosts(orchestrator: Orchestrator) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in orchestrator.state.running.values():
        if entry.host != LOCAL:
            counts[entry.host] = counts.get(entry.host, 0) + 1
    return counts


def _spent(orchestrator: Orchestrator, day: str) -> float:
    today = orchestrator.state.daily_costs.get(day)
    return today.usd if today is not None else 0.0


class FleetRunner:
    """Every workflow of a plan run side by side in this event loop, sharing one `Fleet`."""

    def __init__(
        self,
        plan: FleetPlan,
        masker: SecretMasker,
        clock: Clock,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.fleet = Fleet(plan, clock)
        self.environ = environ
        self.statuses = [MemberStatus(member) for member in plan.members]
        self.masker = masker
        self._stopping = asyncio.Event()
        self._reload = asyncio.Event()

    def reload(self) -> None:
        """Read every workflow again, the ones that could not be loaded too (safe from signal
        handlers: the signal is handled in the loop)."""
        for status in self.statuses:
            if status.orchestrator is not None:
                status.orchestrator.reload()
        asked, self._reload = self._reload, asyncio.Event()
        asked.set()  # wakes whoever waits for this reload; the next waits for the next one

    async def _reload_asked(self) -> None:
        await self._reload.wait()

    def stop(self) -> None:
        """Stop every workflow gracefully (safe from signal handlers)."""
        self._stopping.set()
        for status in self.statuses:
            if status.orchestrator is not None:
                status.orchestrator.stop()

    async def run(self) -> None:
        def started(status: MemberStatus) -> None:
            log.info("workflow started", workflow=status.member.name,
                     path=str(status.member.workflow))  # fmt: skip

        async with asyncio.TaskGroup() as tasks:
            for status in self.statuses:
                tasks.create_task(run_member(
                    status, self.fleet, self.masker, started=started, stopping=self._stopping,
                    reloading=self._reload_asked, environ=self.environ,
                ))  # fmt: skip

"""`symphony serve`: several workflows in one daemon (`symphony.daemon.fleet`).

    symphony serve a/WORKFLOW.md b/WORKFLOW.md [--port N]
    symphony serve workflows/            # every */WORKFLOW.md inside
    symphony serve fleet.yaml            # names, weights and the fleet's limits

Each workflow runs as `symphony WORKFLOW.md` would, with its own store, lock and reloads; they
share `max_concurrent_agents` slots by weight, and one HTTP server shows them all.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from symphony.base.secrets import SecretMasker
from symphony.cli import loop
from symphony.cli.links import print_links
from symphony.daemon.collector import tune_collector
from symphony.daemon.events import SystemClock
from symphony.daemon.fleet import FleetRunner, plan_fleet
from symphony.daemon.launch import Served, live_console, log_stream, run_daemon
from symphony.observability.logging import configure_logging

log = structlog.get_logger("symphony")


def serve_parser(port: Callable[[str], int]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony serve",
        description=(
            "Run several workflows in one daemon, sharing one pool of agent slots by weight, "
            "with one HTTP server for all of them."
        ),
    )
    parser.add_argument(
        "paths", nargs="+", type=Path,
        help="WORKFLOW.md files, folders of them, or one fleet.yaml",
    )  # fmt: skip
    parser.add_argument("--port", type=port, default=None,
                        help="serve the fleet's HTTP surface here (0 = any free port)")  # fmt: skip
    parser.add_argument(
        "--no-tui", action="store_true",
        help="no live table of the fleet (it is shown only when stderr is a terminal)",
    )  # fmt: skip
    parser.add_argument("--log-format", choices=("console", "json"), default="console")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    return parser


def serve(args: argparse.Namespace) -> int:
    tune_collector()
    masker = SecretMasker()
    console = live_console(args.no_tui, args.log_format)
    configure_logging(
        fmt=args.log_format, level=args.log_level, logs_root=None, masker=masker,
        stream=log_stream(console),
    )  # fmt: skip
    plan = plan_fleet(args.paths)
    port = args.port if args.port is not None else plan.port
    runner = FleetRunner(plan, masker, SystemClock())
    log.info("fleet started", workflows=[m.name for m in plan.members],
             max_concurrent_agents=plan.max_concurrent_agents)  # fmt: skip

    def table() -> Any:
        from symphony.observability.terminal import FleetMember, render_fleet

        members = [
            FleetMember(s.member.name, s.member.weight,
                        s.orchestrator.snapshot() if s.orchestrator else None, s.error)
            for s in runner.statuses
        ]  # fmt: skip
        return render_fleet(members, runner.fleet.to_json(), masker)

    serve_http = None
    if port is not None:

        async def serve_http(tasks: asyncio.TaskGroup) -> Served:
            return await _serve_fleet(runner, masker, plan.host, port, tasks)

    return loop.run(run_daemon(runner, serve_http=serve_http, table=table, console=console))


@dataclass(slots=True)
class _FleetServer:
    """The fleet's HTTP server while it runs: its address, and how to stop it."""

    url: str
    server: Any
    task: asyncio.Task[None]
    app: Any

    async def stop(self) -> None:
        self.app.close()
        self.server.should_exit = True
        await self.task


async def _serve_fleet(
    runner: FleetRunner, masker: SecretMasker, host: str, port: int, tasks: asyncio.TaskGroup
) -> Served:
    """The fleet's page and API, each workflow's own under its name."""
    # Imported here so a daemon without the HTTP server never loads starlette.
    from symphony.hosts.serve import serve_embedded
    from symphony.observability.fleet import FleetApp, Seen
    from symphony.observability.web_guard import WebGuard, accepted_hosts

    def seen() -> list[Seen]:
        return [
            Seen(s.member.name, s.member.weight,
                 s.orchestrator.view if s.orchestrator else None, s.error,
                 s.orchestrator.settings.server.auth_token if s.orchestrator else None)
            for s in runner.statuses
        ]  # fmt: skip

    app = FleetApp(seen, runner.fleet.to_json, masker)
    guarded = WebGuard(app, accepted_hosts(host, ()))
    server, task, url = await serve_embedded(guarded, host, port, name="http-server", tasks=tasks)
    log.info("http server listening", url=url)
    print_links([f"fleet:     {url}  (each workflow's dashboard and review page are linked there)"])
    return _FleetServer(url, server, task, app)

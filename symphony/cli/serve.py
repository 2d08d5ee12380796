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
import contextlib
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import uvloop

from symphony.base.secrets import SecretMasker
from symphony.daemon.collector import tune_collector
from symphony.daemon.events import SystemClock
from symphony.daemon.fleet import FleetPlan, FleetRunner, plan_fleet
from symphony.observability.logging import configure_logging
from symphony.observability.terminal import (
    ConsoleLogStream,
    FleetMember,
    TerminalStatus,
    render_fleet,
)

EXIT_OK = 0


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
    console = None
    if not args.no_tui and args.log_format == "console" and sys.stderr.isatty():
        from rich.console import Console

        console = Console(stderr=True)
    configure_logging(
        fmt=args.log_format, level=args.log_level, logs_root=None, masker=masker,
        stream=ConsoleLogStream(console) if console is not None else None,
    )  # fmt: skip
    plan = plan_fleet(args.paths)
    port = args.port if args.port is not None else plan.port
    return uvloop.run(_serve(plan, masker, port, console))


async def _serve(
    plan: FleetPlan, masker: SecretMasker, port: int | None, console: Any = None
) -> int:
    log = structlog.get_logger("symphony")
    runner = FleetRunner(plan, masker, SystemClock())
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: every workflow's agents are being stopped")
            runner.stop()
        else:
            log.warning("still stopping: waiting for agents to exit")

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, on_signal)
    log.info("fleet started", workflows=[m.name for m in plan.members],
             max_concurrent_agents=plan.max_concurrent_agents)  # fmt: skip
    http = app = None
    if port is not None:
        from symphony.hosts.serve import serve_embedded
        from symphony.observability.fleet import FleetApp, Seen
        from symphony.observability.web_guard import WebGuard, accepted_hosts

        def seen() -> list[Seen]:
            return [
                Seen(s.member.name, s.member.weight, s.orchestrator, s.error,
                     s.orchestrator.settings.server.auth_token if s.orchestrator else None)
                for s in runner.statuses
            ]  # fmt: skip

        app = FleetApp(seen, runner.fleet.to_json, masker)
        guarded = WebGuard(app, accepted_hosts(plan.host, ()))
        server, task, url = await serve_embedded(guarded, plan.host, port, name="http-server")
        http = (server, task)
        log.info("http server listening", url=url)
    status = None
    if console is not None:

        def table() -> Any:
            members = [
                FleetMember(s.member.name, s.member.weight,
                            s.orchestrator.snapshot() if s.orchestrator else None, s.error)
                for s in runner.statuses
            ]  # fmt: skip
            return render_fleet(members, runner.fleet.to_json(), masker)

        status = asyncio.create_task(TerminalStatus(table, console).run())
    try:
        await runner.run()
    finally:
        if status is not None:
            status.cancel()
            with contextlib.suppress(Exception):  # a vanished terminal must not fail the stop
                await status
        if http is not None and app is not None:
            app.close()
            http[0].should_exit = True
            await http[1]
    log.info("stopped")
    return EXIT_OK

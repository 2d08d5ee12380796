"""`symphony [WORKFLOW.md]`: the daemon on one workflow, with its HTTP pages when a port is
given, until SIGINT/SIGTERM/SIGHUP."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import structlog

from symphony.base.hosts import is_loopback
from symphony.base.secrets import SecretMasker
from symphony.cli import loop
from symphony.cli.links import link_lines, print_links
from symphony.cli.preflight import preflight_warnings
from symphony.cli.workflows import load
from symphony.config.fields import INVALID_CONFIG, ConfigError
from symphony.config.sections import Settings
from symphony.daemon.collector import tune_collector
from symphony.daemon.launch import Served, live_console, log_stream, open_workflow, run_daemon
from symphony.daemon.orchestrator import Orchestrator
from symphony.observability.logging import configure_logging


def _bound_to(settings: Settings, host: str) -> Settings:
    """`--host`: the server binds there, under the rule WORKFLOW.md's `server.host` follows."""
    host = host.strip()
    if not host:
        raise ConfigError(INVALID_CONFIG, "--host must be a host name or address")
    if not is_loopback(host) and settings.server.auth_token is None:
        raise ConfigError(
            INVALID_CONFIG,
            f"--host {host} is reachable from other machines, so a person's actions there need "
            "a token: set server.auth_token (for example $SYMPHONY_TOKEN)",
        )
    return dataclasses.replace(settings, server=dataclasses.replace(settings.server, host=host))


def run(args: argparse.Namespace) -> int:
    """Run the daemon on one workflow until a signal stops it."""
    tune_collector()
    console = live_console(args.no_tui, args.log_format)
    # The daemon's one masker: the logs, the orchestrator and every surface share it.
    masker = SecretMasker()
    files = configure_logging(
        fmt=args.log_format,
        level=args.log_level,
        logs_root=args.logs_root,
        stream=log_stream(console),
        masker=masker,
    )
    settings, tracker = load(args.workflow, masker)
    if args.host is not None:
        settings = _bound_to(settings, args.host)
    if files is not None:
        files.keep(settings.logs.max_file_mb * 1024 * 1024, settings.logs.keep_days)
    port = args.port if args.port is not None else settings.server.port
    with open_workflow(settings, masker, tracker=tracker) as orchestrator:
        _announce(settings)
        serve_http = None
        if port is not None:

            async def serve_http(tasks: asyncio.TaskGroup) -> Served:
                http = await _serve_http(orchestrator, port, args.logs_root, tasks)
                token = orchestrator.settings.server.auth_token
                print_links(link_lines(http.url, token=token, show_token=args.show_token))
                return http

        def table() -> Any:
            from symphony.observability.terminal import render_status

            return render_status(orchestrator.snapshot(), orchestrator.masker)

        return loop.run(
            run_daemon(orchestrator, serve_http=serve_http, table=table, console=console)
        )


def _announce(settings: Settings) -> None:
    log = structlog.get_logger("symphony")
    for warning in preflight_warnings(settings):
        log.warning(warning)
    log.info(
        "started",
        workflow=str(settings.workflow_path),
        tracker=settings.tracker.kind,
        workspace_root=str(settings.workspace.root),
        poll_interval_ms=settings.polling.interval_ms,
        max_concurrent_agents=settings.agent.max_concurrent_agents,
    )


async def _serve_http(
    orchestrator: Orchestrator, port: int, logs_root: Path | None, tasks: asyncio.TaskGroup
) -> Served:
    """The workflow's dashboard, API and review page."""
    # Imported here so a daemon without the HTTP server never loads starlette.
    from symphony.observability.server import create_app, serve

    log = structlog.get_logger("symphony")
    settings = orchestrator.settings
    http = await serve(
        create_app(orchestrator.view, logs_root=logs_root, auth_token=settings.server.auth_token),
        settings.server.host,
        port,
        allowed_hosts=settings.server.allowed_hosts,
        trusted_proxies=settings.server.trusted_proxies,
        tasks=tasks,
    )
    orchestrator.served_at = http.url
    log.info("http server listening", url=http.url)
    if not is_loopback(settings.server.host):
        log.warning(
            "http server reachable from other hosts: its read-only pages need no token "
            "(actions do); bind it to 127.0.0.1 or put an authenticating proxy in front",
            host=settings.server.host,
        )
    return http

"""The `symphony` command: run the daemon, check a workflow, or render a ticket's prompt.

    symphony [WORKFLOW.md] [--port N]   run (default ./WORKFLOW.md) until SIGINT/SIGTERM/SIGHUP
    symphony check [WORKFLOW.md ...]    validate and show what the next poll would dispatch
    symphony render ID [WORKFLOW.md]    print the prompt a ticket would get
    symphony init [--tracker KIND] [PATH]   write a starter WORKFLOW.md
    symphony demo [FOLDER]              run the quickstart in FOLDER, serving its pages

Errors are one readable line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import structlog
import uvloop

from symphony import DISTRIBUTION
from symphony.base.errors import SymphonyError
from symphony.base.hosts import is_loopback
from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.cli import check
from symphony.cli.init import TRACKERS, init_workflow
from symphony.cli.links import link_lines, print_links
from symphony.cli.report import parse_window, report_text
from symphony.config.fields import INVALID_CONFIG, ConfigError
from symphony.config.load import load_settings
from symphony.config.prompt import check_prompts, render_prompt
from symphony.config.sections import Settings
from symphony.daemon.collector import tune_collector
from symphony.daemon.fleet import Member, plan_fleet
from symphony.daemon.launch import (
    EXIT_FAILED,
    EXIT_OK,
    Served,
    live_console,
    open_workflow,
    run_daemon,
)
from symphony.daemon.orchestrator import Orchestrator
from symphony.daemon.runner import stage_context
from symphony.memory import Listing, Ticket, memory_of
from symphony.observability.logging import configure_logging
from symphony.observability.terminal import ConsoleLogStream, render_status
from symphony.store import Store
from symphony.tracker.contract import Tracker, TrackerContext, create_tracker, resolve_states
from symphony.workspace.editor import editor_words
from symphony.workspace.git import git_output
from symphony.workspace.local import WorkspaceManager

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # Intermixed: `render DEMO-1 --attempt 2 WORKFLOW.md` puts an option between positionals.
        if args and args[0] == "check":
            return _check(_check_parser().parse_intermixed_args(args[1:]))
        if args and args[0] == "render":
            return _render(_render_parser().parse_intermixed_args(args[1:]))
        if args and args[0] == "init":
            return _init(_init_parser().parse_intermixed_args(args[1:]))
        if args and args[0] == "report":
            return _report(_report_parser().parse_intermixed_args(args[1:]))
        if args and args[0] == "open":
            return _open(_open_parser().parse_intermixed_args(args[1:]))
        if args and args[0] == "memory":
            return _memory(_memory_parser().parse_intermixed_args(args[1:]))
        if args and args[0] == "demo":
            from symphony.cli.demo import demo

            return demo(args[1:], lambda argv: _run(_run_parser().parse_intermixed_args(argv)))
        if args and args[0] == "serve":
            from symphony.cli.serve import serve, serve_parser

            return serve(serve_parser(_port).parse_intermixed_args(args[1:]))
        return _run(_run_parser().parse_intermixed_args(args))
    except SymphonyError as exc:
        print(f"symphony: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, and the details in debug output
        if os.environ.get("SYMPHONY_DEBUG"):
            raise
        print(
            f"symphony: internal error: {exc!r} (set SYMPHONY_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _workflow_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "workflow",
        nargs="?",
        default="WORKFLOW.md",
        type=Path,
        help="path to WORKFLOW.md (default: ./WORKFLOW.md)",
    )


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony",
        description=(
            "Run coding agents on tracker tickets. Subcommands: check, render, init, demo, "
            "report, open, memory, serve (several workflows in one daemon)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"symphony {version()}")
    _workflow_arg(parser)
    parser.add_argument("--logs-root", type=Path, help="write one log file per ticket here")
    parser.add_argument(
        "--no-tui",
        action="store_true",
        help="no live status table (it is shown only when stderr is a terminal)",
    )
    parser.add_argument("--log-format", choices=("console", "json"), default="console")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=None,
        help="serve the HTTP API on this port (0 = any free port; overrides server.port)",
    )
    parser.add_argument(
        "--host",
        default=None,
        help="bind the HTTP API to this address (overrides server.host; beyond loopback it "
        "needs server.auth_token), e.g. 0.0.0.0 in a container",
    )
    parser.add_argument(
        "--show-token",
        action="store_true",
        help="put server.auth_token in the printed login link (for a terminal only you read)",
    )
    return parser


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 65535, got {value!r}")
    return port


def _check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony check",
        description="Validate a workflow and show the next poll; given several workflows, a "
        "fleet.yaml or a folder of workflows (as `serve` takes them), each of them.",
    )
    parser.add_argument(
        "workflows",
        nargs="*",
        type=Path,
        help="WORKFLOW.md files, folders of them, or one fleet.yaml (default: ./WORKFLOW.md)",
    )
    return parser


def _init_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony init",
        description="Write a commented, working WORKFLOW.md for a tracker (never overwrites).",
        epilog="trackers: " + "; ".join(f"{name}: {what}" for name, what in TRACKERS.items()),
    )
    parser.add_argument("--tracker", choices=list(TRACKERS), default="local")
    parser.add_argument(
        "path",
        nargs="?",
        default=Path("."),
        type=Path,
        help="the WORKFLOW.md to write, or the folder to write it in (default: .)",
    )
    return parser


def _init(args: argparse.Namespace) -> int:
    written = init_workflow(args.path, args.tracker)
    here = Path.cwd()

    def shown(path: Path) -> str:
        return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)

    print(f"wrote {shown(written.workflow)} ({args.tracker} tracker)")
    for path in written.others:
        print(f"wrote {shown(path)}")
    for path in written.kept:
        print(f"kept  {shown(path)} (it already existed)")
    target = shown(written.workflow)
    if written.next_step:
        print(f"next: edit {target}: {written.next_step}; then")
    print(f"  symphony check {target}     # see what the daemon would do")
    print(f"  symphony {target}           # run it")
    return EXIT_OK


def _report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony report",
        description="Print the workflow's outcome figures (hand-offs, rework, gates); given a "
        "fleet.yaml or a folder of workflows, each one's.",
    )
    _workflow_arg(parser)
    parser.add_argument("--since", default="7d", help="how far back: 90m, 24h, 7d (default) or 2w")
    return parser


def _report(args: argparse.Namespace) -> int:
    members = _fleet_of(args.workflow)
    if members is not None:
        return _each(members, lambda path: _report_one(path, args.since))
    return _report_one(_single(args.workflow), args.since)


def _report_one(workflow: Path, since: str) -> int:
    window = parse_window(since)
    settings = load_settings(workflow)
    assert settings.state is not None
    store = Store.read_only(settings.state.path)
    try:
        print(
            report_text(
                store,
                workflow=str(settings.workflow_path),
                window=window,
                label=since.strip(),
                now=datetime.now(UTC),
            )
        )
    finally:
        if store is not None:
            store.close()
    return EXIT_OK


def _render_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony render", description="Print the prompt a ticket would get."
    )
    parser.add_argument("issue", help="ticket id or identifier")
    _workflow_arg(parser)
    parser.add_argument("--attempt", type=int, default=None, help="render as this attempt")
    return parser


def _open_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony open",
        description=(
            "Open a ticket's workspace in your editor (editor.command, $VISUAL or $EDITOR); "
            "print its path and branch when none is set."
        ),
    )
    parser.add_argument("issue", help="ticket identifier")
    _workflow_arg(parser)
    return parser


def _open(args: argparse.Namespace) -> int:
    settings = load_settings(args.workflow)
    workspaces = WorkspaceManager(settings.workspace.root, settings.hooks, env={})
    path = workspaces.owned_path(args.issue)
    if path is None:
        print(
            f"symphony: no workspace for {args.issue!r} under {settings.workspace.root} (the "
            "ticket has not run yet, its workspace was removed, or it is not symphony's)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    branch = uvloop.run(git_output(path, dict(os.environ), "rev-parse", "--abbrev-ref", "HEAD"))
    words = editor_words(settings, os.environ)
    if words is None:
        print(path)
        if branch:
            print(f"branch {branch.strip()}")
        return EXIT_OK
    try:
        return subprocess.run([*words, str(path)], check=False).returncode
    except OSError as exc:
        print(f"symphony: cannot run the editor {words[0]!r}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _memory_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony memory",
        description=(
            "List the notes agents and the daemon keep for later tickets (memory.folder), "
            "newest first. They are plain Markdown files: edit or delete them as you like."
        ),
    )
    _workflow_arg(parser)
    return parser


def _memory(args: argparse.Namespace) -> int:
    settings = load_settings(args.workflow)
    memory = memory_of(settings, SecretMasker())  # notes are masked when they are written
    if memory is None:
        print("memory is off (memory.enabled: false)")
        return EXIT_OK
    print("\n".join(Listing(memory.folder, memory.notes()).lines()))
    return EXIT_OK


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def _load(path: Path, masker: SecretMasker) -> tuple[Settings, Tracker]:
    """The workflow's settings and tracker; `masker` learns the tracker's secrets."""
    settings = load_settings(path)
    check_prompts(settings)
    tracker = create_tracker(settings.tracker, TrackerContext(settings.workflow_dir, os.environ))
    masker.set(os.environ.get(name, "") for name in tracker.secret_env_names())
    return settings, tracker


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


def _run(args: argparse.Namespace) -> int:
    tune_collector()
    console = live_console(args.no_tui, args.log_format)
    # The daemon's one masker: the logs, the orchestrator and every surface share it.
    masker = SecretMasker()
    files = configure_logging(
        fmt=args.log_format,
        level=args.log_level,
        logs_root=args.logs_root,
        stream=ConsoleLogStream(console) if console is not None else None,
        masker=masker,
    )
    settings, tracker = _load(args.workflow, masker)
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
            return render_status(orchestrator.snapshot(), orchestrator.masker)

        return uvloop.run(
            run_daemon(orchestrator, serve_http=serve_http, table=table, console=console)
        )


def _announce(settings: Settings) -> None:
    log = structlog.get_logger("symphony")
    for warning in check.preflight_warnings(settings):
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


def _fleet_of(path: Path) -> list[Member] | None:
    """The workflows `path` names when it is a fleet (a fleet.yaml, or a folder of folders
    with a WORKFLOW.md each); None for one workflow."""
    if path.is_dir() and (path / "WORKFLOW.md").is_file():
        return None
    if path.is_dir() or path.suffix in (".yaml", ".yml"):
        return list(plan_fleet([path]).members)
    return None


def _each(members: list[Member], one: Callable[[Path], int]) -> int:
    """`one` for every workflow of a fleet, each under its name; failed if any failed."""
    failed = False
    for member in members:
        print(f"== {member.name} ({member.workflow}) ==")
        try:
            failed = one(member.workflow) != EXIT_OK or failed
        except SymphonyError as exc:
            print(f"symphony: {exc}")
            failed = True
        print()
    return EXIT_FAILED if failed else EXIT_OK


def _check(args: argparse.Namespace) -> int:
    def one(path: Path) -> int:
        settings, tracker = _load(path, SecretMasker())
        return uvloop.run(check.report(settings, tracker))

    paths: list[Path] = args.workflows or [Path("WORKFLOW.md")]
    if len(paths) > 1:
        return _each(list(plan_fleet(paths).members), one)
    members = _fleet_of(paths[0])
    return one(_single(paths[0])) if members is None else _each(members, one)


def _single(path: Path) -> Path:
    return path / "WORKFLOW.md" if path.is_dir() else path


def _render(args: argparse.Namespace) -> int:
    masker = SecretMasker()
    settings, tracker = _load(args.workflow, masker)
    prompt = uvloop.run(_render_for(tracker, settings, args.issue, args.attempt, masker))
    if prompt is None:
        print(f"symphony: no ticket {args.issue!r} in {settings.tracker.kind}", file=sys.stderr)
        return EXIT_FAILED
    print(prompt)
    return EXIT_OK


async def _render_for(
    tracker: Tracker, settings: Settings, wanted: str, attempt: int | None, masker: SecretMasker
) -> str | None:
    """The first-turn prompt `wanted` (an id or identifier) would get; in stage mode that of
    its stage, with the plan and comments read from the tracker as a dispatch would."""
    try:
        issue = await _find(tracker, settings, wanted)
        if issue is None:
            return None
        stage = settings.machine.stage_for(issue.state) if settings.machine else None
        memory = memory_of(settings, masker)
        if stage is None:
            notes = memory.for_prompt(Ticket.of(issue)) if memory is not None else None
            return render_prompt(settings.prompt_template, issue, attempt, memory=notes)
        context = await stage_context(tracker, issue, stage, settings.trust)
        notes = memory.for_prompt(Ticket.of(issue, plan=context.plan)) if memory else None
        return render_prompt(stage.prompt_template, issue, attempt, context, memory=notes)
    finally:
        await tracker.aclose()


async def _find(tracker: Tracker, settings: Settings, wanted: str) -> Issue | None:
    found = await tracker.fetch_issues_by_ids([wanted])
    if found:
        return found[0]
    resolved = await resolve_states(settings.tracker, tracker)
    states = resolved.active_states + resolved.terminal_states
    if settings.machine is not None:
        states += settings.machine.checkpoint_states(resolved.terminal_states)
    for issue in await tracker.fetch_issues_by_states(states):
        if issue.identifier == wanted:
            return issue
    return None


if __name__ == "__main__":
    raise SystemExit(main())

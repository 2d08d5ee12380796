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
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from symphony import __version__
from symphony.base.errors import SymphonyError
from symphony.base.exits import EXIT_FAILED, EXIT_OK
from symphony.base.imports import load_structlog


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args)
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


def _dispatch(args: list[str]) -> int:
    """The subcommand's arguments parsed, then its module imported and run: each command
    imports what it uses, so `--help` and `--version` import nothing of the daemon."""
    # Intermixed: `render DEMO-1 --attempt 2 WORKFLOW.md` puts an option between positionals.
    command = args[0] if args else None
    if command == "check":
        options = _check_parser().parse_intermixed_args(args[1:])
        load_structlog()
        from symphony.cli.check import check_command

        return check_command(options)
    if command == "render":
        options = _render_parser().parse_intermixed_args(args[1:])
        load_structlog()
        from symphony.cli.render import render

        return render(options)
    if command == "init":
        return _init(_init_parser().parse_intermixed_args(args[1:]))
    if command == "report":
        options = _report_parser().parse_intermixed_args(args[1:])
        load_structlog()
        from symphony.cli.report import report

        return report(options)
    if command == "open":
        options = _open_parser().parse_intermixed_args(args[1:])
        load_structlog()
        from symphony.cli.workspace import open_workspace

        return open_workspace(options)
    if command == "memory":
        options = _memory_parser().parse_intermixed_args(args[1:])
        load_structlog()
        from symphony.cli.workspace import list_memory

        return list_memory(options)
    if command == "demo":
        load_structlog()
        from symphony.cli.demo import demo

        return demo(args[1:], lambda argv: _run(_run_parser().parse_intermixed_args(argv)))
    if command == "serve":
        load_structlog()
        from symphony.cli.serve import serve, serve_parser

        return serve(serve_parser(_port).parse_intermixed_args(args[1:]))
    return _run(_run_parser().parse_intermixed_args(args))


def _run(options: argparse.Namespace) -> int:
    load_structlog()
    from symphony.cli.run import run

    return run(options)


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
    from symphony.cli.init import TRACKERS  # only `init` names the trackers

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


def _report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony report",
        description="Print the workflow's outcome figures (hand-offs, rework, gates); given a "
        "fleet.yaml or a folder of workflows, each one's.",
    )
    _workflow_arg(parser)
    parser.add_argument("--since", default="7d", help="how far back: 90m, 24h, 7d (default) or 2w")
    return parser


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


def version() -> str:
    return __version__


def _init(args: argparse.Namespace) -> int:
    from symphony.cli.init import init_workflow

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


if __name__ == "__main__":
    raise SystemExit(main())

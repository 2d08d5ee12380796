"""The one way a daemon is started, run and stopped, for one workflow or a fleet of them.

`symphony WORKFLOW.md` and `symphony serve` differ only in what they run (one orchestrator or a
`FleetRunner`) and what they show (one dashboard or the fleet's page and table). Everything
else is here, once: the store and its lock opened before anything runs (`open_workflow`), the
signals (`Signals`), the HTTP server and the live terminal table, each a task of one
`asyncio.TaskGroup` that ends with the daemon.

Signals: SIGINT and SIGTERM stop gracefully; a second one says the daemon is still stopping; a
third kills every agent and hook process group and exits. SIGHUP reloads the workflows, unless
it says the terminal the daemon was started from is gone: then it is a stop like SIGINT (the
person who could watch it left). A SIGHUP ignored at start (`nohup`) stays ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from symphony.base import dataclass_code
from symphony.base.exits import EXIT_FAILED, EXIT_OK
from symphony.base.secrets import SecretMasker
from symphony.config.fields import INVALID_CONFIG, ConfigError
from symphony.config.sections import Settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.gateway.access import gateway_refusal
from symphony.hosts import process
from symphony.store import Store
from symphony.store.lock import DaemonLock
from symphony.tracker.contract import Tracker

if TYPE_CHECKING:
    from symphony.observability.terminal import TerminalStatus

log = structlog.get_logger("symphony")

SAVE_DATACLASS_CODE_AFTER_S = 5.0
"""When the methods compiled for dataclasses at start-up are written for the next start
(`symphony.base.dataclass_code`): by then the first tick has dispatched what it could."""


class Daemon(Protocol):
    """What the launch runs: an orchestrator, or a fleet of them."""

    async def run(self) -> None: ...

    def stop(self) -> None:
        """Stop gracefully; safe from a signal handler."""

    def reload(self) -> None:
        """Read the workflows again; safe from a signal handler."""


class Served(Protocol):
    """An HTTP server listening in the daemon's loop."""

    url: str

    async def stop(self) -> None: ...


ServeHttp = Callable[[asyncio.TaskGroup], Awaitable[Served]]
"""Starts the daemon's HTTP server as a task of the launch's group."""


def live_console(no_tui: bool, log_format: str) -> Any:
    """The console the live table draws on: only for a person at a terminal, so none when
    asked, when stderr is piped, or when logs are JSON. rich, which draws it, is loaded only
    then."""
    if no_tui or log_format != "console" or not sys.stderr.isatty():
        return None
    from rich.console import Console

    return Console(stderr=True)


def log_stream(console: Any) -> Any:
    """Where log lines go while `console` shows the live table (None: no table)."""
    if console is None:
        return None
    from symphony.observability.terminal import ConsoleLogStream

    return ConsoleLogStream(console)


def has_terminal() -> bool:
    """Whether this process has a controlling terminal it can still open (a hung-up one is
    taken away from every process of its session)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def handled_signals() -> list[signal.Signals]:
    """SIGINT, SIGTERM and SIGHUP, except a SIGHUP that was ignored when we started: `nohup`
    asks for exactly that, so a detached daemon outlives the terminal it was started from."""
    signals = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    return signals


class Signals:
    """What each signal does (see the module's docstring). No signal ever leaves an agent
    behind: the graceful stop ends each one, the forced stop kills them all."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        on_hangup: Callable[[], None] = lambda: None,
        exit_now: Callable[[int], None] = os._exit,
        terminal: Callable[[], bool] = has_terminal,
    ) -> None:
        self._daemon = daemon
        self._on_hangup = on_hangup
        self._exit_now = exit_now
        self._terminal = terminal
        self._had_terminal = terminal()
        self.received = 0

    def __call__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            if not self._had_terminal or self._terminal():
                log.info("reloading: reading the workflow again", signal=name)
                self._daemon.reload()
                return
            self._on_hangup()  # the terminal is gone: stop drawing on it
        self.received += 1
        if self.received == 1:
            log.info("stopping: agents are being stopped and after_run hooks run", signal=name)
            self._daemon.stop()
        elif self.received == 2:
            log.warning(
                "still stopping: waiting for agents to exit and after_run hooks to finish; "
                "signal once more to kill them now",
                signal=name,
                process_groups=len(process.live_groups()),
            )
        else:
            killed = process.kill_all()
            log.error(
                "forced stop: killed every agent and hook", signal=name, process_groups=killed
            )
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            self._exit_now(EXIT_FAILED)


@contextlib.contextmanager
def open_workflow(
    settings: Settings,
    masker: SecretMasker,
    *,
    tracker: Tracker | None = None,
    environ: Mapping[str, str] | None = None,
) -> Iterator[Orchestrator]:
    """The workflow's orchestrator on its store, under the lock that keeps a second daemon of
    the same workflow out; the lock comes before the store is opened or anything runs. A
    store that had to be reset is said in the log and on the activity feed."""
    assert settings.state is not None
    refused = gateway_refusal(settings, os.environ if environ is None else environ)
    if refused is not None:
        raise ConfigError(INVALID_CONFIG, refused)
    lock = DaemonLock(Path(f"{settings.state.path}.lock"))
    lock.acquire(str(settings.workflow_path))
    try:
        store, damage = Store.open(settings.state.path)
    except BaseException:
        lock.release()
        raise
    try:
        orchestrator = Orchestrator(
            settings, tracker=tracker, store=store, masker=masker, environ=environ
        )
        if damage is not None:
            log.error(damage)
            orchestrator.activity.add(
                orchestrator.clock.wall(), "state_reset", damage, level="error"
            )
        yield orchestrator
    finally:
        store.close()
        lock.release()


async def _drawn(status: TerminalStatus) -> None:
    """The live table until cancelled; a terminal that vanished must not fail the daemon."""
    try:
        await status.run()
    except Exception:
        log.debug("the live table stopped", exc_info=True)


async def run_daemon(
    daemon: Daemon,
    *,
    serve_http: ServeHttp | None = None,
    table: Callable[[], Any] | None = None,
    console: Any = None,
) -> int:
    """Run `daemon` until it stops, with its signals, its HTTP server and its live table, all
    owned here and all ended before this returns."""
    loop = asyncio.get_running_loop()
    status: asyncio.Task[None] | None = None

    def hang_up() -> None:
        if status is not None:
            status.cancel()

    signals = Signals(daemon, on_hangup=hang_up)
    loop.call_later(SAVE_DATACLASS_CODE_AFTER_S, dataclass_code.save)
    handled = handled_signals()
    for signum in handled:
        loop.add_signal_handler(signum, signals, signum)
    try:
        async with asyncio.TaskGroup() as tasks:
            http = await serve_http(tasks) if serve_http is not None else None
            if table is not None and console is not None:
                from symphony.observability.terminal import TerminalStatus

                status = tasks.create_task(_drawn(TerminalStatus(table, console)))
            try:
                await daemon.run()
            finally:
                if status is not None:
                    status.cancel()
                if http is not None:
                    await http.stop()
    except BaseExceptionGroup as group:
        # One failure (the port taken, say) is said as itself: the command line turns a
        # SymphonyError into its one-line message, never a group's traceback.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
    log.info("stopped")
    return EXIT_OK

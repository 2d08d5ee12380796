"""The launch (`symphony.daemon.launch`): what each signal does, and that everything it
starts ends with the daemon."""

from __future__ import annotations

import asyncio
import io
import signal

import pytest
from rich.console import Console

from symphony.base.errors import SymphonyError
from symphony.daemon.launch import Signals, run_daemon


class Daemon:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        await self.stopped.wait()

    def stop(self) -> None:
        self.calls.append("stop")
        self.stopped.set()

    def reload(self) -> None:
        self.calls.append("reload")


def signals(daemon: Daemon, terminal: list[bool]) -> tuple[Signals, list[int], list[str]]:
    exits: list[int] = []
    hangups: list[str] = []
    handler = Signals(
        daemon,
        on_hangup=lambda: hangups.append("hup"),
        exit_now=exits.append,
        terminal=lambda: terminal[0],
    )
    return handler, exits, hangups


def test_the_first_stop_signal_drains_the_second_warns_the_third_kills() -> None:
    daemon = Daemon()
    handler, exits, _ = signals(daemon, [False])
    handler(signal.SIGTERM)
    assert (daemon.calls, exits) == (["stop"], [])
    handler(signal.SIGINT)
    assert (daemon.calls, exits) == (["stop"], [])
    handler(signal.SIGTERM)
    assert (daemon.calls, exits) == (["stop"], [1])


def test_sighup_reloads_while_the_terminal_is_there_or_there_never_was_one() -> None:
    for terminal in ([True], [False]):
        daemon = Daemon()
        handler, exits, hangups = signals(daemon, terminal)
        handler(signal.SIGHUP)
        handler(signal.SIGHUP)
        assert (daemon.calls, exits, hangups) == (["reload", "reload"], [], [])
        handler(signal.SIGINT)  # a reload is no step towards the forced stop
        assert daemon.calls[-1] == "stop" and exits == []


def test_sighup_after_the_terminal_hung_up_stops_and_stops_drawing() -> None:
    daemon = Daemon()
    terminal = [True]
    handler, exits, hangups = signals(daemon, terminal)
    terminal[0] = False  # the terminal was closed
    handler(signal.SIGHUP)
    assert (daemon.calls, hangups, exits) == (["stop"], ["hup"], [])
    handler(signal.SIGTERM)
    handler(signal.SIGTERM)
    assert exits == [1]


class Server:
    url = "http://127.0.0.1:1/"

    def __init__(self, task: asyncio.Task[None]) -> None:
        self.task = task
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True
        self.task.cancel()


async def test_the_http_server_and_the_table_are_tasks_that_end_with_the_daemon() -> None:
    daemon = Daemon()
    served: list[Server] = []
    drawn = asyncio.Event()

    async def serve_http(tasks: asyncio.TaskGroup) -> Server:
        served.append(Server(tasks.create_task(asyncio.sleep(3600))))
        return served[0]

    def table() -> str:
        drawn.set()
        daemon.stop()  # the daemon stops while the table is up
        return "table"

    before = asyncio.all_tasks()
    code = await asyncio.wait_for(
        run_daemon(daemon, serve_http=serve_http, table=table, console=Console(file=io.StringIO())),
        10,
    )
    assert code == 0 and drawn.is_set() and served[0].stopped
    assert served[0].task.done()
    assert asyncio.all_tasks() == before  # nothing it started outlives it
    loop = asyncio.get_running_loop()
    assert not loop.remove_signal_handler(signal.SIGTERM)  # its handlers are gone too


async def test_a_server_that_cannot_start_is_its_own_error_and_the_daemon_never_runs() -> None:
    daemon = Daemon()
    ran: list[str] = []
    daemon.run = lambda: ran.append("run") or daemon.stopped.wait()  # type: ignore[method-assign]

    async def serve_http(tasks: asyncio.TaskGroup) -> Server:
        raise SymphonyError("server_bind_failed", "cannot listen on 127.0.0.1:1: in use")

    with pytest.raises(SymphonyError, match="cannot listen"):
        await run_daemon(daemon, serve_http=serve_http)
    assert ran == []

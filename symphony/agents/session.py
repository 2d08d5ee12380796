"""What every agent session shares, whatever its protocol: the lifecycle (`SessionBase`: start
once in a checked workspace, a failed start said and cleaned up, a stop that always runs to its
end, a failed turn said once, why the process ended), delivering events, matching the replies
to what it asked the agent (`Replies`), waiting for a turn under a silence limit, and the
running token totals of protocols that report usage per turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from symphony.agents import (
    INVALID_WORKSPACE_CWD,
    PORT_EXIT,
    RESPONSE_TIMEOUT,
    STARTUP_FAILED,
    TURN_TIMEOUT,
    AgentError,
    AgentLaunch,
    EventSink,
)
from symphony.agents.stdio import AgentProcess
from symphony.base.events import AgentEvent, EventKind, TokenUsage

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def again(error: AgentError) -> AgentError:
    """A fresh copy: one stored failure may be raised in several places, and each raise keeps
    its own traceback."""
    return AgentError(error.category, error.message, limit=error.limit)


class Replies(Generic[K, T]):
    """The requests a session sent its agent that still wait for a reply, by id (`key(n)` of
    the n-th request: a JSON-RPC number, Claude's `symphony-n`).

    Each request waits at most its timeout, sending included, and is forgotten however it
    ends, so a late reply finds nobody (`awaits` says so). Once the connection is over
    (`fail`), every waiting request gets that failure instead of a reply; the agent's own
    refusal is a reply of the same kind (an `AgentError`), raised to the one who asked."""

    def __init__(self, key: Callable[[int], K]) -> None:
        self._key = key
        self._next = 1
        self._waiting: dict[K, asyncio.Future[T | AgentError]] = {}

    async def exchange(
        self, send: Callable[[K], Awaitable[None]], *, timeout_s: float, timeout_message: str
    ) -> T:
        """Send a request under a new id with `send(id)` and return its reply; raises the
        AgentError it was answered with, or RESPONSE_TIMEOUT with `timeout_message`."""
        request_id = self._key(self._next)
        self._next += 1
        waiter: asyncio.Future[T | AgentError] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = waiter
        try:
            async with asyncio.timeout(timeout_s):
                await send(request_id)
                reply = await waiter
        except TimeoutError:
            raise AgentError(RESPONSE_TIMEOUT, timeout_message) from None
        finally:
            self._waiting.pop(request_id, None)
        if isinstance(reply, AgentError):
            raise again(reply)
        return reply

    def awaits(self, request_id: K) -> bool:
        """Whether a request with this id still waits for its reply."""
        waiter = self._waiting.get(request_id)
        return waiter is not None and not waiter.done()

    def resolve(self, request_id: K, reply: T | AgentError) -> None:
        """Hand the reply to its request, if it still waits."""
        if self.awaits(request_id):
            self._waiting[request_id].set_result(reply)

    def fail(self, failure: AgentError) -> None:
        """The connection is over: every waiting request gets `failure`."""
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_result(failure)


def check_workspace(workspace: Path) -> None:
    if not workspace.is_absolute() or not workspace.is_dir():
        raise AgentError(
            INVALID_WORKSPACE_CWD,
            f"workspace {str(workspace)!r} is not an existing absolute directory",
        )


def turn_event(
    kind: EventKind, pid: int | None, session_id: str | None, turn: int, **fields: Any
) -> AgentEvent:
    """An event of a session whose protocol has no ids of its own for turns (Claude Code,
    ACP): the session id doubles as the thread id, turns are numbered `turn-N`."""
    return AgentEvent(
        kind=kind,
        pid=pid,
        session_id=session_id,
        thread_id=session_id,
        turn_id=f"turn-{turn}" if turn else None,
        **fields,
    )


def deliver(sink: EventSink, event: AgentEvent, logger: Any) -> None:
    """Hand an event to the orchestrator's sink; its failure must not end the agent's run."""
    try:
        sink(event)
    except Exception:
        logger.exception("agent_event_sink_failed", kind=event.kind)


async def within_silence(
    outcome: asyncio.Future[T | AgentError], last_output: Callable[[], float], timeout_ms: int
) -> T:
    """The outcome of a turn, unless the agent says nothing for `timeout_ms` (any output
    resets the clock: this bounds silence, not the turn's length). An AgentError as the
    outcome is raised."""
    loop = asyncio.get_running_loop()
    while True:
        remaining = last_output() + timeout_ms / 1000 - loop.time()
        if remaining <= 0:
            raise AgentError(TURN_TIMEOUT, f"no output from the agent for {timeout_ms} ms")
        done, _ = await asyncio.wait({outcome}, timeout=remaining)
        if done:
            result = outcome.result()
            if isinstance(result, AgentError):
                raise again(result)
            return result


class StopOnce:
    """A session's stop: started once, awaited to its end even when the caller is cancelled
    meanwhile (the cancellation is re-raised afterwards), so no agent process is left running
    or unreaped behind a cancelled worker."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    async def __call__(self, shutdown: Callable[[], Awaitable[None]]) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(shutdown())
            self._task.set_name(self._name)
        task = self._task
        cancelled: asyncio.CancelledError | None = None
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                cancelled = exc
        if not task.cancelled():
            task.exception()  # shutdowns catch everything; this only marks it retrieved
        if cancelled is not None:
            raise cancelled


class SessionBase:
    """The lifecycle of one agent session, whatever its protocol. A protocol fills in whether
    it was started (`_began`), how it opens (`_open`: spawn and handshake), how it ends
    (`_shutdown`), what it says once open (`_opened`) and how it emits an event (`_emit`);
    its turns are its own, and report a failure through `_turn_failed`."""

    resumed = False
    """The session continues the thread `launch.resume_thread_id` named."""

    def __init__(
        self, launch: AgentLaunch, logger: Any, *, stop_grace_s: float, stop_name: str
    ) -> None:
        self._launch = launch
        self._stop_grace_s = stop_grace_s
        self._logger = logger.bind(workspace=str(launch.workspace))
        self._stopping = False
        self._stop = StopOnce(stop_name)

    def _began(self) -> bool:
        raise NotImplementedError

    async def _open(self) -> None:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError

    def _opened(self) -> None:
        """Once open: what the protocol says (by default, a debug line)."""
        self._logger.debug("agent_session_started", resumed=self.resumed)

    def _emit(self, kind: EventKind, *, message: str | None = None) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        """Launch the agent in the workspace and open its session; raises AgentError. A
        session starts once; a start that fails is said, and stopped before it raises."""
        if self._began() or self._stop.started:
            raise AgentError(STARTUP_FAILED, "the session was already started")
        if self._launch.host.is_local:
            check_workspace(self._launch.workspace)
        try:
            await self._open()
        except BaseException as exc:
            if isinstance(exc, AgentError):
                self._emit(EventKind.STARTUP_FAILED, message=str(exc))
                self._logger.warning("agent_startup_failed", reason=str(exc))
            await self.stop()
            raise
        self._opened()

    async def stop(self) -> None:
        """Interrupt any turn, end the process and its group; never raises. The cleanup is
        awaited to its end even when the caller is cancelled (`StopOnce`)."""
        self._stopping = True
        await self._stop(self._shutdown)

    def _turn_failed(self, exc: AgentError, *, said: bool, **fields: Any) -> None:
        """A turn ended in `exc`: said as an event unless the agent's own report said it."""
        if not said:
            self._emit(EventKind.TURN_ENDED_WITH_ERROR, message=str(exc))
        self._logger.warning("agent_turn_failed", reason=str(exc), **fields)

    def _exit_failure(self, process: AgentProcess | None, returncode: int | None) -> AgentError:
        """Why the session is over now that its process's output closed."""
        if self._stopping or process is None:
            return AgentError(PORT_EXIT, "the session was stopped")
        failure = process.exit_failure(returncode)
        self._logger.warning("agent_exited", returncode=returncode, reason=failure.message)
        return failure


@dataclass(slots=True)
class RunningUsage:
    """Token totals of a session whose agent reports usage per turn (Anthropic style: input
    without the cache), kept as the thread totals the core expects (input including cache
    reads and writes)."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    def add(self, input: int, cache_read: int, cache_write: int, output: int) -> TokenUsage:
        self.input += input
        self.cache_read += cache_read
        self.cache_write += cache_write
        self.output += output
        whole = self.input + self.cache_read + self.cache_write
        return TokenUsage(
            whole, self.output, whole + self.output, self.cache_read, self.cache_write
        )


def count(values: Any, name: str) -> int:
    """A non-negative integer field of a usage report, 0 when absent or odd."""
    value = values.get(name) if isinstance(values, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value

"""The one way symphony talks to a cluster: the system's `kubectl`, with the user's kubeconfig.

Every command line is `kubectl [--context C] -n NAMESPACE <verb> ...`; manifests and the
environment of a command travel on stdin, never on a command line. The process that runs
`kubectl` is a seam (`Runner`): tests put an in-memory fake in its place, or a `kubectl` of
their own first on PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from symphony.config.kubernetes import KubernetesSettings
from symphony.hosts import process

log = structlog.get_logger("symphony.hosts")

KUBECTL = "kubectl"
COMMAND_TIMEOUT_S = 60.0
CLIENT_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "KUBECONFIG",
                "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")  # fmt: skip
"""What kubectl may see of the daemon's environment: where its kubeconfig is, or the
cluster's address when the daemon runs in a pod; nothing an agent or the tracker holds."""


class ClusterFailed(Exception):
    """What the cluster was asked could not be done; `unreachable`: kubectl did not reach it
    at all."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class KubectlResult:
    """How one kubectl command ended: its exit code and what it printed, or why it was killed."""

    returncode: int | None
    """None: it took longer than its timeout, or said nothing within its answer deadline
    (kubectl was killed)."""
    out: str
    err: str
    silent: bool = False
    """Killed for saying nothing at all within its answer deadline: the cluster (or the pod
    an exec was for) never answered."""
    why: str = ""
    """How a kubectl that was killed failed, in words naming the cluster and the timeout."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def unreachable(self) -> bool:
        """Whether kubectl could not reach the cluster at all (never a command's own end)."""
        return (
            self.silent
            or self.returncode == 127
            or any(words in self.err for words in _UNREACHABLE)
        )

    def reason(self) -> str:
        if self.returncode is None:
            return self.why or "timed out"
        return " ".join(self.err.strip().splitlines())[-300:] or f"exit {self.returncode}"


_UNREACHABLE = ("Unable to connect", "connection refused", "no such host", "i/o timeout",
                "the server is currently unable")  # fmt: skip


@dataclass
class ClusterStatus:
    """What the daemon last heard from the cluster and what its pods are doing now, for the
    status surfaces; one per workflow, kept across reloads of the same cluster."""

    reached: bool | None = None
    """Whether the last kubectl command reached the cluster (None: none ran yet)."""
    error: str | None = None
    """Why the last command that did not reach it failed."""
    at: float | None = None
    """When the last command ended (wall clock, seconds)."""
    pending: dict[str, str] = field(default_factory=dict)
    """Pods the scheduler has no room for, by name: what is missing (`Insufficient cpu`)."""
    running: set[str] = field(default_factory=set)
    """Pods Ready for their run and not yet deleted."""

    def heard(self, result: KubectlResult) -> None:
        self.reached = not result.unreachable
        self.error = None if self.reached else result.reason()
        self.at = time.time()


class Runner(Protocol):
    async def __call__(
        self,
        argv: Sequence[str],
        stdin: bytes | None,
        env: Mapping[str, str],
        timeout_s: float,
        answer_s: float | None = None,
    ) -> KubectlResult: ...


async def run_process(
    argv: Sequence[str],
    stdin: bytes | None,
    env: Mapping[str, str],
    timeout_s: float,
    answer_s: float | None = None,
) -> KubectlResult:
    """`argv` as a child in its own process group, to its end or `timeout_s`; with
    `answer_s`, killed sooner when it writes nothing at all within that long (a kubectl whose
    cluster does not answer). Whatever it wrote before it was killed is kept."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=dict(env),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return KubectlResult(127, "", f"could not start {argv[0]}: {exc}")
    process.track(proc.pid)
    out, err = bytearray(), bytearray()
    heard = asyncio.Event()

    async def pump(stream: asyncio.StreamReader | None, into: bytearray) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            into.extend(chunk)
            heard.set()

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    async def whole() -> None:
        await asyncio.gather(feed(), pump(proc.stdout, out), pump(proc.stderr, err))
        await proc.wait()

    ended = asyncio.ensure_future(whole())
    silent = False
    try:
        async with asyncio.timeout(timeout_s):  # never swallows a cancellation
            if answer_s is not None and answer_s < timeout_s:
                said = asyncio.ensure_future(heard.wait())
                try:
                    await asyncio.wait((ended, said), timeout=answer_s,
                                       return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                finally:
                    said.cancel()
                if not ended.done() and not heard.is_set():
                    silent = True
                    raise TimeoutError
            await asyncio.shield(ended)  # a timeout kills the child; its pipes then close
    except TimeoutError:
        process.signal_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await ended
        return KubectlResult(None, _text(out), _text(err), silent=silent)
    except BaseException:
        process.signal_group(proc.pid, signal.SIGKILL)
        ended.cancel()
        raise
    finally:
        process.untrack(proc.pid)
    return KubectlResult(proc.returncode, _text(out), _text(err))


def _text(data: bytearray) -> str:
    return data.decode("utf-8", "replace")


class Kubectl:
    """`kubectl` bound to one workflow's context and namespace. Every command is bounded: a
    request to the cluster gets kubectl's own `--request-timeout` and the process a deadline
    of its own, so a cluster that never answers (a dead API server, a black-holed address)
    fails the command, in words naming the context and the timeout, instead of holding it."""

    def __init__(
        self,
        settings: KubernetesSettings,
        environ: Mapping[str, str],
        runner: Runner = run_process,
        status: ClusterStatus | None = None,
    ) -> None:
        self.settings = settings
        self.env = {k: environ[k] for k in CLIENT_NAMES if k in environ}
        self._runner = runner
        self.status = status if status is not None else ClusterStatus()

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    @property
    def request_timeout_s(self) -> float:
        return self.settings.request_timeout_ms / 1000

    @property
    def deadline_s(self) -> float:
        """How long one command to the API may take in all: kubectl makes a few requests
        (discovery, then the object), each bounded by its request timeout."""
        return self.request_timeout_s * 2 + 1

    def where(self) -> str:
        """The cluster as a person knows it: its context and namespace."""
        context = self.settings.context or "kubectl's current context"
        return f"the cluster (context {context}, namespace {self.namespace})"

    def no_answer(self, timeout_s: float) -> str:
        return (
            f"{self.where()} did not answer within {timeout_s:g} s "
            "(worker.kubernetes.request_timeout_ms)"
        )

    def argv(self, *args: str) -> tuple[str, ...]:
        context = ("--context", self.settings.context) if self.settings.context else ()
        return (KUBECTL, *context, "-n", self.settings.namespace, *args)

    async def __call__(self, *args: str, stdin: bytes | None = None) -> KubectlResult:
        """A request to the API (apply, get, delete), with kubectl's `--request-timeout`."""
        timeout = f"--request-timeout={self.settings.request_timeout_ms}ms"
        done = await self._runner(self.argv(*args, timeout), stdin, self.env, self.deadline_s)
        if done.returncode is None:
            done = KubectlResult(None, done.out, done.err, True, self.no_answer(self.deadline_s))
        self.status.heard(done)
        return done

    async def delete(self, what: str, names: Sequence[str], objects: Sequence[str]) -> bool:
        """Delete `objects` (`kind/name`) without waiting for them to go, logged as the `what`
        (pods, claims) `names`; whether kubectl did. One already gone counts as deleted."""
        done = await self("delete", *objects, "--ignore-not-found", "--wait=false")
        if not done.ok:
            log.warning(f"{what} not deleted", **{what: list(names)}, reason=done.reason())
        else:
            log.info(f"{what} deleted", **{what: list(names)})
        return done.ok

    async def run_argv(
        self, argv: Sequence[str], *, stdin: bytes | None, timeout_s: float
    ) -> KubectlResult:
        """A command line made by `argv` (an exec), run to its end or `timeout_s`; one that
        says nothing within the request timeout (its wrapper reports at once) never reached
        the pod, and is killed then."""
        answer = self.request_timeout_s
        done = await self._runner(argv, stdin, self.env, timeout_s, answer)
        if done.returncode is None and (done.silent or not done.out + done.err):
            done = KubectlResult(None, done.out, done.err, True, self.no_answer(answer))
        self.status.heard(done)  # (else an end, or a command that ran past its own timeout)
        return done

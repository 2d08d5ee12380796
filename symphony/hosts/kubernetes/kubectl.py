"""The one way symphony talks to a cluster: the system's `kubectl`, with the user's kubeconfig.

Every command line is `kubectl [--context C] -n NAMESPACE <verb> ...`; manifests and the
environment of a command travel on stdin, never on a command line. The process that runs
`kubectl` is a seam (`Runner`): tests put an in-memory fake in its place, or a `kubectl` of
their own first on PATH.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from symphony.config.kubernetes import KubernetesSettings
from symphony.hosts import process

KUBECTL = "kubectl"
COMMAND_TIMEOUT_S = 60.0
CLIENT_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "KUBECONFIG",
                "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")  # fmt: skip
"""What kubectl may see of the daemon's environment: where its kubeconfig is, or the
cluster's address when the daemon runs in a pod; nothing an agent or the tracker holds."""


@dataclass(frozen=True, slots=True)
class KubectlResult:
    returncode: int | None
    """None: it took longer than its timeout (kubectl was killed)."""
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def reason(self) -> str:
        if self.returncode is None:
            return "timed out"
        return " ".join(self.err.strip().splitlines())[-300:] or f"exit {self.returncode}"


class Runner(Protocol):
    async def __call__(
        self, argv: Sequence[str], stdin: bytes | None, env: Mapping[str, str], timeout_s: float
    ) -> KubectlResult: ...


async def run_process(
    argv: Sequence[str], stdin: bytes | None, env: Mapping[str, str], timeout_s: float
) -> KubectlResult:
    """`argv` as a child in its own process group, to its end or `timeout_s`."""
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
    try:
        async with asyncio.timeout(timeout_s):  # never swallows a cancellation
            out, err = await proc.communicate(stdin)
    except TimeoutError:
        process.signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()
        return KubectlResult(None, "", "")
    except BaseException:
        process.signal_group(proc.pid, signal.SIGKILL)
        raise
    finally:
        process.untrack(proc.pid)
    return KubectlResult(
        proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    )


class Kubectl:
    """`kubectl` bound to one workflow's context and namespace."""

    def __init__(
        self,
        settings: KubernetesSettings,
        environ: Mapping[str, str],
        runner: Runner = run_process,
    ) -> None:
        self.settings = settings
        self.env = {k: environ[k] for k in CLIENT_NAMES if k in environ}
        self._runner = runner

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def argv(self, *args: str) -> tuple[str, ...]:
        context = ("--context", self.settings.context) if self.settings.context else ()
        return (KUBECTL, *context, "-n", self.settings.namespace, *args)

    async def __call__(
        self, *args: str, stdin: bytes | None = None, timeout_s: float = COMMAND_TIMEOUT_S
    ) -> KubectlResult:
        return await self._runner(self.argv(*args), stdin, self.env, timeout_s)

    async def run_argv(
        self, argv: Sequence[str], *, stdin: bytes | None, timeout_s: float
    ) -> KubectlResult:
        """A command line made by `argv` (an exec), run as the others are."""
        return await self._runner(argv, stdin, self.env, timeout_s)

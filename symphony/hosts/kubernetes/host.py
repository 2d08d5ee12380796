"""A run's pod as the host its agent, hooks and gates run on: `kubectl exec` carries them.

Every command in the pod goes through the SSH hosts' wrapper (`symphony.hosts.ssh.WRAPPER`),
started by `kubectl exec [-i] <pod> -c agent -- /bin/sh -c <wrapper> ...`: it reports its
process id on stderr, enters the workspace, clears the environment down to the pod's own
basics and sets what symphony sends on its stdin as `NAME=<base64>` lines, so no value is on a
command line here or in the pod. An agent's stdio is the `kubectl exec -i` process's.

kubectl says nothing of its own failures by its exit status (1, as a command's may be): a
command whose wrapper never reported its process id did not reach the pod, and counts as the
way to the host failing (`unreachable`), never as the command's own end.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import structlog

from symphony.hosts import AgentLaunchSpec, CarrierFailure, process
from symphony.hosts.kubernetes.kubectl import COMMAND_TIMEOUT_S, Kubectl, KubectlResult
from symphony.hosts.shell import ScriptOutcome, ScriptResult
from symphony.hosts.ssh import (
    END_GROUP,
    NO_WORKSPACE,
    REMOTE_CHILD_VARIABLE,
    SSH_FAILED,
    WRAPPER,
    CommandResult,
    encode_env,
    remote_pgid_of,
)

if TYPE_CHECKING:
    from symphony.config.sandbox import SandboxSettings
    from symphony.hosts.sandbox.home import HomeCredentials

log = structlog.get_logger("symphony.hosts")

CONTAINER = "agent"


class ReachRefused(Exception):
    """An agent in a pod was to call a service of the daemon that no pod reaches: one on its
    loopback, without `worker.kubernetes.daemon_address` (load and `check` refuse such
    workflows; this is the last guard)."""


def _reached(result: KubectlResult) -> bool:
    """Whether the command's wrapper started in the pod (it reports its process id first)."""
    return any(remote_pgid_of(line) is not None for line in result.err.splitlines())


def _without_pgid(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if remote_pgid_of(line) is None)


class KubectlHost:
    """The pod `pod` of one run, reached with `kubectl`."""

    def __init__(self, kubectl: Kubectl, pod: str) -> None:
        self.kubectl = kubectl
        self.pod = pod
        self.name = pod
        self.workspace_root = "/"

    @property
    def is_local(self) -> bool:
        return False

    def exec_argv(self, script: str, *args: str, stdin: bool) -> tuple[str, ...]:
        """`kubectl exec` running `script` under /bin/sh in the pod with `args` as $1, $2..."""
        interactive = ("-i",) if stdin else ()
        return self.kubectl.argv(
            "exec", *interactive, self.pod, "-c", CONTAINER, "--",
            "/bin/sh", "-c", script, "symphony", *args,
        )  # fmt: skip

    # Agents

    def agent_launch(
        self, command: str, workspace: Path, env: Mapping[str, str]
    ) -> AgentLaunchSpec:
        sent = {k: v for k, v in env.items() if k != process.CHILD_VARIABLE}
        if process.CHILD_VARIABLE in env:
            sent[REMOTE_CHILD_VARIABLE] = env[process.CHILD_VARIABLE]
        return AgentLaunchSpec(
            self.exec_argv(WRAPPER, str(workspace), command, "bash", "stdin", stdin=True),
            None,
            self.kubectl.env,
            encode_env(sent),
        )

    def reach(self, url: str) -> tuple[KubectlHost, str]:
        """At `daemon_address`, on the port the service listens on there: the pod's policy
        lets out to exactly those ports. A service listening elsewhere (on loopback, before a
        reload set the address) is out of the pod's reach."""
        daemon = self.kubectl.settings.daemon
        parts = urlsplit(url)
        if daemon is None or parts.port not in daemon.ports:
            raise ReachRefused(
                f"an agent in pod {self.pod} cannot reach the daemon's service at {url}: set "
                "worker.kubernetes.daemon_address to where pods reach the daemon, or run "
                "agents that take their tools over their own stdio (codex), without the model "
                "gateway"
            )
        return self, parts._replace(netloc=f"{daemon.url_host()}:{parts.port}").geturl()

    def sandboxed(self, settings: SandboxSettings, credentials: HomeCredentials) -> KubectlHost:
        """The pod is the run's sandbox: its NetworkPolicy holds the stage's network and its
        root filesystem is read-only, with only the workspace, the home and /tmp writable."""
        return self

    def without_sandbox(self) -> KubectlHost:
        return self

    def reported_group(self, stderr_line: str) -> int | None:
        return remote_pgid_of(stderr_line)

    def carrier_failure(
        self, returncode: int | None, stderr: Sequence[str]
    ) -> CarrierFailure | None:
        if returncode == NO_WORKSPACE:
            return CarrierFailure("no_workspace", f"the workspace is not in pod {self.pod}")
        if returncode not in (0, None) and any(
            line.startswith(("error:", "Error from server", "Unable to connect")) for line in stderr
        ):
            return CarrierFailure("unreachable", f"kubectl lost pod {self.pod}")
        return None

    # Scripts: hooks, gates and symphony's own commands

    async def run_script(
        self,
        script: str,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_ms: int,
        tail_bytes: int,
        end_group: bool = False,
    ) -> ScriptResult:
        """Run `script` with `sh -lc` in `cwd` in the pod, to its end or `timeout_ms`; a
        timeout or `end_group` ends every process it started there (by the run's mark)."""
        started = time.monotonic()
        mark = process.new_mark()
        sent = encode_env({**env, REMOTE_CHILD_VARIABLE: mark})
        argv = self.exec_argv(WRAPPER, str(cwd), script, "sh", "none", stdin=True)
        try:
            done = await self.kubectl.run_argv(argv, stdin=sent, timeout_s=timeout_ms / 1000)
        except BaseException:
            await self._end_marked(mark)
            raise
        output = (_without_pgid(done.out) + _without_pgid(done.err)).encode()
        outcome: ScriptOutcome
        if done.silent:  # kubectl never got to the pod: nothing there to end
            outcome, detail = "failed", f"could not reach pod {self.pod}: {done.reason()}"
        elif done.returncode is None:
            await self._end_marked(mark)
            outcome, detail = "timed_out", f"timed out after {timeout_ms} ms"
        elif done.returncode == 0:
            outcome, detail = "completed", "completed"
        elif not _reached(done):
            outcome, detail = "failed", f"could not reach pod {self.pod}: {done.reason()}"
        elif done.returncode == NO_WORKSPACE:
            outcome, detail = "failed", f"the workspace {cwd} is not in pod {self.pod}"
        else:
            outcome, detail = "failed", f"exited with status {done.returncode}"
        if end_group and done.returncode is not None:
            await self._end_marked(mark)
        code = done.returncode if _reached(done) or done.returncode is None else SSH_FAILED
        code = SSH_FAILED if done.silent else code
        return ScriptResult(
            outcome, code, detail, time.monotonic() - started, output[-tail_bytes:], len(output)
        )

    async def _end_marked(self, mark: str) -> None:
        await self.end_group(0, 1.0, mark)

    async def end_group(self, pgid: int, grace_s: float, mark: str | None = None) -> None:
        """SIGTERM the group in the pod and the processes carrying the run's `mark`, SIGKILL
        what is left after `grace_s` (the pod itself goes when the run ends). Best effort."""
        tenths = str(max(int(grace_s * 10), 1))
        group = str(pgid) if pgid > 0 else ""
        result = await self.command(END_GROUP, group, tenths, mark or "", timeout_s=grace_s + 15)
        if result.unreachable:
            log.warning("the processes in the pod could not be signalled", pod=self.pod,
                        reason=result.reason())  # fmt: skip

    async def command(
        self, script: str, *args: str, timeout_s: float = COMMAND_TIMEOUT_S
    ) -> CommandResult:
        """Run one of symphony's own scripts in the pod (no environment is sent); kubectl's
        own failure is exit 255, as ssh's is."""
        argv = self.exec_argv(WRAPPER, "/", _script_with_args(script, args), "sh", "none",
                              stdin=False)  # fmt: skip
        done = await self.kubectl.run_argv(argv, stdin=None, timeout_s=timeout_s)
        if done.silent:
            return CommandResult(SSH_FAILED, "", done.reason())
        if done.returncode is None:
            return CommandResult(None, "", "")
        code = done.returncode if _reached(done) else SSH_FAILED
        return CommandResult(code, done.out, _without_pgid(done.err))


def _script_with_args(script: str, args: Sequence[str]) -> str:
    """`script` run with `args` as its positional parameters, as one `sh -c` text (the
    wrapper runs a command text, not a script and its arguments)."""
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    return f"set -- {quoted}\n{script}" if args else script

"""An SSH worker host: OpenSSH carries the agent's stdio, hooks, gates and workspace commands.

Every remote command runs through one small POSIX `sh` wrapper, started by
`ssh -T -o BatchMode=yes ... host 'exec /bin/sh -c <wrapper> ...'`, which

- reports its process id first (`symphony-remote-pgid N` on stderr): sshd makes each session
  its own process group, so that is the group a stop or a timeout ends on the host;
- goes into the workspace (exit 97 when it is not there);
- clears the login environment down to the host's own basics (HOME, USER, LOGNAME, PATH,
  SHELL, LANG) and sets what symphony sends, read from its stdin as `NAME=<base64>` lines up to
  a `.` line, so no value appears in a command line on either machine;
- runs the command with `bash -lc` (an agent, whose stdio stays connected) or `sh -lc` (a
  hook or gate, with no stdin).

No TTY, no agent or X forwarding, keepalives on, and ssh never asks for a password or a host
key (BatchMode). The only forwards are an agent's own: the daemon's tool server and its model
gateway, each carried to a loopback port on the host for the run's agent (`with_forward`,
`reach`). ssh's own
failure (exit 255: no route, refused, authentication, a dropped connection) is
`host_unreachable`.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import copy
import hashlib
import re
import secrets
import shlex
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

import structlog

from symphony.hosts import AgentLaunchSpec, CarrierFailure, process
from symphony.hosts.sandbox.home import HomeCredentials
from symphony.hosts.sandbox.remote import launcher
from symphony.hosts.shell import ScriptOutcome, ScriptResult, read_tail

log = structlog.get_logger("symphony.hosts")

if TYPE_CHECKING:
    from symphony.config.sandbox import SandboxSettings
    from symphony.config.sections import HostSpec, SshSettings

SSH_FAILED = 255
"""ssh's exit status when it could not run the command (or lost the connection)."""
NO_WORKSPACE = 97
"""The wrapper's exit status when the workspace is not on the host."""
COMMAND_TIMEOUT_S = 60.0
"""A workspace command or a kill on the host that takes longer is given up."""

REMOTE_CHILD_VARIABLE = "SYMPHONY_REMOTE_CHILD"
"""What marks a run's processes on its host (`SYMPHONY_CHILD` does on this machine)."""

_PGID_LINE = re.compile(r"^symphony-remote-pgid (\d+)$")

SHARED_CONNECTION_S = 30
"""How long the connection symphony's own commands share stays open after the last one."""
_control_dir: str | None = None

FORWARD_PORTS = range(20000, 32768)
"""Where on a host's loopback the daemon's tool server and model gateway are forwarded to, for
one run: below Linux's ephemeral range, which outgoing connections draw from."""
_FORWARD_REFUSED = "remote port forwarding failed"
"""What ssh says (under ExitOnForwardFailure) when sshd would not listen for the forward."""

# $1 workspace, $2 command, $3 shell (bash for agents, sh for scripts), $4 stdin|none,
# $5 the launcher of the run's sandbox, or nothing.
WRAPPER = r"""
echo "symphony-remote-pgid $$" >&2
cd -- "$1" 2>/dev/null || { echo "symphony: no workspace $1 on $(uname -n)" >&2; exit 97; }
_sy_h=$HOME _sy_u=$USER _sy_l=$LOGNAME _sy_p=$PATH _sy_s=$SHELL _sy_g=$LANG
for _sy_n in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do
  case $_sy_n in _sy_*) ;; *) unset "$_sy_n" 2>/dev/null ;; esac
done
export HOME="$_sy_h" USER="$_sy_u" LOGNAME="$_sy_l" PATH="$_sy_p" SHELL="$_sy_s"
[ -n "$_sy_g" ] && export LANG="$_sy_g"
while IFS= read -r _sy_line; do
  [ "$_sy_line" = . ] && break
  _sy_v=$(printf '%s' "${_sy_line#*=}" | base64 -d) || exit 96
  export "${_sy_line%%=*}=$_sy_v"
done
unset _sy_h _sy_u _sy_l _sy_p _sy_s _sy_g _sy_n _sy_line _sy_v
if [ -n "${5:-}" ]; then  # a sandbox's launcher: it runs `$0 -lc "$1"` inside
  if [ "$4" = stdin ]; then exec /bin/sh -c "$5" "$3" "$2"; fi
  exec /bin/sh -c "$5" "$3" "$2" </dev/null
fi
if [ "$4" = stdin ]; then exec "$3" -lc "$2"; fi
exec "$3" -lc "$2" </dev/null
"""

# The ownership marks of symphony's workspaces there, as on this machine (symphony.workspace.local):
# `<root>/.symphony-owned/<key>` holds the directory's device and inode; only a directory whose
# mark matches is used or deleted. $1 root, $2 key.
_PREPARE = r"""
ws="$1/$2"; marks="$1/.symphony-owned"; mark="$marks/$2"
mkdir -p -- "$marks" || exit 1
if [ -e "$ws" ] || [ -L "$ws" ]; then
  if [ -d "$ws" ] && [ ! -L "$ws" ] && [ -f "$mark" ]; then
    own=$(stat -c %d:%i -- "$ws")
    if [ "$(cat -- "$mark")" = "$own" ]; then echo existing; exit 0; fi
    if [ "$(cat -- "$mark")" = pending ] && [ -z "$(ls -A -- "$ws")" ]; then
      echo "$own" > "$mark" && echo created; exit $?
    fi
  fi
  echo not-ours; exit 0
fi
echo pending > "$mark" && mkdir -- "$ws" && stat -c %d:%i -- "$ws" > "$mark" && echo created
"""
_REMOVE = r"""
ws="$1/$2"; mark="$1/.symphony-owned/$2"
if [ ! -e "$ws" ] && [ ! -L "$ws" ]; then rm -f -- "$mark" "$mark.base"; echo none; exit 0; fi
if [ -d "$ws" ] && [ ! -L "$ws" ] && [ -f "$mark" ] \
    && [ "$(cat -- "$mark")" = "$(stat -c %d:%i -- "$ws")" ]; then
  rm -rf -- "$ws" && rm -f -- "$mark" "$mark.base" && echo removed; exit $?
fi
echo not-ours
"""
# Where a ticket's work starts from: the commit its workspace was at once made (after
# `after_create`), kept beside its mark as `<key>.base`. $1 root, $2 key, $3 `stamp` or `read`.
_BASE = r"""
ws="$1/$2"; base="$1/.symphony-owned/$2.base"
if [ "$3" = stamp ]; then
  head=$(cd -- "$ws" 2>/dev/null \
    && GIT_OPTIONAL_LOCKS=0 git rev-parse --verify --quiet HEAD 2>/dev/null)
  printf '%s\n' "$head" > "$base" || exit 1
fi
cat -- "$base" 2>/dev/null
exit 0
"""
# Which of the keys name a workspace of symphony's on the host: $1 root, then the keys.
_OWNED = r"""
root=$1; shift
for key in "$@"; do
  mark="$root/.symphony-owned/$key"
  [ -d "$root/$key" ] && [ ! -L "$root/$key" ] && [ -f "$mark" ] \
    && [ "$(cat -- "$mark")" = "$(stat -c %d:%i -- "$root/$key")" ] && echo "$key"
done
exit 0
"""
# $1 process group, $2 grace in tenths of a second, $3 the run's mark: a process that left
# the group (a daemonizing tool) still carries the mark in its environment. `kill -SIG -PGID`
# is the form every /bin/sh takes: dash refuses `kill -SIG -- -PGID` ("Illegal number: -").
END_GROUP = r"""
marked() {
  [ -n "$3" ] || return 0
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = "$$" ] && continue
    tr '\0' '\n' < "$dir/environ" 2>/dev/null | grep -qxF "SYMPHONY_REMOTE_CHILD=$3" \
      && printf '%s ' "$pid"
  done
}
if kill -TERM -"$1" 2>/dev/null; then echo group-signalled; else echo group-gone; fi
found=$(marked "$@"); [ -n "$found" ] && kill -TERM $found 2>/dev/null
i=0
while [ "$i" -lt "$2" ]; do
  kill -0 -"$1" 2>/dev/null || [ -n "$(marked "$@")" ] || exit 0
  sleep 0.1; i=$((i + 1))
done
kill -KILL -"$1" 2>/dev/null && echo group-killed
found=$(marked "$@"); [ -n "$found" ] && kill -KILL $found 2>/dev/null
exit 0
"""

# Processes of earlier daemons, found by the instance id in their environment (as on this
# machine, symphony.store.recovery): never by a bare process group, which may be reused.
# $1 the variable, then the instance ids.
_STOP_MARKED = r"""
name=$1; shift
found=""
for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}
  [ "$pid" = "$$" ] && continue
  vars=$(tr '\0' '\n' < "$dir/environ" 2>/dev/null) || continue
  for id in "$@"; do
    case "
$vars
" in *"
$name=$id
"*) found="$found $pid"; break ;; esac
  done
done
[ -z "$found" ] && { echo 0; exit 0; }
kill -TERM $found 2>/dev/null
sleep 1
kill -KILL $found 2>/dev/null
echo $found | wc -w
"""

# What the ssh client itself may see of the daemon's environment: enough to find its keys and
# agent, nothing else (the remote side gets only what the wrapper is sent).
CLIENT_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK", "LANG", "TMPDIR")


def remote_pgid_of(line: str) -> int | None:
    """The process group a wrapper reported, from one of its stderr lines."""
    match = _PGID_LINE.match(line.strip())
    return int(match.group(1)) if match else None


def _shared_connection(settings: SshSettings) -> tuple[str, ...]:
    """ssh options that let symphony's own short commands to a host (workspace marks, git
    questions, kills) share one connection, kept open SHARED_CONNECTION_S after the last:
    each then costs a round trip, not a login. One connection per host and settings (a
    workflow with another ssh config file gets its own); the control sockets are in a folder
    only this process's user can open, removed when the process ends. Agents, hooks and gates
    get connections of their own."""
    global _control_dir
    if _control_dir is None:
        _control_dir = tempfile.mkdtemp(prefix="symphony-ssh-mux-")  # mode 0700
        atexit.register(shutil.rmtree, _control_dir, True)
    which = hashlib.sha256(repr(settings).encode()).hexdigest()[:10]
    return (
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={_control_dir}/{which}-%C",
        "-o", f"ControlPersist={SHARED_CONNECTION_S}",
    )  # fmt: skip


def forward_refused(stderr: Sequence[str]) -> bool:
    """Whether ssh ended because the host would not carry a run's forward."""
    return any(_FORWARD_REFUSED in line for line in stderr)


def encode_env(env: Mapping[str, str]) -> bytes:
    """The environment as the wrapper reads it from stdin."""
    lines = [
        f"{name}={base64.b64encode(value.encode()).decode()}"
        for name, value in env.items()
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and not name.startswith("_sy_")
    ]
    return ("\n".join([*lines, "."]) + "\n").encode()


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How one of symphony's own commands on the host ended: ssh's exit code and what it printed."""

    returncode: int | None
    """None: it took longer than its timeout (ssh was killed)."""
    out: str
    err: str

    @property
    def unreachable(self) -> bool:
        return self.returncode in (None, SSH_FAILED) and not self.forward_refused

    @property
    def forward_refused(self) -> bool:
        return self.returncode == SSH_FAILED and forward_refused(self.err.splitlines())

    def reason(self) -> str:
        if self.returncode is None:
            return "timed out"
        lines = [line for line in self.err.strip().splitlines() if not remote_pgid_of(line)]
        return " ".join(lines)[-300:] or f"exit {self.returncode}"


class SshHost:
    """One worker host, reached with the system's `ssh`."""

    def __init__(
        self, spec: HostSpec, ssh: SshSettings, environ: Mapping[str, str], root: str
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.workspace_root = spec.workspace_root or root
        self._ssh = ssh
        self._client_env = {k: environ[k] for k in CLIENT_NAMES if k in environ}
        self._launcher = ""
        self._forwards: tuple[tuple[int, int], ...] = ()
        """(port on the host, port here) of each forward the agent's connection carries."""

    def _sandboxed(self) -> tuple[str, ...]:
        """The wrapper's fifth argument: the sandbox's launcher, when the host has one."""
        return (self._launcher,) if self._launcher else ()

    def with_sandbox(self, launcher: str) -> SshHost:
        """This host, with every agent, hook and gate started through `launcher`
        (`symphony.hosts.sandbox.remote`)."""
        host = copy.copy(self)
        host._launcher = launcher
        return host

    def without_sandbox(self) -> SshHost:
        """This host, running commands as its user (the daemon's own git, a push)."""
        if not self._launcher:
            return self
        host = copy.copy(self)
        host._launcher = ""
        return host

    def with_forward(self, local_port: int) -> tuple[SshHost, int]:
        """This host, with an agent's connection carrying a forward from a loopback port on
        the host to a loopback service of the daemon (`127.0.0.1:local_port` here: its tool
        server, its model gateway); and that port.

        The agents speak HTTP over TCP only, so the forward is a port, not a socket; like the
        servers here it opens nothing without the run's bearer token, and it ends with the
        run's connection. The port is drawn at random: ExitOnForwardFailure makes ssh fail the
        run rather than start an agent whose tools or model are unreachable (a port taken
        there, or an sshd that forbids forwarding)."""
        taken = {there for there, _ in self._forwards}
        while (port := FORWARD_PORTS[secrets.randbelow(len(FORWARD_PORTS))]) in taken:
            pass
        host = copy.copy(self)
        host._forwards = (*self._forwards, (port, local_port))
        return host, port

    @property
    def _forward(self) -> tuple[str, ...]:
        """The ssh options of the forwards an agent's connection carries."""
        if not self._forwards:
            return ()
        options = ["-o", "ExitOnForwardFailure=yes", "-o", "ClearAllForwardings=no"]
        for there, here in self._forwards:
            options += ["-R", f"127.0.0.1:{there}:127.0.0.1:{here}"]
        return tuple(options)

    def reach(self, url: str) -> tuple[SshHost, str]:
        """Over a forward on the agent's own connection, at a loopback port on the host."""
        parts = urlsplit(url)
        assert parts.port is not None, f"the daemon's address {url} names no port"
        host, port = self.with_forward(parts.port)
        return host, parts._replace(netloc=f"127.0.0.1:{port}").geturl()

    def sandboxed(self, settings: SandboxSettings, credentials: HomeCredentials) -> SshHost:
        return self.with_sandbox(launcher(settings, credentials))

    @property
    def is_local(self) -> bool:
        return False

    def argv(self, script: str, *args: str, options: Sequence[str] = ()) -> tuple[str, ...]:
        """`ssh ... host` running `script` under /bin/sh with `args` as $1, $2, ...; `options`
        are more of ssh's own (a forward, a shared connection)."""
        remote = " ".join(
            ["exec", "/bin/sh", "-c", shlex.quote(script), "symphony", *map(shlex.quote, args)]
        )
        return ("ssh", *self._options(options), "--", self.name, remote)

    def _options(self, options: Sequence[str]) -> list[str]:
        """What every ssh to the host is given (SPEC Appendix A), then `options`."""
        forced = [
            "-T",
            "-a",
            "-x",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self._ssh.connect_timeout_s}",
            "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=3",
            "-o", "LogLevel=ERROR",
        ]  # fmt: skip
        # Forced only when the workflow says so: otherwise the user's ssh configuration (its
        # accept-new for build hosts, say) applies.
        if self._ssh.strict_host_key_checking is not None:
            forced += ["-o", f"StrictHostKeyChecking={self._ssh.strict_host_key_checking}"]
        if self._ssh.config_file is not None:
            forced += ["-F", str(self._ssh.config_file)]
        return [*forced, *options]

    # Agents

    def agent_launch(
        self, command: str, workspace: Path, env: Mapping[str, str]
    ) -> AgentLaunchSpec:
        # The run's mark travels under a name of its own: the host's processes are found and
        # ended there (`end_group`), never by this machine's search for its own children.
        sent = {k: v for k, v in env.items() if k != process.CHILD_VARIABLE}
        if process.CHILD_VARIABLE in env:
            sent[REMOTE_CHILD_VARIABLE] = env[process.CHILD_VARIABLE]
        return AgentLaunchSpec(
            self.argv(
                WRAPPER,
                str(workspace),
                command,
                "bash",
                "stdin",
                *self._sandboxed(),
                options=self._forward,
            ),
            None,
            self._client_env,
            encode_env(sent),
        )

    def reported_group(self, stderr_line: str) -> int | None:
        return remote_pgid_of(stderr_line)

    def carrier_failure(
        self, returncode: int | None, stderr: Sequence[str]
    ) -> CarrierFailure | None:
        if returncode == SSH_FAILED and forward_refused(stderr):
            return CarrierFailure(
                "forward_refused",
                f"{self.name} would not forward symphony's tool server or model gateway to the "
                "agent (its sshd forbids forwarding: AllowTcpForwarding; or the port was taken)",
            )
        if returncode == SSH_FAILED:
            return CarrierFailure(
                "unreachable", f"lost the connection to {self.name} (ssh exit 255)"
            )
        if returncode == NO_WORKSPACE:
            return CarrierFailure("no_workspace", f"the workspace is not on {self.name}")
        return None

    # Scripts: hooks and gates

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
        """Run `script` with `sh -lc` in `cwd` on the host, to its end or `timeout_ms`, the
        output's tail kept like a local script's. A timeout, a cancelled caller or
        `end_group` ends the script's process group on the host too."""
        started = time.monotonic()
        mark = process.new_mark()
        env = {**env, REMOTE_CHILD_VARIABLE: mark}
        with contextlib.ExitStack() as stack:
            output = stack.enter_context(tempfile.TemporaryFile())
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.argv(WRAPPER, str(cwd), script, "sh", "none", *self._sandboxed()),
                    env=self._client_env,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=output,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                return ScriptResult(
                    "failed", None, f"could not start ssh: {exc}", time.monotonic() - started,
                    b"", 0,
                )  # fmt: skip
            process.track(proc.pid)
            try:
                assert proc.stdin is not None
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(encode_env(env))
                    await proc.stdin.drain()
                    proc.stdin.close()
                async with asyncio.timeout(timeout_ms / 1000):  # never swallows a cancel
                    await proc.wait()
            except TimeoutError:
                await process.end_group(proc, 1.0)
                await self._end_reported_group(output, mark)
                outcome: ScriptOutcome = "timed_out"
                detail = f"timed out after {timeout_ms} ms"
            except BaseException:
                process.signal_group(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._end_reported_group(output, mark))
                raise
            else:
                code = proc.returncode
                outcome = "completed" if code == 0 else "failed"
                if code == 0:
                    detail = "completed"
                elif code == SSH_FAILED:
                    detail = f"could not reach {self.name} (ssh exit 255)"
                elif code == NO_WORKSPACE:
                    detail = f"the workspace {cwd} is not on {self.name}"
                else:
                    detail = f"exited with status {code}"
                if end_group:
                    await self._end_reported_group(output, mark)
            finally:
                process.untrack(proc.pid)
            tail, total = read_tail(output, tail_bytes, start=_reported(output)[1])
        return ScriptResult(
            outcome, proc.returncode, detail, time.monotonic() - started, tail, total
        )

    async def _end_reported_group(self, output: IO[bytes], mark: str) -> None:
        pgid = _reported(output)[0]
        if pgid is not None:
            await self.end_group(pgid, 1.0, mark)

    # Process groups and workspace commands

    async def end_group(self, pgid: int, grace_s: float, mark: str | None = None) -> None:
        """SIGTERM the group on the host, and the processes carrying the run's `mark`;
        SIGKILL what is left after `grace_s`. Best effort."""
        tenths = str(max(int(grace_s * 10), 1))
        result = await self.command(
            END_GROUP, str(pgid), tenths, mark or "", timeout_s=grace_s + 15
        )
        if "group-signalled" not in result.out and "group-gone" not in result.out:
            log.warning("the process group on the host could not be signalled", host=self.name,
                        pgid=pgid, reason=(result.err or result.out).strip()[:300])  # fmt: skip

    async def command(
        self,
        script: str,
        *args: str,
        timeout_s: float = COMMAND_TIMEOUT_S,
        options: Sequence[str] = (),
    ) -> CommandResult:
        """Run one of symphony's own scripts on the host (no environment is sent), over the
        connection these commands share unless `options` asks for one of its own."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv(script, *args, options=options or _shared_connection(self._ssh)),
                env=self._client_env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return CommandResult(SSH_FAILED, "", f"could not start ssh: {exc}")
        process.track(proc.pid)
        try:
            async with asyncio.timeout(timeout_s):  # never swallows a cancellation
                out, err = await proc.communicate()
        except TimeoutError:
            process.signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            return CommandResult(None, "", "")
        finally:
            process.untrack(proc.pid)
        return CommandResult(
            proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )

    async def close_shared(self) -> None:
        """End the connection symphony's own commands to the host share, if one is open (at
        shutdown: it would otherwise outlive the daemon by SHARED_CONNECTION_S)."""
        if _control_dir is None:
            return  # no command ever went to a host from this process
        options = self._options(_shared_connection(self._ssh))
        with contextlib.suppress(OSError, TimeoutError):
            proc = await asyncio.create_subprocess_exec(
                "ssh", *options, "-O", "exit", "--", self.name,
                env=self._client_env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            async with asyncio.timeout(5):
                await proc.wait()

    async def probe_forward(self) -> CommandResult:
        """Whether the host carries the forwards a run's tools and model need (`check`):
        ssh's own refusal is `forward_refused`."""
        host, _ = self.with_forward(9)  # nothing listens: the forward is only opened
        return await host.command("true", options=host._forward)

    async def stop_marked(self, variable: str, values: Sequence[str]) -> CommandResult:
        """End every process on the host whose environment has `variable` set to one of
        `values` (an earlier daemon's instance ids); prints how many."""
        return await self.command(_STOP_MARKED, variable, *values)

    async def prepare_dir(self, key: str) -> CommandResult:
        """Create `<workspace_root>/<key>` with its mark: `created`, `existing` or `not-ours`."""
        return await self.command(_PREPARE, self.workspace_root, key)

    async def workspace_base(self, key: str, *, stamp: bool) -> str | None:
        """The commit the workspace `key` started from: recorded now (`stamp`, once it is
        made) or as recorded then; None when it is no git checkout or cannot be read."""
        said = await self.command(_BASE, self.workspace_root, key, "stamp" if stamp else "read")
        head = said.out.strip() if said.returncode == 0 else ""
        return head if re.fullmatch(r"[0-9a-f]{40,64}", head) else None

    async def owned_dirs(self, keys: Sequence[str]) -> CommandResult:
        """Which of `keys` are workspaces of symphony's on the host, one per line."""
        return await self.command(_OWNED, self.workspace_root, *keys)

    async def remove_dir(self, key: str) -> CommandResult:
        """Delete the workspace if symphony made it: `removed`, `none` or `not-ours`."""
        return await self.command(_REMOVE, self.workspace_root, key)


def _reported(output: IO[bytes]) -> tuple[int | None, int]:
    """The process group the wrapper reported on the first line of a script's output, and
    how many bytes that line takes (0 when it is not there)."""
    output.seek(0)
    first = output.readline(200)
    pgid = remote_pgid_of(first.decode("utf-8", "replace"))
    return pgid, len(first) if pgid is not None else 0

"""Asking git about a workspace: one bounded subprocess per question, never a prompt.

`Git` says where the question runs: on this machine (`LOCAL_GIT`), or on the SSH worker host
that holds the workspace (`Git(host)`), over one connection per question, so the evidence,
footprints and merge checks of a ticket on a host are read there, bounded the same way.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from symphony.hosts.ssh import SshHost

GIT_TIMEOUT_S = 20.0
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
"""What a question may print on a host before the answer is cut (the review's diff is the
largest)."""

_SENT_OUTPUT_BYTES = 64 * 1024

# $1 the workspace, then git's arguments. The host's git, in the workspace, never prompting
# and taking no optional locks (an agent may be working there); exit 97 without the folder.
_GIT_THERE = r"""
cd -- "$1" 2>/dev/null || exit 97
shift
GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 exec git "$@"
"""


@dataclass(frozen=True, slots=True)
class GitRun:
    returncode: int | None
    """None: git could not start or took too long (it was killed)."""
    out: str
    err: str


async def run_git(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, timeout_s: float = GIT_TIMEOUT_S
) -> GitRun:
    """Run `git <args>` to its end or `timeout_s`, never asking for credentials."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", *args,
            cwd=cwd,
            env={**env, "GIT_TERMINAL_PROMPT": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except OSError as exc:
        return GitRun(None, "", str(exc))
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # lands as git exits, and a stopped worker would go on.
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return GitRun(None, "", f"took over {timeout_s:.0f} s")
    return GitRun(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class Git:
    """Where a workspace's git runs: this machine (`host` None) or an SSH worker host, where
    the workspace's path is a path on that host."""

    host: SshHost | None = None

    async def run(
        self, path: Path, *args: str, env: Mapping[str, str], timeout_s: float = GIT_TIMEOUT_S
    ) -> GitRun:
        """`git -C path <args>`, taking no optional locks, to its end or `timeout_s`."""
        if self.host is None:
            return await run_git(
                "-C", str(path), *args, env={**env, "GIT_OPTIONAL_LOCKS": "0"},
                timeout_s=timeout_s,
            )  # fmt: skip
        done = await self.host.command(
            _GIT_THERE, str(PurePosixPath(path)), *args, timeout_s=timeout_s
        )
        if done.returncode is None:
            return GitRun(None, "", f"took over {timeout_s:.0f} s on {self.host.name}")
        if done.unreachable:
            return GitRun(None, "", f"cannot reach {self.host.name}: {done.reason()}")
        out = done.out[:MAX_OUTPUT_BYTES]
        return GitRun(done.returncode, out, done.err)

    async def run_sending(
        self,
        path: Path,
        *args: str,
        env: Mapping[str, str],
        sent: Mapping[str, str],
        timeout_s: float = GIT_TIMEOUT_S,
    ) -> GitRun:
        """`git -C path <args>` with the variables `sent` in its environment and nowhere
        else: here beside `env`; on a host they are all it gets beyond the host's own login
        environment, carried on the connection's stdin, never in a command line and never
        written there. On a host what git prints comes back as one text, in `out` and `err`
        both."""
        if self.host is None:
            return await run_git(
                "-C", str(path), *args, env={**env, **sent}, timeout_s=timeout_s
            )  # fmt: skip
        ran = await self.host.without_sandbox().run_script(
            shlex.join(["git", "-C", str(PurePosixPath(path)), *args]),
            cwd=path, env={"GIT_TERMINAL_PROMPT": "0", **sent},
            timeout_ms=int(timeout_s * 1000), tail_bytes=_SENT_OUTPUT_BYTES,
        )  # fmt: skip
        said = ran.output
        if ran.outcome == "timed_out":
            return GitRun(None, said, f"took over {timeout_s:.0f} s on {self.host.name}")
        return GitRun(ran.exit_code, said, said or ran.detail)


LOCAL_GIT = Git()


async def git_output(
    path: Path, env: Mapping[str, str], *args: str, git: Git = LOCAL_GIT
) -> str | None:
    """What `git -C path <args>` prints, or None when it failed, could not run or took longer
    than GIT_TIMEOUT_S. It takes no optional locks, so it can run beside an agent working in
    the same repository."""
    run = await git.run(path, *args, env=env)
    return run.out if run.returncode == 0 else None


async def is_own_work_tree(path: Path, env: Mapping[str, str], git: Git = LOCAL_GIT) -> bool:
    """Whether `path` is the top of a git work tree: a folder inside another repository (a
    workspace root under the project's own checkout) is not, or its questions would be answered
    about that repository."""
    if git.host is not None:
        # On a host: inside a work tree, at its top (no prefix below it).
        said = await git_output(
            path, env, "rev-parse", "--is-inside-work-tree", "--show-prefix", git=git
        )
        return said is not None and said.split("\n")[:2] == ["true", ""]
    top = await git_output(path, env, "rev-parse", "--show-toplevel")
    if not top or not top.strip():
        return False
    try:
        return Path(top.strip()).resolve() == path.resolve()
    except OSError:
        return False

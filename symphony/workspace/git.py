"""Asking git about a workspace: one bounded subprocess per question, never a prompt, and never
a command of the repository's own.

`Git` says where the question runs: on this machine (`LOCAL_GIT`), or on the SSH worker host
that holds the workspace (`Git(host)`), over one connection per question, so the evidence,
footprints and merge checks of a ticket on a host are read there, bounded the same way.

An agent can write its workspace's repository (and, outside a sandbox, the shared store), so
the daemon's git trusts nothing in it that runs or redirects: every git the daemon starts, here
or on a host, reads no system or global configuration, runs no hook, fsmonitor, pager, editor,
ssh command or credential helper of the repository's (`HARDENED_CONFIG`), gets only the
environment it needs (`git_environment`), and first lists the repository's configuration as
data: filters are switched off by name (`NEUTRALIZED`), and a configuration that would run a
merge driver or send git elsewhere (`REFUSED`) makes the daemon refuse to run git there at all,
naming the key. Diffs are read with `--no-ext-diff --no-textconv` (`DIFF_SAFE`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol

from symphony.base.errors import SymphonyError
from symphony.hosts import Host

if TYPE_CHECKING:
    from symphony.hosts.ssh import CommandResult

GIT_TIMEOUT_S = 20.0
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
"""What a question may print on a host before the answer is cut (the review's diff is the
largest)."""

_SENT_OUTPUT_BYTES = 64 * 1024
GIT_REFUSED = 96
"""The exit status of a git the daemon would not start (a host's script says so this way)."""

HARDENED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "ssh"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("log.showSignature", "false"),
    ("protocol.ext.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
"""Given on every command line: a command-line setting wins over every file git reads."""
NEUTRALIZED: tuple[tuple[str, str], ...] = (
    ("filter.*.clean", ""),
    ("filter.*.smudge", ""),
    ("filter.*.process", ""),
    ("filter.*.required", "false"),
    ("credential.*.helper", ""),
)
"""Keys named per driver or URL, found in the repository's configuration and each set to a
value that runs nothing (an empty filter command is no filter)."""
REFUSED: tuple[str, ...] = (
    "merge.*.driver",
    "url.*.insteadof",
    "url.*.pushinsteadof",
    "http.*",
    "remote.*.proxy",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.vcs",
    "core.worktree",
    "core.gitproxy",
    "core.alternaterefscommand",
)
"""Keys no value of the daemon's can make harmless (a merge driver has no "off"; a rewritten
URL or proxy would carry a push and its token elsewhere): git is not run where one is set."""
DIFF_SAFE = ("--no-ext-diff", "--no-textconv")
"""On every `diff` and `log -p` the daemon reads: attributes in the tree name diff drivers."""

_HARDENED_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
}
_PASSED = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
        "GIT_OPTIONAL_LOCKS",
        "SSH_AUTH_SOCK", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
        "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    }
)  # fmt: skip
"""What the daemon's git keeps of the environment it is given: where programs are, the
locale, how to reach the network, and whether a question may take optional locks; nothing
that names a repository or runs a program."""


class WorktreeError(SymphonyError):
    """A git worktree operation failed (`symphony.workspace.worktrees`)."""


def slugify(text: str) -> str:
    """A branch-name-safe form: letters, digits, `.`, `_`, `-`, nothing else."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return re.sub(r"-{2,}", "-", slug) or "ticket"


def git_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a git the daemon starts: `env`'s allowed variables (`_PASSED`, and
    the locale's `LC_*`), then the hardening that no variable of `env` can undo."""
    kept = {k: v for k, v in env.items() if k in _PASSED or k.startswith("LC_")}
    return {**kept, **_HARDENED_ENV}


def _hardened_args() -> list[str]:
    return [word for key, value in HARDENED_CONFIG for word in ("-c", f"{key}={value}")]


def repository_overrides(keys: str) -> tuple[dict[str, str], str | None]:
    """From the repository's configuration keys (`git config --name-only --list -z`): the
    `GIT_CONFIG_*` variables that switch off its filters, or the key that makes the daemon
    refuse to run git there."""
    found: dict[str, str] = {}
    count = 0
    for key in keys.split("\0"):
        lower = key.strip().lower()
        if not lower:
            continue
        if any(fnmatch.fnmatchcase(lower, pattern) for pattern in REFUSED):
            return {}, key.strip()
        for pattern, value in NEUTRALIZED:
            if fnmatch.fnmatchcase(lower, pattern):
                found[f"GIT_CONFIG_KEY_{count}"] = key.strip()
                found[f"GIT_CONFIG_VALUE_{count}"] = value
                count += 1
                break
    if count:
        found["GIT_CONFIG_COUNT"] = str(count)
    return found, None


def refusal(key: str) -> str:
    return (
        f"symphony does not run git on this repository: its configuration sets {key}, "
        "which would run a program of the repository's or send git elsewhere; remove it "
        "from the repository's config"
    )


def _leading_options(args: tuple[str, ...]) -> tuple[str, ...]:
    """The options before git's subcommand that say which repository it works on."""
    taken: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("-C", "--git-dir", "--work-tree") and i + 1 < len(args):
            taken += [word, args[i + 1]]
            i += 2
        elif word.startswith(("--git-dir=", "--work-tree=")):
            taken.append(word)
            i += 1
        else:
            break
    return tuple(taken)


def safe_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """`args` with `DIFF_SAFE` after a `diff`, `log` or `show` subcommand."""
    lead = len(_leading_options(args))
    i = lead
    while i < len(args) and args[i] == "-c":
        i += 2
    if i < len(args) and args[i] in ("diff", "log", "show"):
        return (*args[: i + 1], *DIFF_SAFE, *args[i + 1 :])
    return args


def _case(patterns: tuple[str, ...]) -> str:
    return "|".join(patterns)


# The same hardening as a POSIX sh function for the hosts: `symphony_git WHERE ARGS...` runs
# git in the current folder, WHERE being "" or the one `--git-dir=...` word the repository is
# named by. Exit 96 (GIT_REFUSED) when the repository's configuration is refused.
SAFE_GIT_SH = (
    r"""
symphony_git() {
  _sy_w=$1; shift
  unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_COMMON_DIR GIT_OBJECT_DIRECTORY
  unset GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT
  unset GIT_EXEC_PATH GIT_SSH GIT_SSH_COMMAND GIT_ASKPASS SSH_ASKPASS GIT_EXTERNAL_DIFF
  unset GIT_PAGER GIT_EDITOR GIT_PROXY_COMMAND GIT_TEMPLATE_DIR
"""
    + "".join(f"  export {k}={v}\n" for k, v in _HARDENED_ENV.items())
    + r"""  _sy_keys=$(git ${_sy_w:+"$_sy_w"} config --name-only --list 2>/dev/null)
  _sy_n=0
  while IFS= read -r _sy_k; do
    case $_sy_k in
"""
    + f"      {_case(REFUSED)})\n"
    + f'        echo "{refusal("$_sy_k")}" >&2\n'
    + "        return 96 ;;\n"
    + "".join(
        f'      {pattern}) export "GIT_CONFIG_KEY_$_sy_n=$_sy_k" '
        f'"GIT_CONFIG_VALUE_$_sy_n={value}"; _sy_n=$((_sy_n + 1)) ;;\n'
        for pattern, value in NEUTRALIZED
    )
    + r"""    esac
  done <<_SY_EOF
$_sy_keys
_SY_EOF
  export GIT_CONFIG_COUNT=$_sy_n
  git ${_sy_w:+"$_sy_w"} """
    + " ".join(shlex.quote(w) for w in _hardened_args())
    + r""" "$@"
}
"""
)

# $1 the workspace, then git's arguments. The host's git, in the workspace, never prompting
# and taking no optional locks (an agent may be working there); exit 97 without the folder.
_GIT_THERE = (
    SAFE_GIT_SH
    + r"""
cd -- "$1" 2>/dev/null || exit 97
shift
export GIT_OPTIONAL_LOCKS=0
symphony_git "" "$@"
"""
)


@dataclass(frozen=True, slots=True)
class GitRun:
    """How one git command ended: its exit code and what it printed."""

    returncode: int | None
    """None: git could not start or took too long (it was killed)."""
    out: str
    err: str


async def run_git(
    *args: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
    sent: Mapping[str, str] | None = None,
) -> GitRun:
    """Run `git <args>` hardened (the module's docstring) to its end or `timeout_s`, never
    asking for credentials. `env` is filtered (`git_environment`); `sent` is added as is (a
    push's credential variables)."""
    base = git_environment(env)
    listed = await _exec(
        [*_leading_options(args), "config", "--name-only", "--list", "-z"],
        env=base, cwd=cwd, timeout_s=timeout_s,
    )  # fmt: skip
    overrides, refused = repository_overrides(listed.out if listed.returncode == 0 else "")
    if refused is not None:
        return GitRun(GIT_REFUSED, "", refusal(refused))
    return await _exec(
        [*_hardened_args(), *safe_args(args)],
        env={**base, **overrides, **(sent or {})}, cwd=cwd, timeout_s=timeout_s,
    )  # fmt: skip


async def _exec(
    args: list[str], *, env: Mapping[str, str], cwd: Path | None, timeout_s: float
) -> GitRun:
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", *args,
            cwd=cwd,
            env=dict(env),
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


class GitHost(Protocol):
    """A host git runs on by symphony's own commands (an SSH host, a run's pod)."""

    name: str

    async def command(self, script: str, *args: str, timeout_s: float = ...) -> CommandResult: ...

    def without_sandbox(self) -> Host: ...


@dataclass(frozen=True, slots=True)
class Git:
    """Where a workspace's git runs: this machine (`host` None), an SSH worker host or a
    run's pod, where the workspace's path is a path on that host."""

    host: GitHost | None = None

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
            _GIT_THERE, str(PurePosixPath(path)), *safe_args(args), timeout_s=timeout_s
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
                "-C", str(path), *args, env=env, sent=sent, timeout_s=timeout_s
            )  # fmt: skip
        ran = await self.host.without_sandbox().run_script(
            SAFE_GIT_SH + shlex.join(["symphony_git", "", *safe_args(args)]),
            cwd=path, env=sent,
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

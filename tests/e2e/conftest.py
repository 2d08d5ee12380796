"""Fixtures for the end-to-end tests that drive the real `codex app-server` and `claude` binaries.

The binaries come from `npm ci --prefix tests/e2e` (pinned in `tests/e2e/package-lock.json`).
Without it these tests skip, except under CI (`CI` set), where a missing binary fails them so
that they can never be skipped silently. Each test that runs a real agent gets a home of its own
outside the temporary folder (`agent_home`: codex refuses to put the helpers its sandbox runs
through under it, and with bubblewrap installed every command it runs then fails), an
environment free of the machine's OpenAI/Codex settings, and a check that no codex process
outlives it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parents[1]
CODEX_BIN = E2E_DIR / "node_modules" / ".bin" / "codex"
USER_HOME = Path(os.path.expanduser("~"))
"""The machine's home folder, read before any test points HOME at a hermetic one."""


def in_temporary_folder(path: Path) -> bool:
    real = Path(os.path.realpath(path))
    temporary = {Path("/tmp"), Path(os.path.realpath(tempfile.gettempdir()))}
    return any(real.is_relative_to(folder) for folder in temporary)


def scratch_root() -> Path:
    """Where real agents' homes are made: the repository's ignored `.pytest-tmp/e2e`, or
    `~/.cache/symphony-tests` where the repository itself is in the temporary folder."""
    inside = REPO_ROOT / ".pytest-tmp" / "e2e"
    return inside if not in_temporary_folder(inside) else USER_HOME / ".cache" / "symphony-tests"


SCRATCH_ROOT = scratch_root()

CODEX_NATIVE = next(
    (E2E_DIR / "node_modules" / "@openai").glob(
        f"codex-linux-*/vendor/{platform.machine()}-unknown-linux-musl/bin/codex"
    ),
    None,
)
"""The platform's own codex binary the npm package ships (static, beside `../codex-path/rg`):
it runs without node, in a container of any Linux (None: not installed)."""

CLAUDE_BIN = E2E_DIR / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"
"""The native Claude Code binary itself (the package's launcher only points at it)."""

CLAUDE_MISSING = (
    f"the real claude binary is not installed at {CLAUDE_BIN}; "
    "run `npm ci --prefix tests/e2e` to install the pinned @anthropic-ai/claude-code"
)

CODEX_MISSING = (
    f"the real codex binary is not installed at {CODEX_BIN}; "
    "run `npm ci --prefix tests/e2e` to install the pinned @openai/codex"
)


def codex_command(base_url: str, *, wire_api: str = "responses", codex: Path = CODEX_BIN) -> str:
    """The `codex.command` that runs the real app-server against a fake model at `base_url`.

    The result is a shell command line for `bash -lc`; every argument is quoted.
    """
    overrides = {
        "model_provider": '"fake"',
        "model": '"fake-model"',
        "model_providers.fake.name": '"fake"',
        "model_providers.fake.base_url": f'"{base_url}"',
        "model_providers.fake.wire_api": f'"{wire_api}"',
        "model_providers.fake.request_max_retries": "0",
        "model_providers.fake.stream_max_retries": "0",
        "model_providers.fake.stream_idle_timeout_ms": "60000",
        "features.plugins": "false",
    }
    args = [str(codex), "app-server"]
    for key, value in overrides.items():
        args += ["-c", f"{key}={value}"]
    return shlex.join(args)


def codex_environment(codex_home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment: the machine's, without OpenAI/Codex settings, plus a home."""
    source = os.environ if base is None else base
    env = {
        name: value for name, value in source.items() if not name.startswith(("OPENAI_", "CODEX_"))
    }
    env["CODEX_HOME"] = str(codex_home)
    env["RUST_LOG"] = "warn"
    return env


@dataclass(frozen=True, slots=True)
class AgentProcess:
    pid: int
    pgid: int
    command: str


def processes_using(codex_home: Path, variable: str = "CODEX_HOME") -> list[AgentProcess]:
    """Live processes whose environment names `codex_home` as CODEX_HOME (or `variable`).

    That is codex itself, and whatever it spawned: shell-snapshot helpers (which codex starts
    in a session of their own), sandboxed commands.
    """
    marker = f"{variable}={codex_home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z" and marker in environ.split(b"\0"):
            found.append(AgentProcess(int(entry.name), int(fields[2]), command.strip()))
    return found


@pytest.fixture
def codex_bin() -> Path:
    """The real codex binary; skips (or fails under CI) when it is not installed."""
    if not os.access(CODEX_BIN, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CODEX_MISSING} (CI is set, so this is a failure, not a skip)")
        pytest.skip(CODEX_MISSING)
    return CODEX_BIN


@pytest.fixture
def scratch_path() -> Iterator[Path]:
    """A folder for one test outside the temporary folder (as a project's checkout is), removed
    after it: where a daemon's state folder, and so its sandboxed runs' homes, must not be
    under the temporary folder."""
    folder = SCRATCH_ROOT / f"project-{uuid.uuid4().hex[:12]}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def agent_home(hermetic_home: Path) -> Iterator[Path]:
    """A home for a real agent, outside the temporary folder, with the suite's git identity;
    removed after the test."""
    home = SCRATCH_ROOT / f"home-{uuid.uuid4().hex[:12]}"
    home.mkdir(parents=True)
    shutil.copyfile(hermetic_home / ".gitconfig", home / ".gitconfig")
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def codex_home(codex_bin: Path, agent_home: Path) -> Iterator[Path]:
    """A fresh CODEX_HOME for one test (`.codex` in its agent home); fails the test if a codex
    process outlives it."""
    home = agent_home / ".codex"
    home.mkdir()
    yield home
    # Codex's own short-lived helpers may still be finishing; they get a bounded while.
    leftovers = _wait_for_no_processes(home, timeout_s=10.0)
    for process in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    if leftovers:
        pytest.fail(f"codex processes outlived the test: {leftovers}")


@pytest.fixture
def codex_env(codex_home: Path) -> dict[str, str]:
    """The daemon's environment for the real codex, its HOME the test's agent home."""
    return {**codex_environment(codex_home), "HOME": str(codex_home.parent)}


def _wait_for_no_processes(
    home: Path, timeout_s: float, variable: str = "CODEX_HOME"
) -> list[AgentProcess]:
    deadline = time.monotonic() + timeout_s
    while (pids := processes_using(home, variable)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


@pytest.fixture
def claude_bin() -> Path:
    """The real claude binary; skips (or fails under CI) when it is not installed."""
    if not os.access(CLAUDE_BIN, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CLAUDE_MISSING} (CI is set, so this is a failure, not a skip)")
        pytest.skip(CLAUDE_MISSING)
    return CLAUDE_BIN


@pytest.fixture
def claude_home(claude_bin: Path, agent_home: Path) -> Iterator[Path]:
    """A fresh home (the test's agent home) and CLAUDE_CONFIG_DIR for one test; fails it if a
    claude process (or anything it started) outlives it."""
    home = agent_home
    (home / ".claude").mkdir()
    yield home
    config = home / ".claude"
    leftovers = _wait_for_no_processes(config, 10.0, "CLAUDE_CONFIG_DIR")
    for process in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    if leftovers:
        pytest.fail(f"claude processes outlived the test: {leftovers}")


def claude_environment(home: Path, base_url: str) -> dict[str, str]:
    """The daemon's environment for Claude Code against a fake Anthropic API at `base_url`:
    the machine's, without its Anthropic/Claude settings, with an isolated home."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ANTHROPIC_", "CLAUDE_"))
    }
    env.update(
        HOME=str(home),
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="sk-ant-fake-key",
    )
    return env


def claude_agent_environment(home: Path, base_url: str) -> dict[str, str]:
    """What the daemon would give a Claude or ACP agent of that environment (the allowlist):
    for tests that drive a session without the daemon. The machine's own variables stay out
    (its `IS_SANDBOX=yes`, for one, makes the ACP adapter's Claude refuse to start as root)."""
    daemon = claude_environment(home, base_url)
    keep = ("PATH", "HOME", "LANG", "CLAUDE_CONFIG_DIR", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")
    return {name: daemon[name] for name in keep if name in daemon}

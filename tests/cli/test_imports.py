"""The command line imports what its subcommand uses: `--help` and `--version` load nothing of
the daemon, the store, the web app, an agent backend or the heavy libraries, in a fresh
interpreter (what a user's shell starts); the daemon loads what its workflow uses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from symphony.base.templating import LOADED_ON_USE

FAKE_AGENT = Path(__file__).resolve().parent.parent / "fakes" / "fake_app_server.py"
HEAVY = (
    "symphony.daemon", "symphony.store", "symphony.observability", "symphony.agents",
    "symphony.gateway", "symphony.tracker", "httpx", "structlog", "liquid", "yaml", "rich",
    "uvicorn", "starlette", "sqlite3",
)  # fmt: skip


def _imported_by(*argv: str) -> set[str]:
    """The modules loaded once `symphony *argv` has run (SystemExit included)."""
    script = (
        "import json, sys\n"
        f"sys.argv = ['symphony', *{list(argv)!r}]\n"
        "from symphony.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stdout.write('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("check", "--help")])
def test_help_and_version_import_nothing_of_the_daemon(argv: tuple[str, ...]) -> None:
    loaded = _imported_by(*argv)
    heavy = sorted(m for m in loaded if m.startswith(HEAVY))
    assert heavy == [], heavy


def test_a_command_that_runs_imports_what_it_uses(tmp_path: Path) -> None:
    loaded = _imported_by("check", str(tmp_path / "missing.md"))
    assert {"symphony.cli.check", "symphony.config.load"} <= loaded


NOT_FOR_A_LOCAL_CODEX_DAEMON = (
    "httpx", "rich", "uvicorn", "starlette", "symphony.agents.claude", "symphony.agents.acp",
    "symphony.agents.tool_server", "symphony.observability.server", "symphony.daemon.review",
    "symphony.gateway.server", "symphony.daemon.cluster", "symphony.hosts.kubernetes.pods",
    "symphony.workspace.pod", "symphony.hosts.sandbox.host",
    "symphony.notify.channels", "symphony.cli.check", "importlib.metadata", "watchfiles",
    "anyio", "greenlet", "statistics", "symphony.cli.init", "symphony.hosts.ssh",
    "symphony.workspace.remote", "symphony.hosts.sandbox.remote", "symphony.config.kubernetes",
    "symphony_adapters.local.pulls", "symphony.observability.snapshot",
    "symphony.observability.metrics", "symphony.workspace.worktrees", "symphony.gateway.usage",
    "unicodedata",
)  # fmt: skip
"""What a daemon on a local board with the codex agent and no HTTP server has no use for: the
HTTP client, the live table, the web stack and review page, the other agents, the senders, and
(on Linux, where the daemon reads inotify itself) the portable file watch."""

_DAEMON = """\
import atexit, json, runpy, sys, types
into = sys.argv[1]
def dump():
    waiting = [n for n, m in sys.modules.items() if type(m) is not types.ModuleType]
    with open(into, "w") as out:
        json.dump({"loaded": sorted(sys.modules), "waiting": sorted(waiting)}, out)
atexit.register(dump)
sys.argv = ["symphony", sys.argv[2], "--no-tui"]
runpy.run_module("symphony", run_name="__main__")
"""


@pytest.mark.slow
def test_a_local_board_daemon_loads_only_what_its_workflow_uses(tmp_path: Path) -> None:
    board = tmp_path / "board"
    board.mkdir()
    (board / "NEW-1.md").write_text("---\ntitle: New\nstate: Todo\n---\nDo it.\n")
    record, modules = tmp_path / "agent.jsonl", tmp_path / "modules.json"
    config = {
        "tracker": {"kind": "local", "provider": {"path": "board"},
                    "active_states": ["Todo"], "terminal_states": ["Done"]},
        "workspace": {"root": "workspaces"},
        "agent": {"env_passthrough": ["FAKE_AGENT_*"]},
        "codex": {"command": f"{sys.executable} {FAKE_AGENT}"},
    }  # fmt: skip
    workflow = tmp_path / "WORKFLOW.md"
    workflow.write_text(f"---\n{json.dumps(config)}\n---\nWork on {{{{ issue.identifier }}}}\n")
    env = {**os.environ, "FAKE_AGENT_RECORD": str(record), "FAKE_AGENT_SCENARIO": "hang"}
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON, str(modules), str(workflow)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "turn/start" not in (record.read_text() if record.exists() else ""):
            assert daemon.poll() is None, daemon.stderr.read().decode() if daemon.stderr else ""
            assert time.monotonic() < deadline, "the agent never got its turn"
            time.sleep(0.02)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    dumped = json.loads(modules.read_text())
    loaded = set(dumped["loaded"])
    assert {"symphony.agents.codex", "symphony.daemon.orchestrator", "liquid"} <= loaded
    unwanted = sorted(m for m in loaded if m.startswith(NOT_FOR_A_LOCAL_CODEX_DAEMON))
    assert unwanted == []
    assert set(LOADED_ON_USE) <= set(dumped["waiting"])  # a plain prompt never ran them


def test_check_imports_nothing_of_the_daemon_the_store_or_the_agents_sessions(
    tmp_path: Path,
) -> None:
    (tmp_path / "board").mkdir()
    (tmp_path / "board" / "NEW-1.md").write_text("---\ntitle: New\nstate: Todo\n---\nDo it.\n")
    config = {"tracker": {"kind": "local", "provider": {"path": "board"}},
              "codex": {"command": f"{sys.executable} {FAKE_AGENT}"}}  # fmt: skip
    workflow = tmp_path / "WORKFLOW.md"
    workflow.write_text(f"---\n{json.dumps(config)}\n---\nWork on {{{{ issue.identifier }}}}\n")
    loaded = _imported_by("check", str(workflow))
    assert {"symphony.cli.check", "symphony.tracker.contract", "liquid"} <= loaded
    unwanted = ("symphony.daemon", "symphony.store", "symphony.observability.server",
                "symphony.agents.codex", "symphony.agents.claude", "symphony.agents.acp",
                "httpx", "uvicorn", "starlette", "rich", "greenlet", "sqlite3")  # fmt: skip
    assert sorted(m for m in loaded if m.startswith(unwanted)) == []

"""The command line imports what its subcommand uses: `--help` and `--version` load nothing of
the daemon, the store, the web app, an agent backend or the heavy libraries, in a fresh
interpreter (what a user's shell starts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "symphony.daemon", "symphony.store", "symphony.observability", "symphony.agents",
    "symphony.gateway", "symphony.tracker", "httpx", "structlog", "liquid", "yaml", "rich",
    "uvicorn", "starlette", "sqlite3", "uvloop",
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

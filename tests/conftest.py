"""Suite-wide fixtures: every test runs with a home folder of its own.

A temporary HOME keeps the machine's login profile out of every `bash -lc` a test starts (an
agent, a hook, a gate): a profile that runs `pyenv rehash` leaves its lock file behind when a
test kills the shell mid-profile, and every later login shell then waits a minute for it. It
also keeps the machine's git, codex and claude settings out of the tests; git gets an identity
of its own so that commits work on a machine that has none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from tests.cli_runner import Cli, InProcessCli

GIT_IDENTITY = "[user]\n\tname = Symphony Tests\n\temail = tests@symphony.invalid\n"


@pytest.fixture(autouse=True)
def hermetic_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text(GIT_IDENTITY)
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(autouse=True)
def plain_log_tracebacks() -> None:
    """Where a test leaves logging as structlog sets it up by default, an exception is logged
    with a plain traceback: the default draws it with rich, locals included, which takes a
    second or more per logged exception. Tests read the records, not the drawing."""
    if structlog.is_configured():
        return
    *processors, renderer = structlog.get_config()["processors"]
    if isinstance(renderer, structlog.dev.ConsoleRenderer):
        plain = structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        structlog.configure(processors=[*processors, plain])


@pytest.fixture
def symphony_cli(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The `symphony` command, run in this process (see `tests.cli_runner`)."""
    return InProcessCli(capfd, monkeypatch)

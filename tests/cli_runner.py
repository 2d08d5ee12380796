"""The `symphony` command run in the test's own process, as a subprocess would see it.

`symphony_cli("check", cwd=folder)` (the suite's `symphony_cli` fixture) runs `symphony check`
in `folder` and returns its exit code and what it printed. Starting a Python process per
command costs about a second; calling `symphony.cli.main.main` costs milliseconds. Tests of
what only a process shows (signals, a daemon running while another command reads its store,
the installed console script) start one instead, in tests/e2e.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
import structlog


@dataclass(frozen=True)
class CliResult:
    """What a `symphony` command printed and the code it exited with."""

    returncode: int
    stdout: str
    stderr: str


class Cli(Protocol):
    def __call__(
        self,
        *args: str,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        unset: tuple[str, ...] = (),
    ) -> CliResult: ...


class InProcessCli:
    """`symphony ARGS` in `cwd`, for that one command with `unset` removed from the test's
    environment and then `env` set on top of it.

    Output is captured at the file descriptors, so what a child process (an editor, git)
    prints is the command's too. What the command may change for the whole process (the
    logging set-up, the collector's thresholds) is put back after it.
    """

    def __init__(self, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capfd = capfd
        self.monkeypatch = monkeypatch

    def __call__(
        self,
        *args: str,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        unset: tuple[str, ...] = (),
    ) -> CliResult:
        # Imported on first use: every test loads this module (through conftest), and most
        # never run the command.
        from symphony.cli.main import main

        logging = structlog.get_config()
        thresholds = gc.get_threshold()
        self.capfd.readouterr()  # what the test printed before is not the command's
        with self.monkeypatch.context() as patch:
            patch.chdir(cwd)
            for name in unset:
                patch.delenv(name, raising=False)
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            try:
                code = main(list(args))
            except SystemExit as exit:  # argparse: --version, --help and usage errors
                code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
                if isinstance(exit.code, str):
                    print(exit.code, file=sys.stderr)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                structlog.configure(**logging)
                gc.set_threshold(*thresholds)
        out, err = self.capfd.readouterr()
        return CliResult(code, out, err)

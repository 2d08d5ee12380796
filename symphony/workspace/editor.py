"""Opening a ticket's workspace in a person's editor (`symphony open`, the dashboard).

The editor is `editor.command` from WORKFLOW.md, else `$VISUAL`, else `$EDITOR`; it is run as
its words followed by the workspace's path. Without any, `symphony open` prints the path, and
the dashboard suggests `code <path>`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from symphony.config.sections import Settings

SUGGESTED = "code"
"""What the dashboard suggests when no editor is configured anywhere."""


def editor_words(settings: Settings, environ: Mapping[str, str]) -> list[str] | None:
    """The editor command as words, or None when none is set (or it cannot be parsed)."""
    for command in (settings.editor.command, environ.get("VISUAL"), environ.get("EDITOR")):
        if command and command.strip():
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            if words:
                return words
    return None


def open_command(words: Sequence[str] | None, path: Path) -> str:
    """The command line that opens `path`, for a person to copy."""
    return shlex.join([*(words or [SUGGESTED]), str(path)])

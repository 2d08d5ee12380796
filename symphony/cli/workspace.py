"""`symphony open ID` and `symphony memory`: a ticket's workspace, and the notes kept for
later tickets."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from symphony.base.exits import EXIT_FAILED, EXIT_OK
from symphony.base.secrets import SecretMasker
from symphony.cli import loop
from symphony.config.load import load_settings
from symphony.memory import Listing, memory_of
from symphony.workspace.editor import editor_words
from symphony.workspace.git import git_output
from symphony.workspace.local import WorkspaceManager


def open_workspace(args: argparse.Namespace) -> int:
    """Open a ticket's workspace in the editor, or print where it is."""
    settings = load_settings(args.workflow)
    workspaces = WorkspaceManager(settings.workspace.root, settings.hooks, env={})
    path = workspaces.owned_path(args.issue)
    if path is None:
        print(
            f"symphony: no workspace for {args.issue!r} under {settings.workspace.root} (the "
            "ticket has not run yet, its workspace was removed, or it is not symphony's)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    branch = loop.run(git_output(path, dict(os.environ), "rev-parse", "--abbrev-ref", "HEAD"))
    words = editor_words(settings, os.environ)
    if words is None:
        print(path)
        if branch:
            print(f"branch {branch.strip()}")
        return EXIT_OK
    try:
        return subprocess.run([*words, str(path)], check=False).returncode
    except OSError as exc:
        print(f"symphony: cannot run the editor {words[0]!r}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def list_memory(args: argparse.Namespace) -> int:
    """List the notes kept for later tickets, newest first."""
    settings = load_settings(args.workflow)
    memory = memory_of(settings, SecretMasker())  # notes are masked when they are written
    if memory is None:
        print("memory is off (memory.enabled: false)")
        return EXIT_OK
    print("\n".join(Listing(memory.folder, memory.notes()).lines()))
    return EXIT_OK

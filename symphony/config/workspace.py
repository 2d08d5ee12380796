"""`workspace:`: where each ticket's folder lives, what its changes are compared against, and
whether it starts empty or as a git worktree of a shared repository (`strategy: worktree`).

The root is refused when deleting a ticket's folder there could delete a person's own files
(`check_workspace_root`). `symphony.workspace` makes and removes the folders.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from symphony.config.fields import INVALID_CONFIG, ConfigError, resolve_path

WORKSPACE_KEYS = ("root", "base_ref", "strategy", "repository", "base", "branch")
DEFAULT_BRANCH = "symphony/{{ issue.identifier | slugify }}"


@dataclass(frozen=True, slots=True)
class WorktreeSettings:
    """`strategy: worktree`: each ticket's workspace is a git worktree, on a branch of its own, of a
    shared mirror of `repository`."""

    repository: str
    """A local path (already resolved) or a URL."""
    base: str | None = None
    """What new branches start from: a branch of the repository (`main`, `origin/main`) or a
    commit; None: the repository's default branch."""
    branch: str = DEFAULT_BRANCH


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    """`workspace:`: where each ticket's folder lives, what its changes are compared against, and
    whether it starts empty or as a git worktree."""

    root: Path
    base_ref: str | None = None
    """What a ticket's changes are compared against in its evidence (`git diff <base>...HEAD`);
    None: the commit the workspace was at when it was created."""
    worktrees: WorktreeSettings | None = None
    """`strategy: worktree`: where the shared mirror comes from; None: `empty`."""


def parse_workspace(
    raw: Mapping[str, Any], workflow_dir: Path, environ: Mapping[str, str]
) -> WorkspaceSettings:
    """`workspace.root` and `workspace.base_ref`. The strategy is `parse_worktrees`'s: the
    loader reads it later, after the worker hosts, which keeps the order mistakes are reported
    in."""
    root_value = raw.get("root")
    if root_value is None:
        root = Path(tempfile.gettempdir()) / "symphony_workspaces"
    elif isinstance(root_value, str) and root_value.strip():
        root = resolve_path(root_value.strip(), workflow_dir, environ, "workspace.root")
    else:
        raise ConfigError(INVALID_CONFIG, "workspace.root must be a path string")
    check_workspace_root(root, workflow_dir, environ)
    base_ref = raw.get("base_ref")
    if base_ref is not None and (not isinstance(base_ref, str) or not base_ref.strip()):
        raise ConfigError(INVALID_CONFIG, "workspace.base_ref must be a git ref, e.g. main")
    return WorkspaceSettings(root=root, base_ref=base_ref.strip() if base_ref else None)


def check_workspace_root(root: Path, workflow_dir: Path, environ: Mapping[str, str]) -> None:
    """Refuse a root whose ticket folders could be a person's own: `/`, the home folder, or the
    WORKFLOW.md folder or any folder above it (symlinks resolved on every side)."""
    real = Path(os.path.realpath(root))
    homes = {Path(os.path.realpath(Path.home()))}
    if environ.get("HOME"):
        homes.add(Path(os.path.realpath(environ["HOME"])))
    if real == Path(real.anchor):
        why = "the file system root"
    elif real in homes:
        why = "your home folder"
    elif real == Path(os.path.realpath(workflow_dir)):
        why = "the folder of WORKFLOW.md"
    elif Path(os.path.realpath(workflow_dir)).is_relative_to(real):
        why = "a folder above WORKFLOW.md"
    else:
        return
    raise ConfigError(
        INVALID_CONFIG,
        f"workspace.root {root} is {why}; workspaces must live in a folder of their own "
        "(for example workspace.root: .symphony/workspaces), since every ticket gets a folder "
        "there that symphony may later delete",
    )


def parse_worktrees(
    raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]
) -> WorktreeSettings | None:
    """`workspace.strategy` and what `worktree` needs; None: `empty`, each folder starts so."""
    strategy = raw.get("strategy", "empty")
    if strategy == "empty":
        for key in ("repository", "base", "branch"):
            if key in raw:
                raise ConfigError(
                    INVALID_CONFIG, f"workspace.{key} needs workspace.strategy: worktree"
                )
        return None
    if strategy != "worktree":
        raise ConfigError(INVALID_CONFIG, "workspace.strategy must be `empty` or `worktree`")
    repository = raw.get("repository")
    if not isinstance(repository, str) or not repository.strip():
        raise ConfigError(
            INVALID_CONFIG,
            "workspace.strategy: worktree needs workspace.repository (a local clone or a URL)",
        )
    repository = repository.strip()
    # A URL or an scp-like `user@host:path` is the remote's; anything else is a local clone.
    if "://" not in repository and not re.match(r"^[\w.-]+@[\w.-]+:", repository):
        repository = str(resolve_path(repository, base_dir, environ, "workspace.repository"))
    texts = {}
    for key in ("base", "branch"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(INVALID_CONFIG, f"workspace.{key} must be a non-empty string")
        texts[key] = value.strip() if isinstance(value, str) else None
    return WorktreeSettings(repository, texts["base"], texts["branch"] or DEFAULT_BRANCH)

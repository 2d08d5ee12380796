"""What git says about a ticket's workspace: the facts its evidence and footprint are built from.

Each question is one bounded git subprocess in the workspace (`symphony.workspace.git`); the
answers are plain values of the core (`WorkspaceFacts`, `MergeCheck`, a set of paths), which
builds the evidence and decides overlaps with them. The evidence file the daemon writes into the
workspace (`.symphony/evidence.json`) is read and written here too.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from symphony.core.evidence import MergeCheck, WorkspaceFacts
from symphony.core.footprint import MAX_FILES, normalize_path
from symphony.workspace.git import LOCAL_GIT, Git, git_output, is_own_work_tree

EVIDENCE_DIR = ".symphony"
EVIDENCE_FILE = "evidence.json"
MAX_COMMITS = 20
MAX_DIFF_STAT_CHARS = 4_000
MAX_CONFLICT_FILES = 20
MAX_OTHER_BRANCHES = 20
"""Other open tickets' branches checked for conflicts at one hand-off, at most."""


async def workspace_facts(
    path: Path,
    *,
    base_ref: str | None,
    start_commit: str | None,
    env: Mapping[str, str],
    git: Git = LOCAL_GIT,
) -> WorkspaceFacts | None:
    """What git says about the workspace, or None when it is not a git work tree."""
    if not await is_own_work_tree(path, env, git):
        return None

    async def ask(*args: str) -> str | None:
        return await git_output(path, env, *args, git=git)

    head = (await ask("rev-parse", "--verify", "--quiet", "HEAD") or "").strip()
    branch = (await ask("rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    status = await ask("status", "--porcelain", "--untracked-files=all") or ""
    uncommitted = sum(1 for line in status.splitlines() if line.strip())
    if base_ref is not None:
        resolved = await ask("rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}")
        base = base_ref if resolved else None
        source = "workspace.base_ref" if resolved else f"workspace.base_ref {base_ref!r} not found"
    else:
        base = start_commit
        source = "where the workspace started" if start_commit else "start commit not recorded"
    facts = WorkspaceFacts(
        branch if branch and branch != "HEAD" else None,
        head or None,
        base,
        source,
        uncommitted=uncommitted,
    )
    if base is None or not head:
        return facts
    log = await ask("log", f"--max-count={MAX_COMMITS + 1}", "--format=%h %s", f"{base}..HEAD")
    commits = [line for line in (log or "").splitlines() if line.strip()]
    total = await ask("rev-list", "--count", f"{base}..HEAD")
    count = int(total.strip()) if total and total.strip().isdigit() else len(commits)
    stat = await ask("diff", "--stat", f"{base}...HEAD") or ""
    if len(stat) > MAX_DIFF_STAT_CHARS:
        stat = stat[:MAX_DIFF_STAT_CHARS] + "\n... (diff stat cut)"
    return WorkspaceFacts(
        facts.branch,
        facts.head,
        base,
        source,
        tuple(commits[:MAX_COMMITS]),
        max(count - min(len(commits), MAX_COMMITS), 0),
        stat,
        uncommitted,
    )


async def merge_check(
    path: Path, onto: str, commit: str, env: Mapping[str, str], git: Git = LOCAL_GIT
) -> MergeCheck:
    """Merge HEAD with `commit` in memory (`git merge-tree --write-tree`): nothing in the
    workspace or its repository changes. `onto` names the other side for people."""
    run = await git.run(
        path, "merge-tree", "--write-tree", "--name-only", "--no-messages", "HEAD", commit,
        env=env,
    )  # fmt: skip
    if run.returncode == 0:
        return MergeCheck(onto, True)
    lines = run.out.splitlines()
    # A conflict exits 1 after the tree's id; so does a commit git cannot find, without one.
    if run.returncode == 1 and lines and re.fullmatch(r"[0-9a-f]{40,64}", lines[0].strip()):
        files = [line.strip() for line in lines[1:] if line.strip()]
        return MergeCheck(onto, False, tuple(dict.fromkeys(files))[:MAX_CONFLICT_FILES])
    return MergeCheck(onto, None)


async def merge_checks(
    path: Path,
    *,
    base: tuple[str, str] | None,
    others: Sequence[tuple[str, Path]],
    env: Mapping[str, str],
    git: Git = LOCAL_GIT,
) -> tuple[MergeCheck | None, tuple[MergeCheck, ...]]:
    """Whether HEAD merges onto `base` ((name, ref)), and which `others` ((identifier,
    workspace)) conflict with it. Another ticket's branch is seen only when both workspaces
    share one repository (`workspace.strategy: worktree`); the others are skipped."""
    onto = await merge_check(path, base[0], base[1], env, git) if base is not None else None
    conflicts = []
    for identifier, workspace in others[:MAX_OTHER_BRANCHES]:
        head = await git_output(workspace, env, "rev-parse", "--verify", "--quiet", "HEAD", git=git)
        if not head:
            continue
        check = await merge_check(path, identifier, head.strip(), env, git)
        if check.clean is False:
            conflicts.append(check)
    return onto, tuple(conflicts)


def write_evidence_file(workspace: Path, evidence: Mapping[str, Any]) -> Path | None:
    """Write the bundle to `<workspace>/.symphony/evidence.json`; None when the workspace is
    gone. The folder ignores itself in git, so an agent's `git add -A` never commits it."""
    folder = workspace / EVIDENCE_DIR
    if not workspace.is_dir():
        return None
    folder.mkdir(exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")
    target = folder / EVIDENCE_FILE
    temp = folder / f".{EVIDENCE_FILE}.tmp"
    temp.write_text(json.dumps(evidence, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temp.replace(target)
    return target


def read_evidence_file(workspace: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((workspace / EVIDENCE_DIR / EVIDENCE_FILE).read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data
    return None


async def changed_files(
    path: Path, base: str | None, env: Mapping[str, str], git: Git = LOCAL_GIT
) -> frozenset[str]:
    """The paths the workspace's branch changed since `base` (committed) and those changed but
    not committed; empty when the workspace is not a git work tree."""
    if not await is_own_work_tree(path, env, git):
        return frozenset()

    async def ask(*args: str) -> str | None:
        return await git_output(path, env, *args, git=git)

    found: set[str] = set()
    if base is not None:
        committed = await ask("diff", "--name-only", "-z", f"{base}...HEAD")
        found.update((committed or "").split("\0"))
    # `-z`: names as they are (never quoted), and a rename's new name first, its old one after.
    status = (await ask("status", "--porcelain", "-z", "--untracked-files=all") or "").split("\0")
    i = 0
    while i < len(status):
        entry = status[i]
        i += 1
        if len(entry) > 3:
            found.add(entry[3:])
            if entry[0] in "RC":
                i += 1  # the old name
    # The daemon's own files in the workspace are not the ticket's work.
    paths = sorted(p for p in map(normalize_path, found) if p and not p.startswith(".symphony/"))
    return frozenset(paths[:MAX_FILES])

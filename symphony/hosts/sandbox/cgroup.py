"""The process limit of a root daemon's bubblewrap sandbox, where no rlimit holds.

The kernel does not enforce RLIMIT_NPROC on processes whose real user is root, and a root
daemon's bwrap maps the sandbox's user to root outside, so `prlimit --nproc` bounds nothing
there. As root, each sandboxed process therefore starts in a cgroup of its own, under one
folder of symphony's in the pids hierarchy (cgroup v1's `pids` mount, or v2's unified one),
with `pids.max` set to the stage's `pids`; every process the sandbox starts is counted in it.
A cgroup is removed when its run ends, and the next run removes those of daemons that are gone.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from symphony.base.errors import ErrorCategory, SymphonyError

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "symphony-sandbox"
SANDBOX_UNAVAILABLE = ErrorCategory.SANDBOX_UNAVAILABLE
"""The category of every reason a sandbox cannot be made (`symphony.hosts.sandbox.host` says
it too)."""


def pids_hierarchy(root: Path = CGROUP_ROOT) -> Path | None:
    """Where pids cgroups are made: v1's `pids` mount, v2's root when it offers `pids`."""
    v1 = root / "pids"
    if (v1 / "cgroup.procs").exists():
        return v1
    with contextlib.suppress(OSError):
        if "pids" in (root / "cgroup.controllers").read_text().split():
            return root
    return None


def make_pids_group(name: str, limit: int, root: Path = CGROUP_ROOT) -> Path:
    """A new cgroup `<hierarchy>/symphony-sandbox/<name>` holding at most `limit` processes;
    raises SymphonyError (`sandbox_unavailable`) saying why it cannot be made."""
    hierarchy = pids_hierarchy(root)
    if hierarchy is None:
        raise SymphonyError(
            SANDBOX_UNAVAILABLE,
            f"sandbox.pids cannot be enforced for a daemon running as root: no pids cgroup "
            f"controller under {root}; run the daemon as an unprivileged user",
        )
    parent = hierarchy / PARENT
    try:
        parent.mkdir(exist_ok=True)
        if hierarchy == root:  # v2: the controller must be handed down to each level
            _enable_pids(root)
            _enable_pids(parent)
        group = parent / name
        group.mkdir()
        (group / "pids.max").write_text(f"{limit}\n")
    except OSError as exc:
        raise SymphonyError(
            SANDBOX_UNAVAILABLE,
            f"sandbox.pids cannot be enforced for a daemon running as root: cannot make a "
            f"pids cgroup under {parent}: {exc.strerror or exc}",
        ) from None
    return group


def _enable_pids(folder: Path) -> None:
    control = folder / "cgroup.subtree_control"
    if "pids" not in control.read_text().split():
        control.write_text("+pids\n")


def remove_group(group: Path) -> None:
    """Remove a cgroup once its processes are gone (an empty cgroup's folder is removed with
    rmdir; its files go with it)."""
    with contextlib.suppress(OSError):
        group.rmdir()


def remove_stale_groups(prefixes: list[str], root: Path = CGROUP_ROOT) -> None:
    """The cgroups of runs whose daemon is gone (named `<run folder>-<n>`)."""
    hierarchy = pids_hierarchy(root)
    if hierarchy is None or not prefixes:
        return
    with contextlib.suppress(OSError):
        for group in (hierarchy / PARENT).iterdir():
            if any(group.name.startswith(f"{prefix}-") for prefix in prefixes):
                remove_group(group)


def enter_group_argv(group: Path, argv: list[str]) -> list[str]:
    """`argv` started inside `group`: a shell writes its own pid into the cgroup, then
    becomes the command, so the command and all it starts are counted there."""
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group), *argv]


def needed() -> bool:
    """Whether the sandbox needs a cgroup for its process limit: only as root."""
    return os.getuid() == 0

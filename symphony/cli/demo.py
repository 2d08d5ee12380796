"""`symphony demo [FOLDER]`: the quickstart, from the installed package, in a folder you choose.

It lays the quickstart out in FOLDER the way the repository holds it (WORKFLOW.md beside
`examples/quickstart/`: the prompts, the demonstration agents, the board and the sample
project, all shipped in the `symphony_examples` package), prepares its state folder
(`.symphony/`: the board, and the sample project as a bare repository standing in for a code
host's), then runs the daemon there as `scripts/quickstart` does: serving the dashboard and the
review page on a free loopback port with a token of its own, and printing their links. What
already exists in FOLDER is kept, so running it again goes on where the last run stopped.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from symphony.base.errors import ErrorCategory, SymphonyError

DEMO_FAILED = ErrorCategory.INIT_FAILED
QUICKSTART = "quickstart"
WORKFLOW_SOURCE = "workflow.md"
"""The quickstart's WORKFLOW.md as the package holds it."""
SKIPPED = {"__pycache__", WORKFLOW_SOURCE}


class DemoError(SymphonyError):
    """The demonstration could not be laid out; what existed was left as it was."""


@dataclass(slots=True)
class Laid:
    """What `lay_out` wrote, and what it found and kept."""

    workflow: Path
    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def demo_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symphony demo",
        description=(
            "Run the quickstart (a local board, demonstration agents, a sample project) in "
            "FOLDER, serving the dashboard and the review page. Other options go to the daemon "
            "(for example --port 8080)."
        ),
    )
    parser.add_argument(
        "folder",
        nargs="?",
        default=Path("symphony-demo"),
        type=Path,
        help="where to lay the demonstration out and run it (default: ./symphony-demo)",
    )
    return parser


def demo(argv: Sequence[str], run: Callable[[list[str]], int]) -> int:
    """Lay the demonstration out and run the daemon on it with `run` (the main command's
    argument list); returns its exit code."""
    args, rest = demo_parser().parse_known_args(list(argv))
    laid = lay_out(args.folder)
    where = laid.workflow.parent
    if laid.written:
        print(f"demo: the quickstart is in {where} ({len(laid.written)} files written)")
    if laid.kept:
        print(f"demo: kept {len(laid.kept)} file(s) that were already in {where}")
    print(
        f"demo: the board is {where / '.symphony' / 'board'} (edit a ticket's `state:` to steer it)"
    )
    daemon = [str(laid.workflow), "--logs-root", str(laid.workflow.parent / ".symphony" / "logs")]
    if not any(word == "--port" or word.startswith("--port=") for word in rest):
        daemon += ["--port", "0"]
    if not os.environ.get("SYMPHONY_TOKEN"):
        # A token of this run's own: the printed login link carries it (in its fragment).
        os.environ["SYMPHONY_TOKEN"] = secrets.token_urlsafe(24)
        daemon.append("--show-token")
    os.environ.setdefault("SYMPHONY_SANDBOX", _sandbox_kind())
    return run([*daemon, *rest])


def lay_out(folder: Path) -> Laid:
    """The quickstart in `folder`: WORKFLOW.md, examples/quickstart/ and .symphony/ (the board
    and the sample project's bare repository). Files that exist are kept."""
    folder = folder.expanduser().absolute()
    source = resources.files("symphony_examples") / QUICKSTART
    laid = Laid(folder / "WORKFLOW.md")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _copy(source / WORKFLOW_SOURCE, laid.workflow, laid)
        examples = folder / "examples" / QUICKSTART
        _copy_tree(source, examples, laid)
        state = folder / ".symphony"
        if not (state / "board").is_dir():
            _copy_tree(source / "board", state / "board", laid)
        _bare_repository(examples / "sample-repo", state / "sample-repo.git", laid)
    except OSError as exc:
        raise DemoError(
            DEMO_FAILED, f"cannot write {exc.filename or folder}: {exc.strerror}"
        ) from None
    return laid


def _copy_tree(source: Traversable, target: Path, laid: Laid) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for item in sorted(source.iterdir(), key=lambda t: t.name):
        if item.name in SKIPPED:
            continue
        if item.is_dir():
            _copy_tree(item, target / item.name, laid)
        else:
            _copy(item, target / item.name, laid)


def _copy(source: Traversable, target: Path, laid: Laid) -> None:
    try:
        with target.open("xb") as handle:  # "x": never replace what is there
            handle.write(source.read_bytes())
    except FileExistsError:
        laid.kept.append(target)
        return
    laid.written.append(target)


def _bare_repository(project: Path, remote: Path, laid: Laid) -> None:
    """The sample project committed on `main` of a bare repository at `remote` (built aside
    and moved in place, so an interrupted run leaves no half-made repository)."""
    if (remote / "HEAD").is_file():
        laid.kept.append(remote)
        return
    if remote.exists():
        raise DemoError(
            DEMO_FAILED, f"{remote} exists but is not a git repository; move it away and run again"
        )
    partial = remote.with_name(remote.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    inside = {**os.environ, "GIT_DIR": str(partial), "GIT_WORK_TREE": str(project)}
    steps = [
        (["git", "init", "--quiet", "--bare", "--initial-branch=main", str(partial)], None),
        (["git", "add", "-A"], inside),
        (["git", "-c", "user.name=symphony", "-c", "user.email=symphony@localhost",
          "commit", "--quiet", "-m", "Sample project"], inside),
    ]  # fmt: skip
    for step, env in steps:
        try:
            done = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise DemoError(DEMO_FAILED, "git is not installed; the demo needs it") from None
        if done.returncode != 0:
            said = done.stderr.strip() or f"exit {done.returncode}"
            raise DemoError(DEMO_FAILED, f"cannot make {remote}: `{' '.join(step)}`: {said}")
    (partial / "index").unlink(missing_ok=True)
    partial.rename(remote)
    laid.written.append(remote)


def _sandbox_kind() -> str:
    """`bwrap` where this machine can make the plan stage's sandbox, else `none` (said)."""
    from symphony.config.sandbox import SandboxKind
    from symphony.hosts.sandbox.probe import sandbox_problem

    problem = sandbox_problem(SandboxKind.BWRAP)
    if problem is None:
        print("demo: the plan stage runs in a bubblewrap sandbox (no network, read-only worktree)")
        return "bwrap"
    print(f"demo: the plan stage runs unsandboxed: {problem}")
    return "none"

"""`symphony init`: write a commented, working WORKFLOW.md for one tracker, and never overwrite.

The starting points are the ready workflows of `examples/<tracker>/` (installed as the
`symphony_examples` package), so what `init` writes is exactly what the repository documents and
tests. For the local board the sample ticket folder comes along.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from symphony.base.errors import ErrorCategory, SymphonyError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

INIT_FAILED = ErrorCategory.INIT_FAILED

TRACKERS: dict[str, str] = {
    "local": "a folder of Markdown tickets next to WORKFLOW.md (no account needed)",
    "github": "issues of one GitHub repository, states as labels",
    "github-projects": "items of a GitHub Projects (v2) board, states as its Status field",
    "linear": "issues of a Linear project or team",
    "gitlab": "issues of one GitLab project, states as scoped labels",
    "kaiten": "cards of one Kaiten board, states as its columns",
}

_NEXT_STEP: dict[str, str] = {
    "local": "",
    "github": "set tracker.provider.repository and repository.slug, and export GITHUB_TOKEN",
    "github-projects": "set tracker.provider.project and export GITHUB_TOKEN",
    "linear": "set tracker.provider.project_slug (or team_key) and repository.slug, and export "
    "LINEAR_API_KEY and GITHUB_TOKEN",
    "gitlab": "set tracker.provider.project and repository.slug, and export GITLAB_TOKEN",
    "kaiten": "set tracker.provider.domain, board_id and repository.slug, and export KAITEN_TOKEN "
    "and GITHUB_TOKEN",
}


class InitError(SymphonyError):
    """The starter workflow could not be written; nothing that existed was changed."""


@dataclass(frozen=True, slots=True)
class Written:
    """What `init` wrote, what it kept as it was, and the step to take next."""

    workflow: Path
    others: tuple[Path, ...]
    kept: tuple[Path, ...]
    """Files of the sample that already existed and were left as they were."""
    next_step: str


def init_workflow(target: Path, tracker: str) -> Written:
    """Write the `tracker` starter to `target` (a WORKFLOW.md path, or a folder to hold one).

    Raises `InitError` when the tracker is unknown or WORKFLOW.md already exists; a sample
    ticket that already exists is kept, not replaced.
    """
    if tracker not in TRACKERS:
        raise InitError(
            INIT_FAILED, f"unknown tracker {tracker!r}; choose one of {', '.join(TRACKERS)}"
        )
    workflow = target if target.suffix.lower() == ".md" else target / "WORKFLOW.md"
    workflow = workflow.expanduser().absolute()
    from importlib import resources  # here: every command's parser imports this module

    source = resources.files("symphony_examples") / tracker
    others: list[Path] = []
    kept: list[Path] = []
    try:
        workflow.parent.mkdir(parents=True, exist_ok=True)
        _create(workflow, (source / "WORKFLOW.md").read_bytes())
        board = source / "board"
        if board.is_dir():
            folder = workflow.parent / "board"
            folder.mkdir(exist_ok=True)
            for ticket in sorted(board.iterdir(), key=lambda t: t.name):
                path = folder / ticket.name
                if _create_if_absent(path, ticket):
                    others.append(path)
                else:
                    kept.append(path)
    except FileExistsError:
        raise InitError(
            INIT_FAILED,
            f"{workflow} already exists and was left as it is; move it away or give another "
            "path (symphony init --tracker KIND PATH)",
        ) from None
    except OSError as exc:
        raise InitError(
            INIT_FAILED, f"cannot write {exc.filename or workflow}: {exc.strerror}"
        ) from None
    return Written(workflow, tuple(others), tuple(kept), _NEXT_STEP[tracker])


def _create(path: Path, data: bytes) -> None:
    with path.open("xb") as handle:  # "x": never replace what is there
        handle.write(data)


def _create_if_absent(path: Path, source: Traversable) -> bool:
    try:
        _create(path, source.read_bytes())
    except FileExistsError:
        return False
    return True

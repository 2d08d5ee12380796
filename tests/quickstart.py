"""The quickstart's layout in a folder of a test's own: WORKFLOW.md, the examples it names, and
the state folder `scripts/prepare-quickstart` makes (the board and the sample project's bare
repository), prepared by that very script."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def prepare_quickstart(root: Path) -> Path:
    """Lay the quickstart out in `root`; returns its WORKFLOW.md."""
    shutil.copy(REPO / "WORKFLOW.md", root / "WORKFLOW.md")
    (root / "examples").mkdir(exist_ok=True)
    shutil.copytree(REPO / "examples" / "quickstart", root / "examples" / "quickstart")
    subprocess.run(
        [str(REPO / "scripts" / "prepare-quickstart"), str(root / ".symphony")],
        check=True,
        capture_output=True,
    )
    return root / "WORKFLOW.md"

"""Where the providers' published API schemas are: `../shared/tracker-schemas` beside the
repository, or `$SYMPHONY_SHARED_DIR/tracker-schemas`. Contract tests skip, with the reason, when
they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tracker_schemas() -> Path:
    shared = Path(os.environ.get("SYMPHONY_SHARED_DIR") or REPO.parent / "shared")
    folder = shared / "tracker-schemas"
    if not folder.is_dir():
        pytest.skip(f"provider schemas not found at {folder} (set SYMPHONY_SHARED_DIR)")
    return folder

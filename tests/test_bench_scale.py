"""The scale benchmark keeps working: its short mode runs to the end (its figures are for
people; nothing here judges them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_the_scale_benchmark_runs_in_its_short_mode() -> None:
    done = subprocess.run(
        [sys.executable, "bench/scale.py", "--short"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.strip().splitlines()[-2:]
    assert header.split()[:2] == ["tickets", "sessions"] and row.split()[:2] == ["2,000", "10"]

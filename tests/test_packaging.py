"""What gets installed: three unambiguously named packages, and a wheel that works on its own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"symphony": "symphony", "symphony_adapters": "adapters"}


def declared() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]  # type: ignore[no-any-return]


def test_every_code_folder_is_an_installed_package_under_a_symphony_name() -> None:
    found = set()
    for name, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert set(declared()["packages"]) == found  # type: ignore[arg-type]
    assert declared()["package-dir"] == {
        "symphony": "symphony",
        "symphony_adapters": "adapters",
    }


def test_nothing_imports_the_adapters_folder_by_its_folder_name() -> None:
    # From the repository root `import adapters` would load a second copy of every adapter.
    pattern = re.compile(r"^\s*(from|import)\s+adapters\b", re.M)
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("symphony", "adapters", "tests", "bench", "examples", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if "node_modules" not in path.parts and pattern.search(path.read_text())
    ]
    assert offenders == []

"""Finding the adapter package a workflow names by its kind (`tracker.kind`, `repository.kind`):
the repository's `adapters/` folder, installed as `symphony_adapters`, one package per kind."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

ADAPTERS_PACKAGE = "symphony_adapters"
"""The import name of the repository's `adapters/` folder (see pyproject.toml)."""

_KIND = re.compile(r"^[a-z][a-z0-9_]*$")


def is_kind_name(kind: str) -> bool:
    """Whether `kind` can name an adapter package (lowercase, a Python name)."""
    return _KIND.match(kind) is not None


def adapter_module(kind: str) -> ModuleType | None:
    """The package `adapters/<kind>`, or None when there is none. A package that exists but
    fails to import (a missing dependency inside it) raises, so the real error is seen."""
    if not is_kind_name(kind):
        return None
    try:
        return importlib.import_module(f"{ADAPTERS_PACKAGE}.{kind}")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"{ADAPTERS_PACKAGE}.{kind}", ADAPTERS_PACKAGE):
            raise
        return None


def available_kinds() -> list[str]:
    """Every adapter package's kind, sorted."""
    package = importlib.import_module(ADAPTERS_PACKAGE)
    return sorted(
        path.parent.name
        for folder in package.__path__
        for path in Path(folder).glob("*/__init__.py")
        if is_kind_name(path.parent.name)
    )

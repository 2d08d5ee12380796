"""How symphony loads the libraries that import, at once, more than symphony uses of them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import LazyLoader
from types import ModuleType

HIDDEN_FROM_STRUCTLOG = ("rich", "greenlet")
"""What structlog takes up whenever it is installed, and symphony has no use for: rich, for the
pretty tracebacks of its development console renderer (about 3 MiB and tens of milliseconds
for every command), and greenlet, for its deprecated greenlet-local context (1 MiB, with the
C++ runtime it links; installed alongside many other packages)."""


def load_structlog() -> None:
    """Loads structlog without the integrations of `HIDDEN_FROM_STRUCTLOG`. Those packages stay
    importable: the live table loads rich when a terminal shows one."""
    if "structlog" in sys.modules:
        return
    hidden = [name for name in HIDDEN_FROM_STRUCTLOG if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it fails at once
    try:
        importlib.import_module("structlog")
    finally:
        for name in hidden:
            del sys.modules[name]


class _Deferring:
    """Finds the named modules where the path finder would, and hands them out with their
    loading deferred: each is executed when something first reads one of its attributes."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = LazyLoader(spec.loader)
        return spec


@contextmanager
def deferred_imports(names: Iterable[str]) -> Iterator[None]:
    """Within the block, an import of one of `names` that is not loaded yet makes the module
    but runs it only when one of its attributes is first read. For libraries that import,
    unconditionally, modules only some of their features use. The module runs on the thread
    that first touches it, so a deferred module is one only the event loop's thread uses."""
    finder = _Deferring(frozenset(names) - set(sys.modules))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)

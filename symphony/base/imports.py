"""How the command line loads the libraries it shares with the daemon."""

from __future__ import annotations

import importlib
import sys

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

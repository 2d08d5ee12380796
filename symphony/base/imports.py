"""How the command line loads the libraries it shares with the daemon."""

from __future__ import annotations

import importlib
import sys


def load_structlog() -> None:
    """Loads structlog without the rich integration it takes up whenever rich is installed
    (pretty tracebacks for its development console renderer, which symphony does not use):
    that costs every command about 3 MiB and tens of milliseconds before it does anything.
    rich itself stays importable: the live table loads it when a terminal shows one."""
    if "structlog" in sys.modules:
        return
    hidden = "rich" not in sys.modules
    if hidden:
        sys.modules["rich"] = None  # type: ignore[assignment]  # an import of it fails at once
    try:
        importlib.import_module("structlog")
    finally:
        if hidden:
            del sys.modules["rich"]

"""Names every layer uses for where work runs, so none has to import the host layer for them."""

from __future__ import annotations

LOCAL = "local"
"""The name of the daemon's own machine wherever a host is named (API, store, logs)."""

HOST_UNREACHABLE = "host_unreachable"
"""The error category of a run or a command that could not reach its SSH host."""

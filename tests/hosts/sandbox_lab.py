"""What the sandbox tests need of this machine: bubblewrap and socat, and user namespaces."""

from __future__ import annotations

import os

import pytest

from symphony.config.sandbox import SandboxKind
from symphony.hosts.sandbox.probe import sandbox_problem


def require_bwrap() -> None:
    """Skip (or, under SYMPHONY_REQUIRE_SANDBOX=1, fail) where bwrap cannot run here."""
    problem = sandbox_problem(SandboxKind.BWRAP)
    if problem is None:
        return
    reason = f"{problem} (scripts/test installs bubblewrap and socat)"
    if os.environ.get("SYMPHONY_REQUIRE_SANDBOX"):
        pytest.fail(reason)
    pytest.skip(reason)

"""What the sandbox tests need of this machine: bubblewrap and socat, podman and runc, and
user namespaces."""

from __future__ import annotations

import os

import pytest

from symphony.config.sandbox import SandboxKind
from symphony.hosts.sandbox.probe import sandbox_problem


def require_sandbox(kind: SandboxKind) -> None:
    """Skip (or, under SYMPHONY_REQUIRE_SANDBOX=1, fail) where `kind` cannot run here."""
    problem = sandbox_problem(kind)
    if problem is None:
        return
    reason = f"{problem} (scripts/test installs bubblewrap, socat, podman and runc)"
    if os.environ.get("SYMPHONY_REQUIRE_SANDBOX"):
        pytest.fail(reason)
    pytest.skip(reason)


def require_bwrap() -> None:
    require_sandbox(SandboxKind.BWRAP)

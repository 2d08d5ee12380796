"""Whether a sandbox kind can start on this machine, and if not, why, in words `check` and a
failed run can show: the program missing, the kernel refusing user namespaces, the image absent.
"""

from __future__ import annotations

import shutil
import subprocess

from symphony.config.sandbox import SandboxKind

PROBE_TIMEOUT_S = 20.0


def sandbox_problem(kind: SandboxKind, image: str | None = None) -> str | None:
    """None when `kind` can start here; otherwise what stands in the way."""
    if kind is SandboxKind.NONE:
        return None
    if kind is SandboxKind.BWRAP:
        return _bwrap_problem()
    return _podman_problem(image)


def _bwrap_problem() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed (Debian and Ubuntu: apt-get install bubblewrap)"
    if shutil.which("socat") is None:
        return (
            "socat is not installed; the sandbox bridges its sockets with it "
            "(apt-get install socat)"
        )
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev", "--", "true"]  # fmt: skip
    failure = _run(argv)
    if failure is not None:
        return f"bwrap cannot make a sandbox here (are user namespaces allowed?): {failure}"
    return None


def _podman_problem(image: str | None) -> str | None:
    podman = shutil.which("podman")
    if podman is None:
        return "podman is not installed (Debian and Ubuntu: apt-get install podman runc)"
    failure = _run([podman, "info", "--format", "{{.Host.OCIRuntime.Name}}"])
    if failure is not None:
        return f"podman cannot run containers here: {failure}"
    if image is not None and _run([podman, "image", "exists", image]) is not None:
        return (
            f"the image {image} is absent; build it with "
            f"`scripts/build-sandbox-image {image}`, or leave sandbox.image unset to run "
            "on this machine's own system folders"
        )
    return None


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    if done.returncode == 0:
        return None
    words = (done.stderr or done.stdout).strip().splitlines()
    return words[-1] if words else f"exit status {done.returncode}"

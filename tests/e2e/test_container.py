"""The container image, built and run with podman offline: the base image comes from a
Debian root filesystem (`scripts/build-base-image`, mmdebstrap), symphony's image from
examples/deploy/Containerfile on it; the quickstart then runs inside, as an unprivileged user
under tini, and its API is read from outside. Skipped with the reason where podman or
mmdebstrap is missing (under SYMPHONY_REQUIRE_IMAGE=1, as in CI, that fails instead)."""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.harness import wait_until
from tests.quickstart import REPO, prepare_quickstart

pytestmark = pytest.mark.slow

BASE = "localhost/symphony-test-base:bookworm"
IMAGE = "localhost/symphony-test:latest"
TOKEN = "container-token-for-the-test"


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        if os.environ.get("SYMPHONY_REQUIRE_IMAGE"):
            pytest.fail(f"{tool} is not installed (scripts/test installs it)")
        pytest.skip(f"{tool} is not installed")


def podman(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """podman as this machine needs it: runc where installed (crun refuses some cgroup
    layouts), cgroupfs without systemd, as the sandbox does."""
    global_flags = ["--runtime", "runc"] if shutil.which("runc") else []
    if not Path("/run/systemd/system").is_dir():
        global_flags += ["--cgroup-manager", "cgroupfs"]
    return subprocess.run(["podman", *global_flags, *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def limits() -> list[str]:
    """Open files and processes within this process's hard limits, and processes at most
    32,768 (what the runtime raises without CAP_SYS_RESOURCE): podman's defaults ask for
    more, which a container here may not raise."""
    flags = []
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        _, hard = resource.getrlimit(which)
        value = 32768 if hard == resource.RLIM_INFINITY else min(hard, 32768)
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    need("podman")
    need("mmdebstrap")
    base = subprocess.run([str(REPO / "scripts" / "build-base-image"), BASE],
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert base.returncode == 0, base.stdout + base.stderr
    # Offline: the image installs symphony and its dependencies from wheels made here.
    context = tmp_path_factory.mktemp("context")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, context / name)
    for name in ("symphony", "adapters", "examples"):
        shutil.copytree(REPO / name, context / name,
                        ignore=shutil.ignore_patterns("__pycache__", "node_modules"))  # fmt: skip
    wheels = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "-w",
         str(context / "wheels"), str(context)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert wheels.returncode == 0, wheels.stderr
    built = podman("build", "--quiet", "-f", str(REPO / "examples" / "deploy" / "Containerfile"),
                   "--build-arg", f"BASE={BASE}", "--build-arg", "WHEELS=wheels",
                   "-t", IMAGE, str(context))  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    return IMAGE


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_quickstart_runs_in_the_image_and_its_api_answers_outside(
    image: str, tmp_path: Path
) -> None:
    root = tmp_path / "quickstart"
    root.mkdir()
    prepare_quickstart(root)
    # The image's user owns what it works on, as a volume would be prepared for it.
    chown = ["chown", "-R", "10001:10001", str(root)]
    owned = subprocess.run(chown if os.geteuid() == 0 else ["podman", "unshare", *chown],
                           capture_output=True, text=True)  # fmt: skip
    assert owned.returncode == 0, owned.stderr
    port, name = free_port(), f"symphony-test-{uuid.uuid4().hex[:8]}"
    started = podman(
        "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8080", *limits(),
        "-v", f"{root}:/work", "-e", f"SYMPHONY_TOKEN={TOKEN}", "-e", "SYMPHONY_SANDBOX=none",
        image, "/work/WORKFLOW.md", "--no-tui", "--log-format", "json", "--port", "8080",
        "--host", "0.0.0.0",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}/"
    try:

        def answers(path: str) -> httpx.Response | None:
            try:
                return httpx.get(url + path, timeout=5)
            except httpx.HTTPError:
                return None

        assert wait_until(lambda: (r := answers("readyz")) is not None and r.status_code == 200,
                          120), podman("logs", name).stderr[-3000:]  # fmt: skip
        assert answers("livez").json() == {"live": True}  # type: ignore[union-attr]

        def plans() -> list[str]:
            got = answers("api/v1/review")
            queue = got.json()["queue"] if got is not None and got.status_code == 200 else []
            return [r["issue_identifier"] for r in queue if r["checkpoint"] == "plan"]

        assert wait_until(lambda: len(plans()) >= 2, 120), podman("logs", name).stderr[-3000:]
        pid1 = podman("exec", name, "cat", "/proc/1/cmdline").stdout.replace("\0", " ")
        user = podman("exec", name, "id", "-u").stdout.strip()
        assert pid1.startswith("tini ") and user == "10001"
        stopped = podman("stop", "--time", "60", name)
        assert stopped.returncode == 0, stopped.stderr
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert code == "0", podman("logs", name).stderr[-3000:]
        assert (root / ".symphony" / "state.db").exists()  # the state is on the volume
    finally:
        podman("rm", "-f", name)

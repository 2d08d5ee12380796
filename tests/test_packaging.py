"""What gets installed: three unambiguously named packages, and a wheel that works on its own."""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"symphony": "symphony", "symphony_adapters": "adapters"}


def declared() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]  # type: ignore[no-any-return]


def test_every_code_folder_is_an_installed_package_under_a_symphony_name() -> None:
    found = {"symphony_examples"}
    for name, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert set(declared()["packages"]) == found  # type: ignore[arg-type]
    assert declared()["package-dir"] == {
        "symphony": "symphony",
        "symphony_adapters": "adapters",
        "symphony_examples": "examples",
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


@pytest.mark.slow
def test_a_built_wheel_gives_a_working_symphony_outside_the_repository(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(dist), str(ROOT)], check=True, capture_output=True)
    [wheel] = dist.glob("symphony_daemon-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {
        name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")
    }
    assert tops == {"symphony", "symphony_adapters", "symphony_examples"}
    assert "symphony_examples/local/WORKFLOW.md" in names
    assert "symphony/observability/dashboard.html" in names

    # A fresh environment with the wheel, its dependencies taken from this one (no network).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(venv_site, "_dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    project = tmp_path / "project"
    project.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    def symphony(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "symphony"), *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    version = symphony("--version")
    assert version.returncode == 0 and version.stdout.startswith("symphony "), version.stderr
    init = symphony("init", "--tracker", "local")
    assert init.returncode == 0, init.stderr
    check = symphony("check")
    assert check.returncode == 0, check.stderr
    assert "TASK-1" in check.stdout and "would dispatch" in check.stdout
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import symphony, symphony_adapters; "
            "print(symphony.__file__); print(symphony_adapters.__file__)",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(venv)) for path in where), where


@pytest.mark.slow
def test_pipx_installs_the_wheel_under_its_own_name(tmp_path: Path) -> None:
    """README's way to install: `pipx install symphony-daemon` (here the wheel just built);
    the command is `symphony`, in a venv of its own."""
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(dist), str(ROOT)], check=True, capture_output=True)
    [wheel] = dist.glob("symphony_daemon-*.whl")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"), "HOME": str(tmp_path),
    }  # fmt: skip
    pipx = Path(sys.executable).parent / "pipx"
    installed = subprocess.run(
        [str(pipx), "install", str(wheel)], env=env, capture_output=True, text=True, timeout=600
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = subprocess.run([str(pipx), "list", "--short"], env=env, capture_output=True,
                            text=True, check=True)  # fmt: skip
    assert listed.stdout.startswith("symphony-daemon ")
    version = subprocess.run([str(tmp_path / "bin" / "symphony"), "--version"], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert version.returncode == 0 and version.stdout.startswith("symphony 0."), version.stderr

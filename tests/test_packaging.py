"""What gets installed: three unambiguously named packages, and a wheel that works on its own."""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import unquote

import httpx
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


def _wheel(tmp_path: Path) -> Path:
    """The wheel built from this checkout (offline, with this environment's setuptools)."""
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(dist), str(ROOT)], check=True, capture_output=True)
    [wheel] = dist.glob("symphony_daemon-*.whl")
    return wheel


def _installed(tmp_path: Path, wheel: Path) -> Path:
    """A fresh virtual environment holding `wheel`, its dependencies taken from this one (no
    network); returns its folder."""
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
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run(
        [*install, "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True
    )
    return venv


def _outside_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


@pytest.mark.slow
def test_a_built_wheel_gives_a_working_symphony_outside_the_repository(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    tops = {
        name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")
    }
    assert tops == {"symphony", "symphony_adapters", "symphony_examples"}
    assert "symphony_examples/local/WORKFLOW.md" in names
    assert "symphony/observability/dashboard.html" in names
    # The licence travels with the package, and the demonstration with everything it runs.
    assert "License-Expression: Apache-2.0" in metadata.decode()
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for shipped in ("workflow.md", "demo_agent.py", "demo_acp_agent.py", "prompts/plan.md",
                    "board/DEMO-1.md", "sample-repo/calc.py"):  # fmt: skip
        assert f"symphony_examples/quickstart/{shipped}" in names, shipped

    venv = _installed(tmp_path, wheel)
    python = venv / "bin" / "python"
    project = tmp_path / "project"
    project.mkdir()
    env = _outside_env()

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
def test_building_the_package_says_no_packaging_warning(tmp_path: Path) -> None:
    """Installing prints what the installer prints, not a page of setuptools' complaints about
    the package's configuration (data folders that look like packages, deprecated keys)."""
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v"]
    built = subprocess.run(
        [*build, "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, check=True
    )
    said = built.stdout + built.stderr
    complaints = [
        line
        for line in said.splitlines()
        if re.search(r"warn|deprecat|would be ignored", line, re.I)
        and "byte-compiling is disabled" not in line
    ]
    assert complaints == [], "\n".join(complaints)


def _pipx_installed(tmp_path: Path, wheel: Path) -> tuple[Path, dict[str, str]]:
    """README's way to install: `pipx install symphony-daemon` (here the wheel just built), in a
    pipx home of the test's own; returns the folder of the commands and their environment."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"), "HOME": str(tmp_path / "home"),
    }  # fmt: skip
    env.pop("SYMPHONY_TOKEN", None)
    Path(env["HOME"]).mkdir()
    pipx = Path(sys.executable).parent / "pipx"
    installed = subprocess.run(
        [str(pipx), "install", str(wheel)], env=env, capture_output=True, text=True, timeout=600
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = subprocess.run([str(pipx), "list", "--short"], env=env, capture_output=True,
                            text=True, check=True)  # fmt: skip
    assert listed.stdout.startswith("symphony-daemon ")
    return tmp_path / "bin", env


@pytest.mark.slow
def test_pipx_install_then_symphony_demo_reaches_human_review_with_no_checkout(
    tmp_path: Path,
) -> None:
    """`pipx install` of the built wheel, then `symphony demo FOLDER` run far from any
    checkout: it lays the quickstart out, serves the pages and prints links that work, and
    its agents bring a ticket to Human Review with a pull request."""
    commands, env = _pipx_installed(tmp_path, _wheel(tmp_path))
    version = subprocess.run([str(commands / "symphony"), "--version"], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert version.returncode == 0 and version.stdout.startswith("symphony 0."), version.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["DEMO_AGENT_DELAY_MS"] = "0"
    demo = subprocess.Popen(
        [str(commands / "symphony"), "demo", "my-demo", "--no-tui"],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    folder = elsewhere / "my-demo"
    try:
        assert demo.stdout is not None
        printed: list[str] = []
        for line in demo.stdout:
            printed.append(line)
            if "review:" in line:
                break
        said = "".join(printed)
        dashboard = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/)\s", said)
        login = re.search(r"review:\s+(http://\S+/login\?next=/review)#token=(\S+)", said)
        assert dashboard and login, said
        assert httpx.get(dashboard.group(1), timeout=10).status_code == 200
        with httpx.Client(base_url=dashboard.group(1), timeout=10) as browser:
            page = browser.get(login.group(1))
            assert page.status_code == 200 and "#token=" not in page.text
            logged = browser.post(
                "login", data={"token": unquote(login.group(2)), "name": "ada", "next": "/review"}
            )
            assert logged.status_code == 303 and logged.headers["location"] == "/review"
            assert "symphony_session" in browser.cookies

        ticket = folder / ".symphony" / "board" / "DEMO-4.md"
        deadline = time.monotonic() + 180
        while "state: Human Review" not in ticket.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "state: Human Review" in ticket.read_text(), ticket.read_text()
        assert list((folder / ".symphony" / "pulls").glob("*.md"))
    finally:
        demo.terminate()
        _, errors = demo.communicate(timeout=60)
    assert "Traceback" not in errors
    # What ran is the package's copy, laid out in the chosen folder.
    assert (folder / "WORKFLOW.md").read_bytes() == (ROOT / "WORKFLOW.md").read_bytes()
    assert (folder / ".symphony" / "sample-repo.git" / "HEAD").is_file()

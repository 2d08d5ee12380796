"""The layout's rules hold: layers import only downward, the core stays pure, and no module
hides an import inside a function (the way an import cycle used to be held together)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
OUTSIDE_THE_CORE = ("hosts", "workspace", "agents", "store", "daemon")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120
    )


def copy_of_the_tree(tmp_path: Path) -> Path:
    for name in ("symphony", "adapters"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_the_contracts_hold_and_an_upward_import_breaks_them(tmp_path: Path) -> None:
    tree = copy_of_the_tree(tmp_path)
    kept = lint_imports(tree)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert f"{len(contracts['contracts'])} kept, 0 broken" in kept.stdout

    # The core reaching up into the daemon: exactly what the layers forbid.
    core = tree / "symphony" / "core" / "dispatch.py"
    core.write_text(core.read_text() + "\nimport symphony.daemon.orchestrator  # noqa\n")
    # An adapter reaching past the tracker contract into the store.
    adapter = tree / "adapters" / "local" / "board.py"
    adapter.write_text(adapter.read_text() + "\nimport symphony.store  # noqa\n")
    broken = lint_imports(tree)
    assert broken.returncode != 0
    assert "symphony.core.dispatch -> symphony.daemon.orchestrator" in broken.stdout
    assert "adapters.local.board -> symphony.store" in broken.stdout


def test_the_core_loads_nothing_that_does_io() -> None:
    # A fresh interpreter: this test process has loaded everything already.
    probe = (
        "import importlib, pkgutil, sys\n"
        "import symphony.core\n"
        "for found in pkgutil.iter_modules(symphony.core.__path__):\n"
        "    importlib.import_module('symphony.core.' + found.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "symphony.core.dispatch" in loaded  # the probe did import the core
    outside = [m for m in loaded if m.split(".")[:2] in (["symphony", p] for p in OUTSIDE_THE_CORE)]
    assert outside == []
    assert "asyncio.subprocess" not in loaded and "subprocess" not in loaded


LOADED_ON_DEMAND = {
    "symphony.agents.codex": "an agent's session loads with the first session of its kind",
    "symphony.agents.claude": "an agent's session loads with the first session of its kind",
    "symphony.agents.acp": "an agent's session loads with the first session of its kind",
    "symphony.agents.tool_server": "only agents that take their tools over MCP need it",
    "symphony.observability.terminal": "the live table (rich) is drawn only for a terminal",
    "symphony.observability.snapshot": "the surfaces' snapshot is built when one first asks",
    "symphony.workspace.worktrees": "the worktree strategy's layer loads for a workflow using it",
    "symphony.daemon.review": "the review page's reads (git, Markdown) load with the page",
    "symphony.notify.channels": "the senders load with the first notification due",
    "symphony.gateway.server": "the model gateway loads for the first agent holding an API key",
    "symphony.daemon.cluster": "a cluster's pods and claims load for a workflow that names one",
    "symphony.config.kubernetes": "a cluster's settings are read for a workflow that names one",
    "symphony_adapters.local.pulls": "the local code host loads for a workflow publishing to it",
    "symphony.daemon.ssh_hosts": "the SSH layer loads for a workflow that names SSH hosts",
    "symphony.hosts.sandbox.host": "a sandbox's runner loads for a workflow or stage that has one",
}
"""The modules the daemon imports when it first needs them, not at start (a daemon loads what its
workflow uses), and why. Every other symphony import sits at the top of its module, where the
import contracts and a reader see it."""


def absolute(path: Path, level: int, module: str | None) -> str:
    """The module a `from` import in `path` names, a relative one resolved (the adapters/
    folder is installed as `symphony_adapters`)."""
    if level == 0:
        return module or ""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "adapters":
        parts[0] = "symphony_adapters"
    package = parts[: len(parts) - level]  # a module's package, or an __init__'s own
    return ".".join([*package, *([module] if module else [])])


def function_level_imports(path: Path) -> list[str]:
    """`module:line` of every import of a symphony module inside a function of `path`, but of
    the modules `LOADED_ON_DEMAND`."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            if isinstance(child, ast.ImportFrom):
                names = [absolute(path, child.level, child.module)]
            elif isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            if in_function and any(
                n.split(".")[0] in ("symphony", "adapters", "symphony_adapters")
                and n not in LOADED_ON_DEMAND
                for n in names
            ):
                found.append(f"{path.relative_to(ROOT)}:{child.lineno}")
            visit(child, inside)

    visit(ast.parse(path.read_text()), False)
    return found


def test_no_symphony_import_hides_inside_a_function_outside_the_command_line() -> None:
    modules = [*(ROOT / "symphony").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]
    assert len(modules) > 100
    hidden = [
        where
        for path in modules
        if (ROOT / "symphony" / "cli") not in path.parents
        for where in function_level_imports(path)
    ]
    assert hidden == []


def test_the_finder_sees_an_import_inside_a_function() -> None:
    # The command line keeps one lazy import (the HTTP server), so the finder must report it.
    assert function_level_imports(ROOT / "symphony" / "cli" / "main.py")


def module_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of symphony/ and adapters/ and the modules it imports at any depth of its
    body (function-level and type-only imports included), by dotted name."""
    graph: dict[str, set[str]] = {}
    for top in ("symphony", "adapters"):
        for path in (root / top).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            package = ".".join(parts[:-1])
            found: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                        base = ".".join([*anchor, *([base] if base else [])])
                    subs = [f"{base}.{a.name}" for a in node.names]
                    named = [s for s in subs if (root / (s.replace(".", "/") + ".py")).exists()]
                    found.update(named or [base])
                    if len(named) < len(subs):
                        found.add(base)
            graph[module] = {m for m in found if m.split(".")[0] in ("symphony", "adapters")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if other == module:
                continue
            if state.get(other) == 1:
                found.append([*stack[stack.index(other) :], other])
            elif other not in state:
                visit(other, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    graph = module_imports()
    assert len(graph) > 100 and "symphony.core.dispatch" in graph["symphony.core.runs"]
    assert cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]

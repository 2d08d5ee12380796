"""Deferred imports: a module imported inside `deferred_imports` exists at once but runs only
when one of its attributes is first read; the Liquid engine defers what only its locale
filters and free-form dates use, and those still work when a template asks for them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = """\
import sys, types
sys.path.insert(0, sys.argv[1])
from symphony.base.imports import deferred_imports
with deferred_imports(["noisy"]):
    import noisy
    import plain
print("after import", type(noisy) is types.ModuleType, flush=True)
print("value", noisy.VALUE, type(noisy) is types.ModuleType, flush=True)
print("finder left", any(type(f).__name__ == "_Deferring" for f in sys.meta_path))
"""


def test_a_deferred_module_runs_when_first_used_and_others_at_once(tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text("print('noisy runs', flush=True)\nVALUE = 42\n")
    (tmp_path / "plain.py").write_text("print('plain runs', flush=True)\n")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        "plain runs",
        "after import False",
        "noisy runs",
        "value 42 True",
        "finder left False",
    ]


def test_liquid_defers_its_locale_modules_and_a_date_filter_still_parses() -> None:
    script = textwrap.dedent(
        """\
        import sys, types
        from symphony.base.templating import LOADED_ON_USE, Environment, StrictUndefined
        made = [n for n in LOADED_ON_USE if n in sys.modules]
        waiting = [n for n in made if type(sys.modules[n]) is not types.ModuleType]
        print(sorted(waiting))
        env = Environment(undefined=StrictUndefined, strict_filters=True)
        print(env.from_string('{{ "March 5th 2024" | date: "%Y-%m-%d" }}').render())
        print(type(sys.modules["dateutil.parser"]) is types.ModuleType)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    waiting, rendered, parser_loaded = done.stdout.splitlines()
    assert "dateutil.parser" in waiting
    assert rendered == "2024-03-05"
    assert parser_loaded == "True"

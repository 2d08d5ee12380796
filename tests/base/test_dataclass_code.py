"""The dataclass method cache: classes made from it behave as compiled ones, it is written
only where and when bytecode would be, and a bad file costs nothing but compiling. Every
dataclass of the package has a docstring (one without gets a made one at import)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import marshal
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from symphony.base import dataclass_code
from symphony.base.dataclass_code import MethodCode, cache_path

CLASSES = """
from dataclasses import dataclass, field

@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()

@dataclass
class Bag:
    items: list[int] = field(default_factory=list)
"""

SHARING = """
@dataclass(frozen=True, slots=True)
class Same:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
"""


@pytest.fixture
def methods(monkeypatch: pytest.MonkeyPatch) -> MethodCode:
    fresh = MethodCode()
    monkeypatch.setattr(dataclasses, "exec", fresh.run, raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return fresh


@pytest.fixture
def module_file(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "probe.py"
    sys.modules.pop("symphony.probe_for_cache", None)


def make(file: Path, source: str = CLASSES) -> types.ModuleType:
    """Makes the module `symphony.probe_for_cache` (its file `file`) with its classes."""
    module = types.ModuleType("symphony.probe_for_cache")
    module.__file__ = str(file)
    sys.modules[module.__name__] = module
    exec(compile(source, str(file), "exec"), module.__dict__)
    return module


def behaves(module: Any) -> None:
    point = module.Point(1, tags=("a",))
    assert (point.x, point.y, point.tags) == (1, 0, ("a",))
    assert point == module.Point(1, 0, ("a",)) and point != module.Point(2)
    assert hash(point) == hash(module.Point(1, 0, ("a",)))
    assert repr(point) == "Point(x=1, y=0, tags=('a',))"
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 3
    if hasattr(module, "Same"):
        assert module.Same(1) != point  # another class, though its methods' source is the same
    first, second = module.Bag(), module.Bag()
    first.items.append(1)
    assert second.items == [] and module.Bag([1]) == first


def compiled_count(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources `compile` is asked for from now on."""
    seen: list[str] = []
    real = builtins.compile

    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(source, str) and "__create_fn__" in source:
            seen.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    return seen


def test_classes_made_from_the_cache_behave_as_compiled_ones(
    methods: MethodCode, module_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    behaves(make(module_file))
    methods.save()
    path = module_file.parent / "__pycache__" / f"probe.{sys.implementation.cache_tag}.dataclasses"
    assert cache_path("symphony.probe_for_cache") == str(path) and path.is_file()

    later = MethodCode()  # the next start
    monkeypatch.setattr(dataclasses, "exec", later.run)
    compiled = compiled_count(monkeypatch)
    behaves(make(module_file))
    assert compiled == []
    assert later.added == {}


def test_a_source_two_classes_share_is_learned_and_then_served_to_both(
    methods: MethodCode, module_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(module_file, CLASSES + SHARING)
    methods.save()
    again = MethodCode()  # the second start learns what the classes share
    monkeypatch.setattr(dataclasses, "exec", again.run)
    make(module_file, CLASSES + SHARING)
    assert len(again.added["symphony.probe_for_cache"]) == 6  # Same's, which Point had used
    again.save()
    last = MethodCode()  # and the third serves both from the file
    monkeypatch.setattr(dataclasses, "exec", last.run)
    compiled = compiled_count(monkeypatch)
    behaves(make(module_file, CLASSES + SHARING))
    assert compiled == [] and last.added == {}


def test_nothing_is_written_when_python_writes_no_bytecode(
    methods: MethodCode, module_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    make(module_file)
    assert methods.added == {}  # what can never be written is not held for the whole run
    methods.save()
    assert not (module_file.parent / "__pycache__").exists()


@pytest.mark.parametrize(
    "content",
    [b"", b"not marshal at all", marshal.dumps((0x30000F0, {}, set())), marshal.dumps([1, 2])],
    ids=["empty", "garbage", "another-python", "another-shape"],
)
def test_a_file_that_cannot_be_used_is_compiled_past_and_replaced(
    methods: MethodCode, module_file: Path, content: bytes
) -> None:
    path = module_file.parent / "__pycache__" / f"probe.{sys.implementation.cache_tag}.dataclasses"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    behaves(make(module_file))
    methods.save()
    version, entries, _ = marshal.loads(path.read_bytes())
    assert version == sys.hexversion and len(entries) >= 5


def test_a_folder_it_cannot_write_is_no_error(methods: MethodCode, module_file: Path) -> None:
    module_file.parent.joinpath("__pycache__").write_text("a file where the folder would be")
    behaves(make(module_file))
    methods.save()  # nothing raised, nothing left behind
    assert sorted(p.name for p in module_file.parent.iterdir()) == ["__pycache__"]


def test_other_packages_dataclasses_are_compiled_as_usual(methods: MethodCode) -> None:
    namespace: dict[str, Any] = {"__name__": "someone_else.models"}
    sys.modules["someone_else.models"] = types.ModuleType("someone_else.models")
    try:
        exec(CLASSES, namespace)
    finally:
        del sys.modules["someone_else.models"]
    assert methods.added == {} and methods.kept == {}


def test_importing_symphony_installs_it() -> None:
    assert dataclass_code.installed() is not None
    assert dataclass_code.install() is dataclass_code.installed()


def docless_dataclasses(source: str) -> list[str]:
    """The dataclasses of `source` without a docstring. `dataclasses` gives such a class one
    made from `inspect.signature` as the class is made, which is start-up time spent on text
    nobody reads."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and any("dataclass" in ast.unparse(d) for d in node.decorator_list)
        and ast.get_docstring(node) is None
    ]


def test_every_dataclass_says_what_it_is() -> None:
    root = Path(__file__).resolve().parents[2]
    modules = [*(root / "symphony").rglob("*.py"), *(root / "adapters").rglob("*.py")]
    docless = [
        f"{path.relative_to(root)}: {name}"
        for path in modules
        for name in docless_dataclasses(path.read_text())
    ]
    assert docless == []


def test_the_docstring_check_sees_a_class_without_one() -> None:
    assert docless_dataclasses(CLASSES) == ["Point", "Bag"]

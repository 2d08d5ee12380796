"""Dataclasses made without compiling their methods again at every start.

On CPython `dataclasses` writes the source of each method it generates for a class
(`__init__`, `__repr__`, `__eq__`, `__hash__`, a frozen class's `__setattr__` and
`__delattr__`) and compiles it with `exec` as the class is made. symphony defines some 250
dataclasses, and compiling their 1,300-odd methods was a third of the daemon's import time.
That source depends only on the class (its fields, defaults, options), so its compiled code is
the same at every start: for symphony's own modules it is kept beside the module's bytecode
(`__pycache__/<module>.<tag>.dataclasses`), marshalled and keyed by the source itself, and
executed from there instead of compiled again.

What changes is only where the code object comes from: `exec` runs it with the globals and
namespace `dataclasses` passes, as it would have run the code it compiled from that very text.
A module's file is read when its first dataclass is made, and is named for the interpreter's
bytecode tag and carries its exact version, so another interpreter never uses it; a file that
cannot be read or parsed is ignored. What had to be compiled is written when the process exits
(and by the daemon once it has started), to a temporary file renamed into place, unless Python
was told not to write bytecode (`PYTHONDONTWRITEBYTECODE`, `-B`) or the folder is not
writable: like bytecode, it is a cache, and any failure only means compiling as before.
Other packages' dataclasses are compiled as usual.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import marshal
import os
import sys
from types import CodeType, FunctionType
from typing import Any, NamedTuple

OWN = ("symphony.", "symphony_adapters.")
"""The modules whose dataclasses are cached: symphony's, beside its own bytecode."""


class MethodCode:
    """The compiled methods `dataclasses` asked for, by module and source. An entry is dropped
    from memory once used (a module makes its classes once, and two of its classes seldom
    share a method's source); writing a module's file reads it again and adds what was
    compiled."""

    def __init__(self) -> None:
        self.kept: dict[str, Cached] = {}
        self.added: dict[str, dict[str, bytes]] = {}

    def run(
        self,
        source: str | bytes | CodeType,
        globals: dict[str, Any] | None = None,
        locals: Any = None,
        /,
    ) -> None:
        """`exec`, with the code of a source text one of symphony's modules made before taken
        from that module's cache."""
        module = globals.get("__name__") if globals is not None else None
        if type(source) is str and isinstance(module, str) and module.startswith(OWN):
            cached = self.kept.get(module)
            if cached is None:
                cached = self.kept[module] = _read(cache_path(module))
            code = cached.entries.get(source)
            if code is None:
                compiled = compile(source, "<string>", "exec", dont_inherit=True)
                if not sys.dont_write_bytecode:  # else it could never be written: not kept
                    self.added.setdefault(module, {})[source] = marshal.dumps(compiled)
                source = compiled
            else:
                if source not in cached.repeated:
                    del cached.entries[source]
                source = marshal.loads(code)
        exec(source, globals, locals)  # `dataclasses`' own methods

    def save(self) -> None:
        """Writes, for each module that compiled methods, its cache with them added, if Python
        may write bytecode. A source compiled though the file had it is one two classes of the
        module share: the file says so, and it is kept in memory when used."""
        if sys.dont_write_bytecode:
            return
        added, self.added = self.added, {}
        for module, entries in added.items():
            path = cache_path(module)
            if path is not None:
                old = _read(path)
                repeated = old.repeated | (old.entries.keys() & entries.keys())
                _write(path, Cached({**old.entries, **entries}, repeated))


class Cached(NamedTuple):
    """A module's cache: the marshalled code by source, and the sources more than one of its
    classes has."""

    entries: dict[str, bytes]
    repeated: set[str]


def cache_path(module: str) -> str | None:
    """Where `module`'s cache is, beside its bytecode; None for a module without a file."""
    file = getattr(sys.modules.get(module), "__file__", None)
    tag = sys.implementation.cache_tag
    if not isinstance(file, str) or tag is None:
        return None
    folder, name = os.path.split(file)
    stem = name.rpartition(".")[0] or name
    return os.path.join(folder, "__pycache__", f"{stem}.{tag}.dataclasses")


def _read(path: str | None) -> Cached:
    empty = Cached({}, set())
    if path is None:
        return empty
    try:
        with open(path, "rb") as cache:
            loaded = marshal.load(cache)
    except (OSError, EOFError, ValueError, TypeError):
        return empty
    if not (isinstance(loaded, tuple) and len(loaded) == 3 and loaded[0] == sys.hexversion):
        return empty
    entries, repeated = loaded[1], loaded[2]
    if not isinstance(entries, dict) or not isinstance(repeated, frozenset | set):
        return empty
    kept = {k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, bytes)}
    return Cached(kept, {r for r in repeated if isinstance(r, str)})


def _write(path: str, cached: Cached) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as out:
            marshal.dump((sys.hexversion, cached.entries, cached.repeated), out)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def installed() -> MethodCode | None:
    """The cache `dataclasses` runs its methods through, if installed."""
    current = getattr(vars(dataclasses).get("exec"), "__self__", None)
    return current if isinstance(current, MethodCode) else None


def save() -> None:
    """Writes what this process has compiled so far, now (a daemon that runs for weeks and is
    then killed would never reach its exit)."""
    methods = installed()
    if methods is not None:
        methods.save()


def install() -> MethodCode | None:
    """Makes `dataclasses` run the methods it generates through the cache; idempotent. On an
    interpreter whose `dataclasses` does not build them with `exec` nothing is changed."""
    if (methods := installed()) is not None:
        return methods
    if sys.implementation.name != "cpython" or not _builds_with_exec():
        return None
    methods = MethodCode()
    dataclasses.exec = methods.run  # type: ignore[attr-defined]
    atexit.register(methods.save)
    return methods


def _builds_with_exec() -> bool:
    """Whether a function of `dataclasses` calls `exec`, read from its code's names."""
    functions = [v for v in vars(dataclasses).values() if isinstance(v, FunctionType)]
    return any("exec" in function.__code__.co_names for function in functions)

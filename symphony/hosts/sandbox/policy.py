"""What a sandbox contains: the mounts, the network and the limits of one boundary, decided from
the settings and the run, before any program that enforces it is named.

`plan_mounts` is pure but for reading the file system it describes (which system folders are
symlinks, which files of /etc only their owner may read, where an agent program is installed),
so the same plan feeds bwrap and podman and is tested without starting either.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from symphony.config.sandbox import SandboxSettings, WorkspaceAccess

MountKind = Literal["ro", "rw", "tmpfs", "mask", "symlink", "dir"]

SYSTEM_FOLDERS = ("/usr", "/etc")
"""Read-only in every sandbox: the toolchain and the machine's configuration (minus secrets)."""
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Symlinks into /usr on a merged-/usr system, folders of their own elsewhere."""
RUN_DIR = Path("/run/symphony")
"""Inside: where the daemon's sockets (proxy, tool server) are bound."""
SANDBOX_UID = 1000
"""Who a root daemon's agents are inside: an unprivileged user, never root."""


@dataclass(frozen=True, slots=True)
class Mount:
    """One thing a sandbox has at `target`: a host folder (read-only or writable), a private tmpfs,
    a masked file, a symlink or an empty folder."""

    kind: MountKind
    target: Path
    source: Path | None = None
    """The host path (`ro`, `rw`), the link's text (`symlink`); None for the others."""


@dataclass(frozen=True, slots=True)
class RunPaths:
    """What the daemon made for one run: its private home and its socket folder."""

    home: Path
    sockets: Path
    empty: Path = Path("/var/empty")
    """An empty folder, read-only inside wherever a folder must exist and stay empty."""


def plan_mounts(
    settings: SandboxSettings,
    workspace: Path,
    paths: RunPaths,
    *,
    programs: Sequence[Path] = (),
    git: Sequence[Mount] = (),
    etc: Path = Path("/etc"),
    root: Path = Path("/"),
    system: bool = True,
) -> tuple[Mount, ...]:
    """The mounts of a sandbox around `workspace`, in the order they are made (a later mount
    covers an earlier one): the system read-only with /etc's secrets masked, a private /tmp,
    the installations of `programs`, the extra read-only folders, the private home, the
    workspace, its git metadata (`git_mounts`), the extra writable
    folders, and the daemon's socket folder. Without `system` (a container image that brings
    its own), this machine's system folders are left out."""
    mounts: list[Mount] = [Mount("dir", Path("/run"))]
    if system:
        mounts += system_mounts(etc=etc, root=root)
    mounts.append(Mount("tmpfs", Path("/tmp")))
    mounts.append(Mount("tmpfs", Path("/var/tmp")))
    system_folders = [Path(p) for p in SYSTEM_FOLDERS]
    for folder in _outermost(p for p in [*programs, *settings.read_only] if p != Path("/")):
        if not any(folder.is_relative_to(s) for s in system_folders):
            mounts.append(Mount("ro", folder, folder))
    mounts.append(Mount("rw", paths.home, paths.home))
    workspace_kind: MountKind = "rw" if settings.workspace is WorkspaceAccess.WRITABLE else "ro"
    mounts.append(Mount(workspace_kind, workspace, workspace))
    mounts.extend(git)
    for extra in settings.writable:
        mounts.append(Mount("rw", extra, extra))
    mounts.append(Mount("ro", RUN_DIR, paths.sockets))
    return tuple(mounts)


def system_mounts(*, etc: Path = Path("/etc"), root: Path = Path("/")) -> list[Mount]:
    """This machine's system folders, read-only, with the secrets of /etc masked."""
    mounts = []
    for link in SYSTEM_LINKS:
        on_host = root / link.lstrip("/")
        if on_host.is_symlink():
            mounts.append(Mount("symlink", Path(link), Path(os.readlink(on_host))))
        elif on_host.is_dir():
            mounts.append(Mount("ro", Path(link), on_host))
    for system_folder in SYSTEM_FOLDERS:
        mounts.append(Mount("ro", Path(system_folder), root / system_folder.lstrip("/")))
    mounts.extend(Mount("mask" if not is_dir else "tmpfs", p) for p, is_dir in etc_secrets(etc))
    return mounts


@cache
def _etc_secrets(etc: str) -> tuple[tuple[Path, bool], ...]:
    found: list[tuple[Path, bool]] = []
    for dirpath, dirnames, filenames in os.walk(etc):
        for name in list(dirnames):
            path = Path(dirpath, name)
            if _private(path):
                found.append((path, True))
                dirnames.remove(name)  # masked whole
        for name in filenames:
            path = Path(dirpath, name)
            if _private(path):
                found.append((path, False))
    return tuple(sorted(found))


def etc_secrets(etc: Path = Path("/etc")) -> tuple[tuple[Path, bool], ...]:
    """The entries of /etc that others may not read (shadow, ssh host keys, private TLS keys,
    ...), `(path, is_dir)`: masked inside, where the sandbox's user may own what root owns."""
    return _etc_secrets(str(etc))


def _private(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode):
        return False
    return not info.st_mode & stat.S_IROTH


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The folders, without those inside another one of them."""
    unique = sorted({Path(os.path.normpath(p)) for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


GIT_CONTROL = ("config", "hooks", "info")
"""What in a repository decides what git runs (configuration, hooks, attributes and excludes):
read-only in every sandbox, so no stage leaves a hook or a driver for a later stage, another
ticket, or the daemon's own git to run."""


def git_mounts(workspace: Path, *, writable: bool, empty: Path) -> tuple[Mount, ...]:
    """What git needs inside and what it must not write. A worktree whose metadata lives
    outside it gets the shared repository (objects, refs) with every other worktree's metadata
    hidden, and its own; a clone's `.git` is a mount of its own (so it cannot be renamed or
    replaced). In both, the repository's `GIT_CONTROL` entries (an `empty` read-only folder
    where one is missing), a worktree's pointers to its repository and the workspace's `.git`
    file are read-only; a read-only stage (`writable` False) gets no writable git state."""
    dot_git = workspace / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        if not writable:
            return ()  # inside the read-only workspace
        return (Mount("rw", dot_git, dot_git), *_control(dot_git, empty))
    try:
        text = dot_git.read_text() if dot_git.is_file() else ""
    except OSError:
        return ()
    if not text.startswith("gitdir:"):
        return ()
    own = Path(os.path.normpath(workspace / text[len("gitdir:") :].strip()))
    access: MountKind = "rw" if writable else "ro"
    try:
        common = Path(os.path.normpath(own / (own / "commondir").read_text().strip()))
    except OSError:
        return (Mount(access, own, own),)
    if own.is_relative_to(workspace):
        return ()
    mounts = [Mount(access, common, common), Mount("tmpfs", common / "worktrees")]
    mounts.append(Mount(access, own, own))
    if writable:
        mounts += _control(common, empty)
        mounts += [Mount("ro", own / name, own / name) for name in ("commondir", "gitdir")]
        mounts.append(Mount("ro", dot_git, dot_git))
    return tuple(mounts)


def _control(repository: Path, empty: Path) -> list[Mount]:
    mounts = []
    for name in GIT_CONTROL:
        path = repository / name
        if path.exists() or path.is_symlink():
            mounts.append(Mount("ro", path, path))
        elif name != "config":
            mounts.append(Mount("ro", path, empty))
    return mounts


def path_folders(env: Mapping[str, str]) -> list[Path]:
    """The installations behind the `PATH` a child gets (a hook's `python3`, a gate's `npm`)."""
    found = []
    homes = _homes(env)
    for entry in env.get("PATH", "").split(os.pathsep):
        folder = Path(entry)
        if folder.is_absolute() and folder.is_dir():
            prefix = _prefix(folder, homes)
            if prefix != Path("/"):  # /bin: the system's own, mounted as such
                found.append(prefix)
    return found


def _homes(env: Mapping[str, str]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(Path(h) for h in (env.get("HOME"), str(Path.home())) if h))


def _prefix(folder: Path, homes: Sequence[Path]) -> Path:
    """The installation a `bin` folder belongs to: its parent, except where that parent is a
    folder of the home folder itself, a tool's whole state (`~/.cargo` holds
    `credentials.toml`, `~/.local` every program's data): there the `bin` folder alone, unless
    it is a virtual environment's (`~/venv`). Deeper prefixes (`~/.pyenv/versions/3.11`) are
    installations and come whole."""
    if folder.name not in _BIN_FOLDERS:
        return folder
    parent = folder.parent
    if parent in homes and folder.name != ".bin":
        return folder
    if parent.parent in homes and not (parent / "pyvenv.cfg").is_file():
        return folder
    return parent


# -- where an agent program lives --------------------------------------------------------------

_BIN_FOLDERS = {"bin", "sbin", ".bin", "shims"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_WRAPPERS = {"exec", "env", "nice", "nohup", "command", "time"}


def program_folders(command: str, env: Mapping[str, str], home: Path | None = None) -> list[Path]:
    """The installation folders the agent `command` needs, wherever they are: the program's
    (the prefix above its `bin/`, the `node_modules` above `.bin/`), the interpreter its `#!`
    line names, a Python virtual environment's base installation, and the folder of every
    script or file the command names. Never / itself, nor the home folder as a whole."""
    try:
        words = shlex.split(_expand(command, env))
    except ValueError:
        return []
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in _WRAPPERS):
        words.pop(0)
    if not words:
        return []
    found: list[Path] = []
    program = _which(words[0], env)
    homes = (*_homes(env), *((home,) if home is not None else ()))
    if program is not None:
        _installation(program, env, found, depth=0, homes=homes)
    for word in words[1:]:
        candidate = Path(word)
        if candidate.is_absolute() and candidate.exists():
            found.append(candidate if candidate.is_dir() else candidate.parent)
    broad = {Path("/"), *(p for p in (home,) if p is not None)}
    return _outermost(p for p in found if p not in broad)


def _installation(
    program: Path, env: Mapping[str, str], found: list[Path], depth: int, homes: Sequence[Path]
) -> None:
    for path in dict.fromkeys((program, Path(os.path.realpath(program)))):
        folder = path.parent
        prefix = _prefix(folder, homes)
        found.append(prefix)
        for parent in path.parents:
            if parent.name == "node_modules":
                found.append(parent)  # the whole package tree: its binaries come from there
                break
        venv = prefix / "pyvenv.cfg"
        if venv.is_file():
            home = _venv_home(venv)
            if home is not None:
                found.append(home.parent if home.name in _BIN_FOLDERS else home)
    if depth < 3:
        interpreter = _shebang(Path(os.path.realpath(program)), env)
        if interpreter is not None:
            _installation(interpreter, env, found, depth + 1, homes)


def _venv_home(cfg: Path) -> Path | None:
    try:
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                return Path(value.strip())
    except OSError:
        return None
    return None


def _shebang(path: Path, env: Mapping[str, str]) -> Path | None:
    try:
        with path.open("rb") as file:
            head = file.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        return _which(rest[0], env) if rest else None
    return Path(words[0])


def _which(name: str, env: Mapping[str, str]) -> Path | None:
    if "/" in name:
        path = Path(name)
        return path if path.is_absolute() and path.exists() else None
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def _expand(command: str, env: Mapping[str, str]) -> str:
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), command)


def shell_words(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)

"""Whether codex can run its own sandbox where the workflow puts its home.

Codex keeps the helpers its sandbox runs through (`codex-linux-sandbox`) in its home
(`CODEX_HOME`, else `~/.codex`) and refuses to make them under the temporary folder. Where
bubblewrap is installed codex sandboxes with it, and bubblewrap then finds no helper: every
command of a `workspace-write` or `read-only` thread fails (`bwrap: execvp codex-linux-sandbox:
No such file or directory`). A run in symphony's own sandbox gets a private home outside the
temporary folder (`symphony.daemon.sandbox.runs_root`); an unsandboxed run takes its home from
the agent's environment, which `temp_home_warnings` looks at.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from symphony.agents.registry import CODEX
from symphony.config.codex import OUTER_BOUNDARY, CodexSettings
from symphony.config.sandbox import SandboxSettings
from symphony.config.sections import Settings
from symphony.config.stages import Stage
from symphony.workspace.environment import child_environment


def temp_home_warnings(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """A warning for each codex home under the temporary folder that an unsandboxed codex run
    with its own sandbox on would use, where bubblewrap is installed; none on worker hosts
    (their homes are theirs)."""
    if settings.worker.hosts or shutil.which("bwrap", path=environ.get("PATH")) is None:
        return []
    env = child_environment(environ, settings, (), extra_names=CODEX.env_names)
    warnings = []
    for sandbox, block in _codex_runs(settings):
        if sandbox.enabled or not _own_sandbox(block):
            continue
        variable = "CODEX_HOME" if env.get("CODEX_HOME") else "HOME"
        home = Path(env[variable]) if variable == "CODEX_HOME" else _home(env) / ".codex"
        temp = next((t for t in _temp_folders(env) if _under(home, t)), None)
        if temp is not None:
            warnings.append(
                f"codex's home {home} (from {variable}) is under the temporary folder {temp}, "
                "where codex will not make the helpers of its own sandbox; with bubblewrap "
                "installed every command it runs there fails (bwrap: execvp "
                "codex-linux-sandbox): set CODEX_HOME in agent.env or the daemon's environment "
                f"to a folder outside {temp}, or run the agent in symphony's sandbox "
                "(sandbox.kind: bwrap)"
            )
    return list(dict.fromkeys(warnings))


def _codex_runs(settings: Settings) -> Iterator[tuple[SandboxSettings, CodexSettings]]:
    """The sandbox and codex block of every run of codex: the workflow's, or each stage's
    (its own agent's and its fallback's)."""
    stages: list[tuple[Stage | None, str | None]]
    if settings.machine is None:
        stages = [(None, settings.agent.kind)]
    else:
        stages = [
            (stage, kind)
            for stage in settings.machine.stages
            for kind in (stage.agent or settings.agent.kind, stage.fallback_agent)
        ]
    for stage, kind in stages:
        if kind == CODEX.kind:
            block = settings.agent_block(stage, kind)
            if isinstance(block, CodexSettings):
                yield settings.sandbox_for(stage), block


def _own_sandbox(block: CodexSettings) -> bool:
    policy = block.turn_sandbox_policy
    if policy is not None:
        return policy.get("type") != "dangerFullAccess"
    return block.thread_sandbox != OUTER_BOUNDARY


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def _temp_folders(env: Mapping[str, str]) -> list[Path]:
    """Codex's temporary folder (its `TMPDIR`, else /tmp) and /tmp."""
    return list(dict.fromkeys(Path(t) for t in (env.get("TMPDIR") or "/tmp", "/tmp")))


def _under(path: Path, folder: Path) -> bool:
    """Whether `path` is in `folder`, as written or with their links resolved."""
    paths = (path, Path(os.path.realpath(path)))
    folders = (folder, Path(os.path.realpath(folder)))
    return any(p.is_relative_to(f) for p in paths for f in folders)

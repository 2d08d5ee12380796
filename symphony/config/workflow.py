"""Read WORKFLOW.md into front matter (a map) and a prompt template (the trimmed body)."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from symphony.base.errors import ErrorCategory, SymphonyError

MISSING_WORKFLOW_FILE = ErrorCategory.MISSING_WORKFLOW_FILE
WORKFLOW_PARSE_ERROR = ErrorCategory.WORKFLOW_PARSE_ERROR
WORKFLOW_FRONT_MATTER_NOT_A_MAP = ErrorCategory.WORKFLOW_FRONT_MATTER_NOT_A_MAP


class WorkflowError(SymphonyError):
    """WORKFLOW.md could not be read or parsed."""


@dataclass(frozen=True, slots=True)
class Workflow:
    """WORKFLOW.md as read: its front matter (a map) and its prompt template, before any setting is
    checked."""

    path: Path
    config: dict[str, Any]
    prompt_template: str
    fingerprint: str
    """Digest of the file's bytes: a reload is a change only when this differs."""
    prompt_line: int = 1
    """The file's line (1-based) where the trimmed prompt template starts."""


def read_workflow(path: Path) -> Workflow:
    path = path.expanduser().absolute()
    # The daemon looks at the file on every poll to see whether it changed: a file whose inode,
    # size and times are what the last read saw is not read again, unless it was modified in
    # the last 2 s (a second write in the same clock tick would leave them unchanged).
    try:
        seen = path.stat()
    except OSError:
        seen = None  # the read below says why
    known = _last_parsed.get(path)
    stamp = _stamp(seen)
    if known is not None and stamp is not None and known[0] == stamp:
        return known[1]
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise WorkflowError(
            MISSING_WORKFLOW_FILE,
            f"{path} does not exist; to start, write one with `symphony init` (a local board "
            "of Markdown tickets) or `symphony init --tracker github|github-projects|linear|"
            "gitlab|kaiten`, or give the path of an existing WORKFLOW.md",
        ) from None
    except IsADirectoryError:
        raise WorkflowError(MISSING_WORKFLOW_FILE, f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise WorkflowError(MISSING_WORKFLOW_FILE, f"cannot read {path}: {exc.strerror}") from None
    # The same bytes are not parsed again.
    fingerprint = hashlib.sha256(raw).hexdigest()
    if known is not None and known[1].fingerprint == fingerprint:
        workflow = known[1]
    else:
        workflow = parse_workflow(raw, path)
    _last_parsed[path] = (stamp, workflow)
    return workflow


_last_parsed: dict[Path, tuple[tuple[int, ...] | None, Workflow]] = {}
SETTLED_S = 2.0
"""A file modified more recently than this is read again even when its stat says nothing
changed."""


def _stamp(seen: os.stat_result | None) -> tuple[int, ...] | None:
    """What says a file did not change since it was read; None when that cannot be told."""
    if seen is None or time.time() - seen.st_mtime < SETTLED_S:
        return None
    return (seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns)


"""The last good parse of each workflow file read (a failed parse is not kept)."""


def parse_workflow(raw: bytes, path: Path) -> Workflow:
    fingerprint = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise WorkflowError(WORKFLOW_PARSE_ERROR, f"{path} is not UTF-8 text ({exc})") from None
    front, body = _split_front_matter(text, path)
    config: Any = {}
    if front is not None:
        try:
            config = yaml.safe_load(front)
        except yaml.YAMLError as exc:
            raise WorkflowError(
                WORKFLOW_PARSE_ERROR, f"{path}: front matter is not valid YAML: {_yaml_reason(exc)}"
            ) from None
        if config is None:
            config = {}
    if not isinstance(config, dict):
        raise WorkflowError(
            WORKFLOW_FRONT_MATTER_NOT_A_MAP,
            f"{path}: front matter must be a map of settings (key: value), "
            f"got a {type(config).__name__}",
        )
    body_line = 1 if front is None else front.count("\n") + 3  # both fences
    stripped = body.lstrip()
    prompt_line = body_line + body[: len(body) - len(stripped)].count("\n")
    return Workflow(path, config, body.strip(), fingerprint, prompt_line)


def _split_front_matter(text: str, path: Path) -> tuple[str | None, str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n").rstrip() != "---":
        return None, text
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n").rstrip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    raise WorkflowError(
        WORKFLOW_PARSE_ERROR, f"{path}: front matter starts with '---' but has no closing '---'"
    )


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        # +2: one for 1-based lines, one for the opening '---' line.
        return f"{problem} at line {mark.line + 2}, column {mark.column + 1}"
    return str(problem)

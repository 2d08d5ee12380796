"""Reading one value of the front matter: the error a bad value raises, sections, integers,
lists of text, variable names, `$VAR` references, secrets and paths. Shared by every section's
parser, the stage parser, the agent kinds' own blocks and the tracker adapters' `provider`
blocks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from symphony.base.errors import ErrorCategory, SymphonyError

INVALID_CONFIG = ErrorCategory.INVALID_WORKFLOW_CONFIG


class ConfigError(SymphonyError):
    """The front matter parsed but a value is missing, of the wrong type, or out of range."""


_VAR = r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))"


_ENV_REF = re.compile(rf"^{_VAR}$")


_PATH_VAR = re.compile(_VAR)


def env_reference(value: object) -> str | None:
    """The variable name when `value` is exactly `$NAME` or `${NAME}`, else None."""
    if not isinstance(value, str):
        return None
    match = _ENV_REF.match(value.strip())
    if match is None:
        return None
    return match.group(1) or match.group(2)


def resolve_secret(value: object, environ: Mapping[str, str]) -> str | None:
    """A secret given literally or as `$NAME`; an unset or empty variable counts as missing."""
    if value is None:
        return None
    if not isinstance(value, str):
        return None
    name = env_reference(value)
    if name is None:
        return value or None
    return environ.get(name) or None


def resolve_path(value: str, base: Path, environ: Mapping[str, str], what: str) -> Path:
    """Expand `$VAR` and `~`, resolve against `base` when relative, return an absolute path."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        resolved = environ.get(name)
        if not resolved:
            raise ConfigError(INVALID_CONFIG, f"{what} refers to ${name}, which is not set")
        return resolved

    expanded = Path(_PATH_VAR.sub(substitute, value)).expanduser()
    if not expanded.is_absolute():
        expanded = base / expanded
    return Path(os.path.normpath(expanded))


def integer(raw: Mapping[str, Any], dotted: str, default: int, minimum: int | None) -> int:
    """The integer setting `dotted` (its last part is the key in `raw`); integer strings are
    accepted, booleans are not; raises ConfigError naming the setting."""
    key = dotted.rsplit(".", 1)[1]
    value = raw.get(key, default)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be at least {minimum}, got {value}")
    return value


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(raw: Mapping[str, Any], dotted: str, default_s: float, *, minimum_s: float) -> float:
    """The duration setting `dotted` in seconds: `90s`, `30m`, `1h`, `2d`, or a number of
    seconds; raises ConfigError naming the setting."""
    key = dotted.rsplit(".", 1)[1]
    value = raw.get(key)
    if value is None:
        return default_s
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value)):
        seconds = float(match[1]) * _UNIT_S[match[2]]
    if seconds is None:
        raise ConfigError(
            INVALID_CONFIG, f"{dotted} must be a duration like 30m, 1h or 90s, got {value!r}"
        )
    if seconds < minimum_s:
        raise ConfigError(
            INVALID_CONFIG, f"{dotted} must be at least {minimum_s:g}s, got {value!r}"
        )
    return seconds


def optional_text(raw: Mapping[str, Any], dotted: str) -> str | None:
    """The text setting `dotted` (its last part is the key in `raw`), stripped; None when
    absent; raises ConfigError naming the setting when it is not a non-empty string."""
    value = raw.get(dotted.rsplit(".", 1)[1])
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be a non-empty string")
    return value.strip()


def section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The map `raw[name]`, empty when absent; raises ConfigError when it is not a map."""
    value = raw.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(INVALID_CONFIG, f"{name} must be a map of settings")
    return value


def str_list(
    raw: Mapping[str, Any],
    where: str,
    key: str,
    default: tuple[str, ...],
    *,
    keep_blank: bool = False,
) -> tuple[str, ...]:
    """The list of text `raw[key]`, called `where.key` in errors (a single string counts as a
    list of one); blank items are dropped unless `keep_blank`."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(INVALID_CONFIG, f"{where}.{key} must be a list of strings")
    return tuple(item for item in value if keep_blank or item.strip())


_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def env_patterns(value: object, problem: str) -> tuple[str, ...]:
    """Variable names (`GOPATH`) or prefixes ending in `*` (`NPM_CONFIG_*`), one or a list;
    raises ConfigError with `problem` as its message, since each setting words it its own way."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(
        isinstance(n, str) and _ENV_PATTERN.match(n) for n in items
    ):
        raise ConfigError(INVALID_CONFIG, problem)
    return tuple(items)

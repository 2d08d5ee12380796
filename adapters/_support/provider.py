"""Reading an adapter's `tracker.provider` block: typed keys and secrets with clear errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.config.fields import env_reference
from symphony.tracker.contract import INVALID_TRACKER_CONFIG, MISSING_TRACKER_SECRET, TrackerError


def provider_str(
    provider: Mapping[str, Any], key: str, *, required: bool = False, default: str | None = None
) -> str | None:
    value = provider.get(key, default)
    if value is None:
        if required:
            raise TrackerError(INVALID_TRACKER_CONFIG, f"tracker.provider.{key} is required")
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise TrackerError(
            INVALID_TRACKER_CONFIG, f"tracker.provider.{key} must be a non-empty string"
        )
    return value.strip()


@dataclass(frozen=True, slots=True)
class Secret:
    """A credential from `tracker.provider`, and the environment variable it was read from."""

    value: str
    env_name: str | None
    """The variable it came from: removed from agent environments."""


def provider_secret(
    provider: Mapping[str, Any], key: str, default_env: str, environ: Mapping[str, str]
) -> Secret:
    """A credential: `provider.<key>` as `$VAR`, a literal, or `$<default_env>` when omitted.

    An unset or empty variable counts as missing. Messages name the variable, never the value.
    """
    raw = provider.get(key, f"${default_env}")
    if not isinstance(raw, str) or not raw.strip():
        raise TrackerError(
            INVALID_TRACKER_CONFIG,
            f"tracker.provider.{key} must be a string such as ${default_env}",
        )
    name = env_reference(raw)
    if name is None:
        return Secret(raw.strip(), None)
    value = environ.get(name, "")
    if not value.strip():
        raise TrackerError(
            MISSING_TRACKER_SECRET,
            f"tracker.provider.{key} refers to ${name}, which is not set; export it in the "
            "daemon's environment",
        )
    return Secret(value.strip(), name)


def optional_secret(
    provider: Mapping[str, Any], key: str, environ: Mapping[str, str]
) -> Secret | None:
    """`provider.<key>` as a credential when the workflow sets it (`$VAR` or a literal), else
    None; a variable that is not set is an error as for `provider_secret`."""
    if provider.get(key) is None:
        return None
    return provider_secret(provider, key, "", environ)

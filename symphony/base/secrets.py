"""Masking the secret values the daemon knows (its tracker's token, webhook secrets) wherever
text leaves it: log records, the status API and dashboard, the terminal table, gate output in
comments, notes written to memory.

There is one masker per daemon: the orchestrator owns it and sets the values its tracker names
(`secret_env_names`); the log configuration and every surface that shows text take that same
object, passed explicitly.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TypeVar

import orjson

REDACTED = "[redacted]"
_REDACTED_BYTES = REDACTED.encode()
T = TypeVar("T")

TOKEN_SHAPES = (
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens: personal, OAuth, server, user, refresh
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained personal tokens
    r"\bglpat-[A-Za-z0-9_\-]{20,}",  # GitLab personal access tokens
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}",  # OpenAI and Anthropic API keys
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
)
"""Credentials recognized by their shape, whoever's they are: masked even when the daemon was
never told the value (a CI log that echoes a token it does not know)."""
_SHAPES = re.compile("|".join(TOKEN_SHAPES))
_SIGNS = ("_", "-", "AKIA", "ASIA", "earer", "EARER")
"""One of these is in any text a shape or a `Bearer` value could match."""
_BEARER = re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]{8,}")
_SHAPES_BYTES = re.compile(b"|".join(shape.encode() for shape in TOKEN_SHAPES))
_BEARER_BYTES = re.compile(rb"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]{8,}")


CREDENTIAL_NAME = re.compile(
    r"token|secret|passw(or)?d|api_?key|private_?key|access_?key", re.IGNORECASE
)
"""A variable or setting named like a credential (`GITHUB_TOKEN`, `ANTHROPIC_API_KEY`)."""


def credential_variables(environ: Mapping[str, str]) -> list[str]:
    """The values of the variables named like a credential: the daemon holds them, so it
    masks them."""
    return [value for name, value in environ.items() if value and CREDENTIAL_NAME.search(name)]


def mask_shapes(text: str) -> str:
    """`text` with every credential-shaped token (`TOKEN_SHAPES`, a `Bearer` value) masked."""
    if not any(sign in text for sign in _SIGNS):
        return text  # the common case: nothing shaped like a credential can be in it
    text = _SHAPES.sub(REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


class SecretMasker:
    """Replaces known secret values wherever they appear in a record's strings."""

    def __init__(self) -> None:
        self._secrets: tuple[str, ...] = ()
        self._encoded: tuple[bytes, ...] = ()
        self._sources: dict[str, frozenset[str]] = {}

    def set(self, values: Iterable[str], *, source: str = "") -> None:
        """The secrets `source` knows now (replacing what it knew): each workflow of a fleet
        sets its own, and every one of them is masked everywhere."""
        self._sources[source] = frozenset(values)
        known = set().union(*self._sources.values())
        # Longest first so a secret containing another is masked whole; short values are skipped
        # because masking them would garble ordinary text.
        self._secrets = tuple(sorted({v for v in known if len(v) >= 6}, key=len, reverse=True))
        # In a JSON document a secret appears as written or, if it has characters JSON escapes,
        # in its escaped form.
        self._encoded = tuple(
            dict.fromkeys(
                form for v in self._secrets for form in (v.encode(), orjson.dumps(v)[1:-1])
            )
        )

    def mask_json(self, document: bytes) -> bytes:
        """A JSON document with secrets masked inside its strings."""
        for form in self._encoded:
            if form in document:
                document = document.replace(form, _REDACTED_BYTES)
        document = _SHAPES_BYTES.sub(_REDACTED_BYTES, document)
        return _BEARER_BYTES.sub(lambda m: m.group(1) + _REDACTED_BYTES, document)

    def mask(self, text: str) -> str:
        """`text` with every known secret value and every credential-shaped token masked."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return mask_shapes(text)

    def mask_value(self, value: Any) -> Any:
        """`value` with secrets masked in every string inside it (lists and maps walked)."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, list | tuple):
            return [self.mask_value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.mask_value(item) for key, item in value.items()}
        return value

    def __call__(
        self, _: Any, __: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if isinstance(value, str):
                event[key] = self.mask(value)
            elif value is not None and not isinstance(value, int | float | bool):
                event[key] = self.mask(str(value))
        return event

    def mask_fields(self, value: T) -> T:
        """A frozen dataclass (and those inside its tuples) with every string field masked:
        what comes in from outside (a pull request's reading), masked where it enters."""
        if isinstance(value, str):
            return self.mask(value)  # type: ignore[return-value]
        if isinstance(value, tuple):
            return tuple(self.mask_fields(item) for item in value)  # type: ignore[return-value]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {}
            for field in dataclasses.fields(value):
                if not field.init:
                    continue
                before = getattr(value, field.name)
                after = self.mask_fields(before)
                if after is not before and after != before:
                    changes[field.name] = after
            return dataclasses.replace(value, **changes) if changes else value
        return value

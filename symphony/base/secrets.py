"""Masking the secret values the daemon knows (its tracker's token, webhook secrets) wherever
text leaves it: log records, the status API and dashboard, the terminal table, gate output in
comments, notes written to memory.

There is one masker per daemon: the orchestrator owns it and sets the values its tracker names
(`secret_env_names`); the log configuration and every surface that shows text take that same
object, passed explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

import orjson

REDACTED = "[redacted]"
_REDACTED_BYTES = REDACTED.encode()


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
        return document

    def mask(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def mask_value(self, value: Any) -> Any:
        """`value` with secrets masked in every string inside it (lists and maps walked)."""
        if not self._secrets:
            return value
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
        if self._secrets:
            for key, value in event.items():
                if isinstance(value, str):
                    event[key] = self.mask(value)
                elif value is not None and not isinstance(value, int | float | bool):
                    event[key] = self.mask(str(value))
        return event

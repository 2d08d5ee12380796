"""`trust:`: whose comments and reviews reach an agent as the words of someone the workflow
vouches for, and what happens to everyone else's.

```yaml
trust:
  authors: [members, dependabot]   # default: [members]
  untrusted: quote                 # or omit
```

`members` stands for whoever the tracker or code host counts as one (a GitHub repository's
owner, members and collaborators, a GitLab project's members, a Linear or Kaiten workspace's
members, everyone on the local board); `everyone` trusts every author; any other entry is a
name (a login, a user name), compared without regard to case. Every text from outside the
workflow is fenced in the prompt whoever wrote it (`symphony.base.fences`); a comment or
review by an author outside the list is labelled untrusted (`quote`) or left out (`omit`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.config.fields import INVALID_CONFIG, ConfigError, str_list

TRUST_KEYS = ("authors", "untrusted")
MEMBERS = "members"
EVERYONE = "everyone"


class UntrustedText(enum.StrEnum):
    QUOTE = "quote"
    """In the prompt, fenced and labelled untrusted."""
    OMIT = "omit"
    """Not in the prompt at all."""


@dataclass(frozen=True, slots=True)
class TrustSettings:
    """`trust:`: whose comments and reviews reach an agent as trusted words, and what becomes of
    everyone else's."""

    authors: tuple[str, ...] = (MEMBERS,)
    """`members`, `everyone` and names, lower-cased."""
    untrusted: UntrustedText = UntrustedText.QUOTE

    @property
    def members(self) -> bool:
        return MEMBERS in self.authors

    @property
    def everyone(self) -> bool:
        return EVERYONE in self.authors

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a for a in self.authors if a not in (MEMBERS, EVERYONE))


def parse_trust(raw: Mapping[str, Any]) -> TrustSettings:
    authors = str_list(raw, "trust", "authors", TrustSettings().authors)
    if not authors:
        raise ConfigError(
            INVALID_CONFIG, "trust.authors names nobody: use `members`, `everyone` or names"
        )
    value = raw.get("untrusted", UntrustedText.QUOTE.value)
    try:
        untrusted = UntrustedText(value)
    except ValueError:
        raise ConfigError(
            INVALID_CONFIG, f"trust.untrusted must be quote or omit, not {value!r}"
        ) from None
    return TrustSettings(tuple(a.strip().lower().lstrip("@") for a in authors), untrusted)

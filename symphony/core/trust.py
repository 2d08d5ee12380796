"""Whose words an agent reads as someone's the workflow vouches for (`trust:`), and how a
comment or review reaches its prompt: quoted under its author's name, quoted as untrusted, or
left out.

Every text from outside the workflow is fenced whoever wrote it (`symphony.base.fences`):
trust only decides the label, and with `trust.untrusted: omit` whether it is there at all. A
tracker or code host says whether an author is one of its members (`Comment.author_member`,
`ReviewComment.author_member`); when it cannot say (None), the author is not counted as one.
"""

from __future__ import annotations

from symphony.base.fences import by, quoted
from symphony.config.trust import TrustSettings, UntrustedText


def trusted(author: str | None, member: bool | None, trust: TrustSettings) -> bool:
    """Whether `author` (a member of the tracker or host: `member`) is trusted."""
    if trust.everyone:
        return True
    if author is not None and author.strip().lower().lstrip("@") in trust.names:
        return True
    return trust.members and member is True


def material(
    text: str, what: str, author: str | None, member: bool | None, trust: TrustSettings
) -> str | None:
    """`text` (a `what`: `comment`, `review`) as a prompt gets it: quoted and labelled with its
    author, labelled untrusted when they are not trusted, or None when such text is omitted."""
    if trusted(author, member, trust):
        return quoted(text, by(what, author))
    if trust.untrusted is UntrustedText.OMIT:
        return None
    return quoted(text, by(f"untrusted {what}", author))


def describe(trust: TrustSettings, members: str) -> list[str]:
    """What `check` says of the trust settings; `members` is who the tracker counts as one."""
    if trust.everyone:
        trusted_ones = "every author"
    else:
        parts = [members] if trust.members else []
        parts += [f"@{name}" for name in trust.names]
        trusted_ones = ", ".join(parts) or "nobody"
    others = (
        "quoted as untrusted" if trust.untrusted is UntrustedText.QUOTE else "left out of prompts"
    )
    return [
        f"trusted authors: {trusted_ones}",
        f"comments and reviews by anyone else: {others} (trust.untrusted: {trust.untrusted})",
        "every ticket, comment, review, log and note reaches an agent fenced as material",
    ]

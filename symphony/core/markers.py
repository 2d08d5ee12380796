"""How the daemon recognizes its own comments on any tracker: a plain last line naming the
comment's kind and, where a write must be idempotent, its key."""

from __future__ import annotations

MARKER_PREFIX = "— symphony · "


def marked(body: str, kind: str, key: str | None = None) -> str:
    """`body` with a last line naming its kind (and an idempotency key): plain text, so every
    tracker keeps it whatever it does to Markdown or HTML."""
    tag = f"{kind} · {key}" if key else kind
    return f"{body.rstrip()}\n\n{MARKER_PREFIX}{tag}"


def marker_of(body: str) -> tuple[str, str | None] | None:
    """(kind, key) of a comment the daemon marked, or None for anyone else's."""
    last = body.rstrip().rsplit("\n", 1)[-1].strip()
    if not last.startswith(MARKER_PREFIX):
        return None
    parts = [part.strip() for part in last[len(MARKER_PREFIX) :].split("·")]
    if not parts or not parts[0]:
        return None
    return parts[0], (parts[1] if len(parts) > 1 and parts[1] else None)


def unforgeable(body: str) -> str:
    """Someone else's text (an agent's comment) with every line that reads as the daemon's
    marker escaped, so the daemon never takes it for a comment of its own (a plan, evidence)."""
    lines = body.split("\n")
    return "\n".join(
        "\\" + line if line.strip().startswith(MARKER_PREFIX) else line for line in lines
    )


def unmarked(body: str) -> str:
    """The text of a marked comment without its marker line."""
    if marker_of(body) is None:
        return body
    return body.rstrip().rsplit("\n", 1)[0].rstrip()

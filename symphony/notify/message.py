"""What a batch of deliveries says: one notice, or a digest of several, as a subject, plain
text and the JSON a webhook receives. No secret reaches a message: the texts come from ticket
identifiers, states and the daemon's own reasons, and the daemon masks them once more before
sending."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from symphony.core.notifications import Delivery, Notice


@dataclass(frozen=True, slots=True)
class Message:
    """What a channel sends for a batch of deliveries: subject, plain text and a webhook's JSON."""

    id: str
    """The same for the same deliveries, so a receiver can drop a repeat."""
    subject: str
    text: str
    body: dict[str, Any]
    """What a webhook receives."""


def review_link(review_url: str | None, notice: Notice) -> str | None:
    """The review page, opened at the notice's ticket."""
    if review_url is None:
        return None
    if notice.identifier is None:
        return f"{review_url}/"
    return f"{review_url}/review#{quote(notice.identifier, safe='')}"


def compose(
    channel: str,
    deliveries: Sequence[Delivery],
    review_url: str | None,
    mask: Callable[[str], str] = lambda text: text,
) -> Message:
    notices = [d.notice for d in deliveries]
    digest = hashlib.sha256("\n".join([channel, *(n.key for n in notices)]).encode()).hexdigest()[
        :32
    ]
    lines = []
    entries = []
    for notice in notices:
        link = review_link(review_url, notice)
        title, detail = mask(notice.title), mask(notice.detail)
        lines.append(
            "- " + title + (f" ({detail})" if detail else "") + (f"\n  {link}" if link else "")
        )
        entries.append({**notice.to_json(), "title": title, "detail": detail, "url": link})
    if len(notices) == 1:
        notice = notices[0]
        subject = mask(notice.title)
        text = lines[0][2:]
    else:
        subject = f"symphony: {len(notices)} updates"
        text = f"{len(notices)} updates since the last digest:\n" + "\n".join(lines)
    return Message(
        digest, subject, text,
        {"id": digest, "digest": len(notices) > 1, "notices": entries},
    )  # fmt: skip

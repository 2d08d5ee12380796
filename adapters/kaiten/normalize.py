"""Kaiten card objects turned into normalized Issues.

- `id` is the card id as text; `identifier` is `KT-<id>` (Kaiten shows cards by number only, and
  a prefix keeps workspace names and logs unambiguous).
- `priority` is 1 for an `asap` (expedite) card and null otherwise: Kaiten has no other rank.
- `labels` are the tag names, lower-cased; `assignee_id` is the responsible member (type 2).
- `url` is `<web>/space/<space_id>/card/<id>` when `provider.space_id` is set, else `<web>/<id>`
  (Kaiten's short card address).
- A comment's `author` is the `full_name` (else `username`) of the `author` user Kaiten embeds
  in it; the published comment shape names only `author_id`, so without that object it is null.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from typing import Any

from symphony.base.issue import BlockerRef, Issue, normalize_labels
from symphony.tracker.contract import Comment

from .._support.errors import Malformed as Malformed
from .._support.normalize import as_int, parse_timestamp, text_or_none

IDENTIFIER_PREFIX = "KT-"
RESPONSIBLE = 2
"""Kaiten member type: 1 member, 2 responsible."""
ON_BOARD = 1
"""Kaiten card `condition`: 1 on the board, 2 archived (3 deleted on some installations)."""
CARD_DONE = 3
"""Kaiten card `state`: 1 queued, 2 in progress, 3 done (follows the column's type)."""


def identifier(card_id: int) -> str:
    return f"{IDENTIFIER_PREFIX}{card_id}"


def card_number(name: str) -> int | None:
    """The card id an identifier names: `KT-42` (any case) or a bare `42`; None otherwise."""
    text = name.strip()
    if text[: len(IDENTIFIER_PREFIX)].upper() == IDENTIFIER_PREFIX:
        text = text[len(IDENTIFIER_PREFIX) :]
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        return None
    return int(text)


def comment_from(raw: Any) -> Comment | None:
    """A Kaiten comment object as a `Comment`; None when it has no integer id or is deleted."""
    if not isinstance(raw, Mapping) or raw.get("deleted") is True:
        return None
    comment_id = as_int(raw.get("id"))
    if comment_id is None:
        return None
    text = raw.get("text")
    author = raw.get("author")
    name = user_name(author)
    created = parse_timestamp(raw.get("created"))
    return Comment(
        id=str(comment_id),
        body=text if isinstance(text, str) else "",
        author=name.strip() if name else None,
        created_at=created.astimezone(UTC) if created else None,
        # Only the company's users can comment on a card: an author is a member.
        author_member=True if name else None,
    )


def required(card: Any) -> tuple[int, str, int]:
    """(id, title, column_id) of a card, or `Malformed`."""
    if not isinstance(card, Mapping):
        raise Malformed("card is not an object", "?")
    card_id = as_int(card.get("id"))
    key = str(card_id) if card_id is not None else "?"
    title = text_or_none(card.get("title"))
    column_id = as_int(card.get("column_id"))
    missing = [
        name
        for name, value in (("id", card_id), ("title", title), ("column_id", column_id))
        if value is None
    ]
    if missing:
        raise Malformed(f"missing or invalid {', '.join(missing)}", key)
    assert card_id is not None and title is not None and column_id is not None
    return card_id, title, column_id


def user_name(user: Any) -> str | None:
    """A Kaiten `User`'s full name, else its username."""
    if not isinstance(user, Mapping):
        return None
    name = text_or_none(user.get("full_name")) or text_or_none(user.get("username"))
    return name.strip() if name else None


def blocker_ids(card: Mapping[str, Any]) -> list[int]:
    raw = card.get("blocked_by_card_ids")
    ids = [as_int(x) for x in raw] if isinstance(raw, list) else []
    return list(dict.fromkeys(x for x in ids if x is not None and x > 0))


def card_issue(
    card: Mapping[str, Any],
    *,
    state: str,
    blockers: tuple[BlockerRef, ...],
    still_blocked: bool,
    web_url: str,
    space_id: int | None,
) -> Issue:
    """The Issue for a card already checked with `required`. `still_blocked` is the caller's
    verdict on `blockers` (it needs other cards' columns)."""
    card_id, title, column_id = required(card)
    # `blocked: true` with no blocking card is a block set by hand (with a reason): only a
    # person releases it, so the card waits.
    blocked_by_hand = card.get("blocked") is True and not blocker_ids(card)
    url = (
        f"{web_url}/space/{space_id}/card/{card_id}"
        if space_id is not None
        else f"{web_url}/{card_id}"
    )
    return Issue(
        id=str(card_id),
        identifier=identifier(card_id),
        title=title.strip(),
        state=state,
        dispatchable=not still_blocked and not blocked_by_hand,
        description=text_or_none(card.get("description")),
        priority=1 if card.get("asap") is True else None,
        url=url,
        assignee_id=_responsible(card.get("members")),
        labels=normalize_labels(
            [t.get("name") for t in _list(card.get("tags")) if isinstance(t, Mapping)]
        ),
        blocked_by=blockers,
        created_at=parse_timestamp(card.get("created")),
        updated_at=parse_timestamp(card.get("updated")),
        author=user_name(card.get("owner")),
        native_ref={
            "card_id": card_id,
            "board_id": as_int(card.get("board_id")),
            "column_id": column_id,
            "lane_id": as_int(card.get("lane_id")),
        },
    )


def _responsible(members: Any) -> str | None:
    for member in _list(members):
        if isinstance(member, Mapping) and as_int(member.get("type")) == RESPONSIBLE:
            member_id = as_int(member.get("id"))
            if member_id is not None:
                return str(member_id)
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []

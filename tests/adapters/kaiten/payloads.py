"""Kaiten response bodies shaped like the real API (checked in test_contract.py)."""

from __future__ import annotations

from typing import Any

DOMAIN = "acme"
API = f"https://{DOMAIN}.kaiten.ru/api/latest"
BOARD = 10
SPACE = 5
STAMP = "2026-01-02T03:04:05.000Z"

# Board 10: Backlog (queue) / In Progress (in progress, with sub-columns Doing and Review) /
# Done (done). Sub-columns carry their parent in `column_id`.
BACKLOG, IN_PROGRESS, DOING, REVIEW, DONE = 101, 102, 121, 122, 103


def column(
    column_id: int, title: str, kind: int, *, parent: int | None = None, order: float = 1.0
) -> dict[str, Any]:
    return {
        "id": column_id,
        "uid": f"col-{column_id}",
        "title": title,
        "sort_order": order,
        "col_count": 1,
        "wip_limit": None,
        "type": kind,
        "rules": 0,
        "board_id": BOARD,
        "column_id": parent,
        "created": STAMP,
        "updated": STAMP,
    }


def columns() -> list[dict[str, Any]]:
    """`GET /boards/10/columns` as it lists them: top-level and sub-columns together."""
    return [
        column(BACKLOG, "Backlog", 1, order=1),
        column(IN_PROGRESS, "In Progress", 2, order=2),
        column(DOING, "Doing", 2, parent=IN_PROGRESS, order=1),
        column(REVIEW, "Review", 2, parent=IN_PROGRESS, order=2),
        column(DONE, "Done", 3, order=3),
    ]


def card(
    card_id: int,
    column_id: int = BACKLOG,
    *,
    title: str | None = None,
    state: int = 1,
    board_id: int = BOARD,
    lane_id: int | None = 7,
    tags: list[str] | None = None,
    asap: bool = False,
    blocked: bool = False,
    blocked_by: list[int] | None = None,
    responsible: int | None = None,
    condition: int = 1,
    description: str | None = "Do the thing.",
) -> dict[str, Any]:
    members = []
    if responsible is not None:
        members.append({"id": responsible, "full_name": "Amy", "type": 2})
        members.append({"id": responsible + 1, "full_name": "Bob", "type": 1})
    return {
        "id": card_id,
        "uid": f"card-{card_id}",
        "title": title if title is not None else f"Card {card_id}",
        "description": description,
        "state": state,
        "condition": condition,
        "archived": condition == 2,
        "asap": asap,
        "blocked": blocked,
        "blocking_card": False,
        "board_id": board_id,
        "column_id": column_id,
        "lane_id": lane_id,
        "sort_order": float(card_id),
        "owner_id": 1,
        "created": "2026-01-01T00:00:00.000Z",
        "updated": STAMP,
        "column": {"id": column_id, "title": "inline", "type": state},
        "lane": {"id": lane_id, "title": "Default"},
        "tags": [{"id": i + 1, "name": name, "color": 1} for i, name in enumerate(tags or [])],
        "tag_ids": [i + 1 for i in range(len(tags or []))],
        "members": members,
        "blocked_by_card_ids": list(blocked_by or []),
        "blocks_card_ids": [],
    }


def user(
    user_id: int = 1, full_name: str = "Symphony Bot", username: str = "symphony"
) -> dict[str, Any]:
    """A `User` as Kaiten embeds it in objects it records an author for."""
    return {
        "id": user_id,
        "uid": f"user-{user_id}",
        "full_name": full_name,
        "username": username,
        "email": f"{username}@example.com",
        "activated": True,
        "initials": full_name[:1],
        "avatar_type": 2,
        "avatar_initials_url": f"https://acme.kaiten.ru/avatars/{user_id}.png",
        "avatar_uploaded_url": None,
        "created": STAMP,
        "updated": STAMP,
    }


def comment(
    comment_id: int,
    card_id: int,
    text: str,
    *,
    created: str = STAMP,
    author: dict[str, Any] | None = None,
    deleted: bool = False,
) -> dict[str, Any]:
    """A `Comment`. The published shape names only `author_id`; Kaiten also embeds the
    author's `User` as `author`, as for its other authored objects (`author=` adds it)."""
    body: dict[str, Any] = {
        "id": comment_id,
        "uid": f"comment-{comment_id}",
        "text": text,
        "type": 1,
        "edited": False,
        "card_id": card_id,
        "author_id": author["id"] if author else 1,
        "internal": False,
        "deleted": deleted,
        "created": created,
        "updated": created,
    }
    if author is not None:
        body["author"] = author
    return body


def blocker(blocker_id: int, card_id: int, blocker_card_id: int) -> dict[str, Any]:
    """A `CardBlocker`: `card_id` is blocked by the card `blocker_card_id`."""
    return {
        "id": blocker_id,
        "uid": f"blocker-{blocker_id}",
        "reason": None,
        "card_id": card_id,
        "blocker_id": 1,
        "blocker_card_id": blocker_card_id,
        "blocker_card_title": f"Card {blocker_card_id}",
        "released": False,
        "released_by_id": None,
        "due_date": None,
        "due_date_time_present": False,
        "created": STAMP,
        "updated": STAMP,
    }


def external_link(link_id: int, card_id: int, url: str, description: str | None) -> dict[str, Any]:
    return {
        "id": link_id,
        "url": url,
        "description": description or url,
        "card_id": card_id,
        "external_link_id": link_id,
        "created": STAMP,
        "updated": STAMP,
    }

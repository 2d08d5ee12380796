"""A GitLab project's members as its members API serves them, for the fakes.

`GET /projects/:id/members/all` lists every member (direct, inherited, invited), filtered by
`user_ids[]` (or a comma-separated `user_ids`) when given and paged as GitLab pages (`per_page`
at most 100, `x-next-page` empty on the last page); `GET /projects/:id/members/all/:user_id`
answers one member, or 404 for a user who is not one. `readable = False` answers both 403, as to
a token that may not see the project's members. Users are known by the id `payloads.user`
gives their name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.adapters.gitlab import payloads

DEVELOPER = 30
MAINTAINER = 40


@dataclass
class FakeMembers:
    levels: dict[str, int] = field(
        default_factory=lambda: {"symphony-bot": MAINTAINER, "amy": DEVELOPER}
    )
    """username -> access level; the token's user and the fakes' usual author by default."""
    states: dict[str, str] = field(default_factory=dict)
    """username -> `membership_state` other than active (`awaiting`)."""
    readable: bool = True
    asked: list[dict[str, list[str]]] = field(default_factory=list)
    """The query of every list request, in order."""

    def add(self, username: str, level: int = DEVELOPER, state: str = "active") -> None:
        self.levels[username] = level
        self.states[username] = state

    def remove(self, username: str) -> None:
        self.levels.pop(username, None)

    def entry(self, username: str) -> dict[str, Any]:
        return payloads.member(username, self.levels[username], self.states.get(username, "active"))

    def handle(
        self, method: str, rest: str, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], Any] | None:
        """The answer to `rest` (the path after the project), or None when it is not a
        members path."""
        one = re.fullmatch(r"/members/all/(\d+)", rest)
        if rest != "/members/all" and one is None:
            return None
        if method != "GET":
            return 405, {}, payloads.error("405 Method Not Allowed")
        if not self.readable:
            return 403, {}, payloads.error("403 Forbidden")
        by_id = {payloads.user(name)["id"]: name for name in sorted(self.levels)}
        if one is not None:
            name = by_id.get(int(one.group(1)))
            if name is None:
                return 404, {}, payloads.error("404 Not found")
            return 200, {}, self.entry(name)
        self.asked.append(query)
        wanted = [x for v in query.get("user_ids[]", []) for x in v.split(",")]
        wanted += [x for v in query.get("user_ids", []) for x in v.split(",")]
        ids = {int(x) for x in wanted if x.strip()}
        everything = [self.entry(n) for i, n in by_id.items() if not ids or i in ids]
        per_page = min(int(query.get("per_page", ["20"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        more = page * per_page < len(everything)
        headers = {
            "x-page": str(page),
            "x-per-page": str(per_page),
            "x-next-page": str(page + 1) if more else "",
            "x-total": str(len(everything)),
        }
        return 200, headers, everything[(page - 1) * per_page : page * per_page]


# The members API is not in the published subsets (tracker-schemas/gitlab): the contract tests
# hold its requests and answers to GitLab's members API documentation (`doc/api/members.md`).
MEMBERS_PATH = re.compile(r"/api/v4/projects/[^/]+/members/all(?:/\d+)?")
MEMBERS_QUERY = frozenset(
    {"query", "user_ids", "skip_users", "show_seat_info", "state", "page", "per_page"}
)
"""The documented parameters of `GET /projects/:id/members/all`, and pagination's."""
MEMBER_FIELDS = frozenset(
    {
        "id", "username", "name", "state", "locked", "avatar_url", "web_url", "access_level",
        "created_at", "created_by", "expires_at", "group_saml_identity", "email",
        "membership_state", "member_role",
    }
)  # fmt: skip
"""The documented fields of a member entry."""


def documented_members_request(
    method: str, path: str, query: dict[str, list[str]], answer: Any
) -> str | None:
    """The documented operation a members request is (`GET .../members/all`), after checking
    its parameters and the answer's fields; None for any other request."""
    if MEMBERS_PATH.fullmatch(path) is None:
        return None
    assert method == "GET", path
    unknown = {k.removesuffix("[]") for k in query} - MEMBERS_QUERY
    assert not unknown, f"GET {path} has no parameter(s) {unknown}"
    entries = answer if isinstance(answer, list) else [answer]
    for entry in entries:
        if isinstance(entry, dict) and "message" not in entry:
            assert set(entry) <= MEMBER_FIELDS, set(entry) - MEMBER_FIELDS
            assert {"id", "username", "access_level"} <= set(entry)
    return "/api/v4/projects/{id}/members/all" + ("/{user_id}" if path[-1].isdigit() else "")

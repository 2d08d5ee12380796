"""Whether the authors of notes are members of a GitLab project, for `trust:` (`author_member`).

GitLab's notes do not say it, so the project's members are asked: `GET
/projects/:id/members/all` (direct members, those of its groups and of groups it is shared
with), filtered to the authors in question with `user_ids[]` and paged as every GitLab list.
One request answers every author of a read; an answer is kept for `ttl_s` (a member or not
alike), so a poll whose authors are known costs nothing. An author the list does not name is
not a member. A member counts from Guest up, while the membership and the account are active:
minimal access (`5`) is a group's way of letting someone sign in, a membership `awaiting` a
seat grants nothing yet, and a blocked account no longer acts. A project whose members the
token may not list (403) leaves every author unknown (None, which `trust:` counts as not a
member) until the answer expires; any other failure is the caller's, as a failed read of the
notes would be.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import structlog

from symphony.tracker.contract import TRACKER_RESPONSE, TrackerError

from .._support.http import HttpClient
from .._support.normalize import as_int
from .reads import next_page

log = structlog.get_logger(__name__)

GUEST = 10
"""The lowest role of a member (`Gitlab::Access`); minimal access (5) and none (0) are below."""
TTL_S = 300.0
"""How long an answer about an author stands: a new member is seen within five minutes."""
IDS_PER_REQUEST = 100
"""Authors asked about in one request (GitLab's largest page), keeping the URL short."""
MAX_PAGES = 5


def author_id(record: Any) -> int | None:
    """The user id of a note's (or an approval's) `author`/`user` object."""
    return as_int(record.get("id")) if isinstance(record, Mapping) else None


def counts_as_member(member: Any) -> bool:
    """An entry of the members list that makes its user one of the project's people."""
    if not isinstance(member, Mapping):
        return False
    level = as_int(member.get("access_level"))
    active = all(member.get(key, "active") == "active" for key in ("membership_state", "state"))
    return level is not None and level >= GUEST and active


class ProjectMembers:
    """The members of one project (`project_path`: `/projects/<id or encoded path>`) as
    GitLab's members API says, asked for by user id and remembered for `ttl_s`."""

    def __init__(
        self,
        http: HttpClient,
        project_path: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl_s: float = TTL_S,
    ) -> None:
        self.http = http
        self._path = f"{project_path}/members/all"
        self._clock = clock
        self._ttl_s = ttl_s
        self._known: dict[int, tuple[bool | None, float]] = {}
        """user id -> (member, or None when GitLab would not say; when that was learned)."""

    async def of(self, users: Iterable[int | None]) -> dict[int, bool | None]:
        """Whether each of `users` is a member; one request for all those not known now."""
        now = self._clock()
        wanted = {u for u in users if u is not None}
        fresh = {u: k[0] for u in wanted if (k := self._known.get(u)) and now - k[1] < self._ttl_s}
        unknown = sorted(wanted - set(fresh))
        for start in range(0, len(unknown), IDS_PER_REQUEST):
            chunk = unknown[start : start + IDS_PER_REQUEST]
            for user, member in (await self._ask(chunk)).items():
                self._known[user] = (member, now)
                fresh[user] = member
        return fresh

    async def _ask(self, users: Collection[int]) -> dict[int, bool | None]:
        url = self._path
        params: Mapping[str, Any] | None = {"user_ids[]": list(users), "per_page": IDS_PER_REQUEST}
        found: dict[int, bool | None] = dict.fromkeys(users, False)
        for _ in range(MAX_PAGES):
            answer = await self.http.request("GET", url, params=params, ok=(200, 403))
            if answer.status == 403:
                log.warning(
                    "gitlab members unreadable: no author counts as a member",
                    project=self._path.split("/")[2],
                )
                return dict.fromkeys(users)
            if not isinstance(answer.body, list):
                raise TrackerError(TRACKER_RESPONSE, f"GitLab {self._path} did not answer a list")
            for member in answer.body:
                user = author_id(member)
                if user in found:
                    found[user] = found[user] or counts_as_member(member)
            following = next_page(answer.headers, url, params)
            if following is None:
                break
            url, params = following
        return found

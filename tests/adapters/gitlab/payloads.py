"""GitLab REST bodies for the tests. Field names are those of the published subset's
`API_Entities_Issue` / `API_Entities_RelatedIssue` (the contract tests check every key), and
notes follow GitLab's notes API documentation (notes are not in the subset)."""

from __future__ import annotations

from typing import Any

BASE = "https://gitlab.example.com"
API = f"{BASE}/api/v4"
PROJECT = "acme/platform/widgets"
PROJECT_ID = 42
ISSUES = f"{API}/projects/acme%2Fplatform%2Fwidgets/issues"
STAMP = "2026-01-02T03:04:05Z"


def user(username: str = "amy", *, base: str = BASE) -> dict[str, Any]:
    return {
        "id": sum(map(ord, username)),
        "username": username,
        "name": username.title(),
        "state": "active",
        "locked": False,
        "avatar_url": None,
        "web_url": f"{base}/{username}",
    }


def issue(
    iid: int,
    title: str | None = None,
    *,
    labels: list[str] | None = None,
    state: str = "opened",
    project: str = PROJECT,
    project_id: int = PROJECT_ID,
    description: str | None = "Please do the thing.",
    assignee: str | None = None,
    base: str = BASE,
    updated_at: str = STAMP,
) -> dict[str, Any]:
    people = [user(assignee, base=base)] if assignee else []
    return {
        "id": project_id * 1000 + iid,
        "iid": iid,
        "project_id": project_id,
        "title": title or f"Issue {iid}",
        "description": description,
        "state": state,
        "created_at": "2026-01-01T00:00:00.000Z",
        "updated_at": updated_at,
        "closed_at": updated_at if state == "closed" else None,
        "closed_by": None,
        "labels": list(labels or []),
        "milestone": None,
        "assignees": people,
        "assignee": people[0] if people else None,
        "author": user("bob", base=base),
        "type": "ISSUE",
        "issue_type": "issue",
        "user_notes_count": 0,
        "merge_requests_count": 0,
        "upvotes": 0,
        "downvotes": 0,
        "due_date": None,
        "confidential": False,
        "discussion_locked": None,
        "web_url": f"{base}/{project}/-/issues/{iid}",
        "blocking_issues_count": 0,
        "references": {"short": f"#{iid}", "relative": f"#{iid}", "full": f"{project}#{iid}"},
        "subscribed": False,
        "moved_to_id": None,
    }


def link(target: dict[str, Any], link_type: str = "is_blocked_by") -> dict[str, Any]:
    """An entry of `GET …/issues/{iid}/links`: the other issue plus the link fields."""
    return {
        **target,
        "issue_link_id": 7000 + int(target["iid"]),
        "link_type": link_type,
        "link_created_at": STAMP,
        "link_updated_at": STAMP,
    }


NOTE_FIELDS = frozenset(
    {
        "id",
        "type",
        "body",
        "author",
        "created_at",
        "updated_at",
        "system",
        "noteable_id",
        "noteable_type",
        "noteable_iid",
        "project_id",
        "resolvable",
        "confidential",
        "internal",
    }
)
"""A note's fields per GitLab's notes API documentation (`doc/api/notes.md`)."""


def note(note_id: int, body: str, *, iid: int = 1, project_id: int = PROJECT_ID) -> dict[str, Any]:
    return {
        "id": note_id,
        "type": None,
        "body": body,
        "author": user("symphony-bot"),
        "created_at": STAMP,
        "updated_at": STAMP,
        "system": False,
        "noteable_id": project_id * 1000 + iid,
        "noteable_type": "Issue",
        "noteable_iid": iid,
        "project_id": project_id,
        "resolvable": False,
        "confidential": False,
        "internal": False,
    }


def error(message: str) -> dict[str, Any]:
    return {"message": message}

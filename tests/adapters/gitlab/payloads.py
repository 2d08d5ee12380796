"""GitLab REST bodies for the tests. Field names are those of the published subset's
`API_Entities_Issue`, `API_Entities_RelatedIssue`, `API_Entities_IssueLink`, `APIEntitiesNote`
and `APIEntitiesProjectLabel` (the contract tests check every key)."""

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


def issue_basic(target: dict[str, Any]) -> dict[str, Any]:
    """The short issue entity (`API_Entities_IssueBasic`) an issue link names its ends with."""
    return {k: v for k, v in target.items() if k not in ("references", "subscribed", "moved_to_id")}


def issue_link(
    link_id: int, source: dict[str, Any], target: dict[str, Any], link_type: str = "blocks"
) -> dict[str, Any]:
    """The answer of `POST …/issues/{iid}/links`. GitLab stores "A is blocked by B" as "B
    blocks A", and answers with the stored link."""
    return {
        "id": link_id,
        "source_issue": issue_basic(source),
        "target_issue": issue_basic(target),
        "link_type": link_type,
    }


def note(
    note_id: int,
    body: str,
    *,
    iid: int = 1,
    project_id: int = PROJECT_ID,
    author: str = "symphony-bot",
    created_at: str = STAMP,
    system: bool = False,
) -> dict[str, Any]:
    return {
        "id": note_id,
        "type": None,
        "body": body,
        "author": user(author),
        "created_at": created_at,
        "updated_at": created_at,
        "system": system,
        "noteable_id": project_id * 1000 + iid,
        "noteable_type": "Issue",
        "noteable_iid": iid,
        "project_id": project_id,
        "resolvable": False,
        "confidential": False,
        "internal": False,
        "imported": False,
        "imported_from": "none",
    }


def label(
    label_id: int, name: str, color: str = "#6699cc", description: str | None = None
) -> dict[str, Any]:
    return {
        "id": label_id,
        "name": name,
        "description": description,
        "description_html": description or "",
        "text_color": "#FFFFFF",
        "color": color,
        "archived": False,
        "open_issues_count": 0,
        "closed_issues_count": 0,
        "open_merge_requests_count": 0,
        "subscribed": False,
        "priority": None,
        "is_project_label": True,
    }


def error(message: Any) -> dict[str, Any]:
    return {"message": message}

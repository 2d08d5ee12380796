"""GitHub REST bodies for the tests, shaped as the published OpenAPI description requires (the
contract tests check every one of them), so the fakes cannot drift from the real API."""

from __future__ import annotations

import zlib
from typing import Any

API = "https://api.github.com"
WEB = "https://github.com"
REPO = "acme/widgets"
STAMP = "2026-01-02T03:04:05Z"


def user(login: str = "octocat", *, api: str = API, web: str = WEB) -> dict[str, Any]:
    base = f"{api}/users/{login}"
    return {
        "login": login,
        "id": 1,
        "node_id": "MDQ6VXNlcjE=",
        "avatar_url": "https://avatars.example.test/u/1",
        "gravatar_id": "",
        "url": base,
        "html_url": f"{web}/{login}",
        "followers_url": f"{base}/followers",
        "following_url": f"{base}/following{{/other_user}}",
        "gists_url": f"{base}/gists{{/gist_id}}",
        "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{base}/subscriptions",
        "organizations_url": f"{base}/orgs",
        "repos_url": f"{base}/repos",
        "events_url": f"{base}/events{{/privacy}}",
        "received_events_url": f"{base}/received_events",
        "type": "User",
        "site_admin": False,
    }


def label(name: str, *, repo: str = REPO, api: str = API) -> dict[str, Any]:
    return {
        "id": zlib.crc32(name.encode()),
        "node_id": f"LA_{zlib.crc32(name.encode())}",
        "url": f"{api}/repos/{repo}/labels/{name.replace(' ', '%20')}",
        "name": name,
        "description": None,
        "color": "ededed",
        "default": False,
    }


def issue(
    number: int,
    title: str | None = None,
    *,
    labels: list[str] | None = None,
    state: str = "open",
    repo: str = REPO,
    body: str | None = "Please do the thing.",
    assignee: str | None = None,
    blocked_by: int = 0,
    open_blockers: int | None = None,
    pull_request: bool = False,
    api: str = API,
    web: str = WEB,
    updated_at: str = STAMP,
) -> dict[str, Any]:
    """One issue object (`issues/get`, items of `issues/list-for-repo`)."""
    url = f"{api}/repos/{repo}/issues/{number}"
    kind = "pull" if pull_request else "issues"
    value: dict[str, Any] = {
        "id": 1000 + number,
        "node_id": f"I_node{number}",
        "url": url,
        "repository_url": f"{api}/repos/{repo}",
        "labels_url": f"{url}/labels{{/name}}",
        "comments_url": f"{url}/comments",
        "events_url": f"{url}/events",
        "html_url": f"{web}/{repo}/{kind}/{number}",
        "number": number,
        "state": state,
        "state_reason": "completed" if state == "closed" else None,
        "title": title if title is not None else f"Issue {number}",
        "body": body,
        "user": user(api=api, web=web),
        "labels": [label(name, repo=repo, api=api) for name in labels or []],
        "assignee": user(assignee, api=api, web=web) if assignee else None,
        "assignees": [user(assignee, api=api, web=web)] if assignee else [],
        "milestone": None,
        "locked": False,
        "comments": 0,
        "closed_at": STAMP if state == "closed" else None,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": updated_at,
        "author_association": "OWNER",
        "issue_dependencies_summary": {
            "blocked_by": blocked_by if open_blockers is None else open_blockers,
            "blocking": 0,
            "total_blocked_by": blocked_by,
            "total_blocking": 0,
        },
    }
    if pull_request:
        value["pull_request"] = {
            "url": f"{api}/repos/{repo}/pulls/{number}",
            "html_url": f"{web}/{repo}/pull/{number}",
            "diff_url": f"{web}/{repo}/pull/{number}.diff",
            "patch_url": f"{web}/{repo}/pull/{number}.patch",
            "merged_at": None,
        }
    return value


def comment(
    comment_id: int,
    body: str,
    *,
    repo: str = REPO,
    number: int = 1,
    author: str | None = "octocat",
    created_at: str = STAMP,
    updated_at: str | None = None,
    api: str = API,
    web: str = WEB,
    association: str = "OWNER",
) -> dict[str, Any]:
    """One issue comment (`issues/create-comment`, `issues/list-comments`, `issues/get-comment`,
    `issues/update-comment`); `author=None` is a deleted account."""
    return {
        "id": comment_id,
        "node_id": f"IC_{comment_id}",
        "url": f"{api}/repos/{repo}/issues/comments/{comment_id}",
        "html_url": f"{web}/{repo}/issues/{number}#issuecomment-{comment_id}",
        "issue_url": f"{api}/repos/{repo}/issues/{number}",
        "body": body,
        "user": user(author, api=api, web=web) if author else None,
        "created_at": created_at,
        "updated_at": updated_at or created_at,
        "author_association": association,
    }


def validation_failed(message: str, code: str, *, resource: str = "Label") -> dict[str, Any]:
    """A 422 body (`validation-error`), e.g. code `already_exists`."""
    return {
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "errors": [{"resource": resource, "code": code, "field": "name"}],
    }


def error(message: str) -> dict[str, Any]:
    return {"message": message, "documentation_url": "https://docs.github.com/rest"}

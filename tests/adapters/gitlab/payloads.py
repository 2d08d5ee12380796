"""GitLab REST bodies for the tests. Field names are those of the published subset's
`API_Entities_Issue`, `API_Entities_RelatedIssue`, `API_Entities_IssueLink`, `APIEntitiesNote`
and `APIEntitiesProjectLabel`, and for merge requests those of the merge request subset (the
contract tests check every key)."""

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


def member(username: str, access_level: int, membership_state: str = "active") -> dict[str, Any]:
    """An entry of `GET /projects/:id/members/all` (and the answer for one member): the user
    with their effective role, as GitLab's members API documents it."""
    return {
        **user(username),
        "access_level": access_level,
        "created_at": STAMP,
        "expires_at": None,
        "membership_state": membership_state,
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


# Merge requests: names of the MR subset's `API_Entities_ProjectWithAccess`,
# `API_Entities_MergeRequest(Basic)`, `API_Entities_Ci_Pipeline(Basic)`, `API_Entities_Ci_Job`,
# `API_Entities_MergeRequestApprovals`, `APIEntitiesDiscussion` and `APIEntitiesNote`.


def project(
    path: str = PROJECT,
    project_id: int = PROJECT_ID,
    *,
    default_branch: str | None = "main",
    base: str = BASE,
) -> dict[str, Any]:
    return {
        "id": project_id,
        "name": path.rsplit("/", 1)[-1],
        "path": path.rsplit("/", 1)[-1],
        "path_with_namespace": path,
        "default_branch": default_branch,
        "web_url": f"{base}/{path}",
        "visibility": "private",
        "merge_method": "merge",
        "squash_option": "default_off",
        "only_allow_merge_if_pipeline_succeeds": False,
    }


def merge_request(
    iid: int,
    *,
    title: str,
    source_branch: str,
    target_branch: str,
    sha: str,
    description: str = "",
    state: str = "opened",
    labels: list[str] | None = None,
    draft: bool = False,
    has_conflicts: bool = False,
    detailed_merge_status: str = "mergeable",
    merge_commit_sha: str | None = None,
    squash_commit_sha: str | None = None,
    squash: bool = False,
    project: str = PROJECT,
    project_id: int = PROJECT_ID,
    source_project_id: int | None = None,
    base: str = BASE,
    updated_at: str = STAMP,
) -> dict[str, Any]:
    """The short entity `GET …/merge_requests` lists."""
    return {
        "id": project_id * 1000 + iid,
        "iid": iid,
        "project_id": project_id,
        "title": title,
        "description": description,
        "state": state,
        "created_at": "2026-01-01T00:00:00.000Z",
        "updated_at": updated_at,
        "merged_at": updated_at if state == "merged" else None,
        "closed_at": updated_at if state == "closed" else None,
        "target_branch": target_branch,
        "source_branch": source_branch,
        "source_project_id": project_id if source_project_id is None else source_project_id,
        "target_project_id": project_id,
        "author": user("symphony-bot", base=base),
        "labels": list(labels or []),
        "draft": draft,
        "work_in_progress": draft,
        "merge_when_pipeline_succeeds": False,
        "merge_status": "cannot_be_merged" if has_conflicts else "can_be_merged",
        "detailed_merge_status": detailed_merge_status,
        "has_conflicts": has_conflicts,
        "sha": sha,
        "merge_commit_sha": merge_commit_sha,
        "squash_commit_sha": squash_commit_sha,
        "squash": squash,
        "blocking_discussions_resolved": True,
        "user_notes_count": 0,
        "reference": f"!{iid}",
        "references": {"short": f"!{iid}", "relative": f"!{iid}", "full": f"{project}!{iid}"},
        "web_url": f"{base}/{project}/-/merge_requests/{iid}",
    }


def merge_request_full(
    basic: dict[str, Any], head_pipeline: dict[str, Any] | None, merge_error: str | None = None
) -> dict[str, Any]:
    """The entity of one merge request: the short one with its head pipeline."""
    return {
        **basic,
        "head_pipeline": head_pipeline,
        "diff_refs": {"base_sha": "b" * 40, "start_sha": "b" * 40, "head_sha": basic["sha"]},
        "merge_error": merge_error,
        "rebase_in_progress": False,
        "diverged_commits_count": 0,
        "subscribed": False,
        "user": {"can_merge": True},
    }


def pipeline(
    pipeline_id: int,
    sha: str,
    status: str,
    *,
    ref: str,
    project: str = PROJECT,
    project_id: int = PROJECT_ID,
    base: str = BASE,
    full: bool = True,
) -> dict[str, Any]:
    """A pipeline: the full entity (a merge request's `head_pipeline`), or the basic one (a
    job's `pipeline`)."""
    basic = {
        "id": pipeline_id,
        "iid": pipeline_id - 9000,
        "project_id": project_id,
        "sha": sha,
        "ref": ref,
        "status": status,
        "source": "push",
        "created_at": STAMP,
        "updated_at": STAMP,
        "web_url": f"{base}/{project}/-/pipelines/{pipeline_id}",
    }
    if not full:
        return basic
    return {**basic, "before_sha": "0" * 40, "tag": False, "yaml_errors": None, "duration": 1}


def job(
    job_id: int,
    name: str,
    status: str,
    *,
    pipeline: dict[str, Any],
    allow_failure: bool = False,
    stage: str = "test",
    project: str = PROJECT,
    base: str = BASE,
) -> dict[str, Any]:
    return {
        "id": job_id,
        "name": name,
        "stage": stage,
        "status": status,
        "ref": pipeline["ref"],
        "tag": False,
        "allow_failure": allow_failure,
        "created_at": STAMP,
        "started_at": STAMP,
        "finished_at": STAMP if status in ("success", "failed", "canceled") else None,
        "duration": 1.5,
        "failure_reason": "script_failure" if status == "failed" else None,
        "pipeline": pipeline,
        "web_url": f"{base}/{project}/-/jobs/{job_id}",
        "archived": False,
    }


def approvals(approved_by: list[str], required: int | None, left: int | None) -> dict[str, Any]:
    """`GET …/approvals`. `approvals_required` and `approvals_left` are what GitLab's approval
    rules add to the open source edition's entity (the subset describes that one)."""
    answer: dict[str, Any] = {
        "approved": left == 0 if left is not None else bool(approved_by),
        "approved_by": [{"user": user(name), "approved_at": STAMP} for name in approved_by],
        "user_has_approved": False,
        "user_can_approve": False,
    }
    if required is not None:
        answer["approvals_required"] = required
    if left is not None:
        answer["approvals_left"] = left
    return answer


def mr_note(
    note_id: int,
    body: str,
    *,
    iid: int,
    author: str = "amy",
    project_id: int = PROJECT_ID,
    resolvable: bool = True,
    resolved: bool = False,
    position: dict[str, Any] | None = None,
    system: bool = False,
) -> dict[str, Any]:
    return {
        "id": note_id,
        "type": "DiffNote" if position else "DiscussionNote",
        "body": body,
        "author": user(author),
        "created_at": STAMP,
        "updated_at": STAMP,
        "system": system,
        "noteable_id": project_id * 1000 + iid,
        "noteable_type": "MergeRequest",
        "noteable_iid": iid,
        "project_id": project_id,
        "position": position,
        "resolvable": resolvable,
        "resolved": resolved,
        "resolved_by": user("amy") if resolved else None,
        "resolved_at": STAMP if resolved else None,
        "confidential": False,
        "internal": False,
        "imported": False,
        "imported_from": "none",
    }


def position(path: str, line: int | None, old_line: int | None = None) -> dict[str, Any]:
    """Where a diff note sits (`position`, untyped in the subset)."""
    return {
        "base_sha": "b" * 40,
        "start_sha": "b" * 40,
        "head_sha": "c" * 40,
        "old_path": path,
        "new_path": path,
        "position_type": "text",
        "old_line": old_line,
        "new_line": line,
    }


def discussion(
    discussion_id: str, notes: list[dict[str, Any]], *, individual_note: bool = False
) -> dict[str, Any]:
    resolvable = [n for n in notes if n["resolvable"]]
    return {
        "id": discussion_id,
        "individual_note": individual_note,
        "resolvable": bool(resolvable),
        "resolved": bool(resolvable) and all(n["resolved"] for n in resolvable),
        "notes": notes,
    }

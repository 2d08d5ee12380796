"""What the review page reads: the queue of tickets waiting for a person, and one ticket's
review (its text and comments, its plan, its evidence, its branch's diff), read from the
tracker and the workspace when asked. The actions it offers are `symphony.daemon.actions`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from symphony.config.sections import Settings
from symphony.core.markers import marker_of, unmarked
from symphony.core.review_actions import checkpoint_at
from symphony.core.state import SchedulerState
from symphony.daemon.places import Workspaces
from symphony.observability.board import Board
from symphony.observability.markdown import render
from symphony.tracker.contract import Tracker, TrackerError

CHECKPOINT_ORDER = ("plan", "diff", "escalated")


def review_queue(board: Board, settings: Settings, state: SchedulerState) -> list[dict[str, Any]]:
    """The tickets waiting for a person, plans first, then diffs, then escalations; within a
    group in the tracker's order. A ticket the daemon is moving is not waiting any more."""
    machine = settings.machine
    if machine is None:
        return []
    rows = []
    for row in board.rows.values():
        if row.issue_id in state.transitions or row.issue_id in state.claimed:
            continue
        checkpoint = _checkpoint(row.state, settings)
        if checkpoint is None:
            continue
        kind, stage = checkpoint
        record = state.pull_requests.get(row.issue_id)
        rows.append({
            "issue_id": row.issue_id, "issue_identifier": row.identifier, "title": row.title,
            "state": row.state, "checkpoint": kind, "stage": stage, "url": row.url,
            "pull_request": record.url if record is not None else None,
        })  # fmt: skip
    return sorted(rows, key=lambda r: CHECKPOINT_ORDER.index(r["checkpoint"]))


def _checkpoint(state_name: str, settings: Settings) -> tuple[str, str | None] | None:
    found = checkpoint_at(state_name, settings)
    if found is None:
        return None
    if found.stage is None:
        return "escalated", None
    # A stage with evidence (its gates, or `evidence: true`) hands over its branch; one
    # without hands over what it reported: its plan.
    return ("diff" if found.stage.evidence else "plan"), found.stage.name


def _pull(state: SchedulerState, issue_id: str) -> dict[str, Any] | None:
    """The followed pull request as a reviewer needs it: where, its checks, its review."""
    record = state.pull_requests.get(issue_id)
    if record is None:
        return None
    return {
        "number": record.number, "url": record.url, "state": record.state.value,
        "head": record.head_sha, "checks": record.checks or None,
        "review": record.review.value, "mergeable": record.mergeable,
        "approved_by": record.approved_by if record.approved_head == record.head_sha else None,
        "history": list(record.history),
    }  # fmt: skip


async def review_detail(
    wanted: str,
    *,
    board: Board,
    settings: Settings,
    state: SchedulerState,
    tracker: Tracker,
    workspaces_of: Callable[[str], Workspaces],
    open_command: Callable[[Path], str],
    env: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """One ticket's review, or None when the last poll did not see it. The tracker's words
    are read now; a tracker that fails leaves them out and says why."""
    row = board.row(wanted)
    if row is None:
        return None
    env = dict(os.environ if env is None else env)
    checkpoint = _checkpoint(row.state, settings)
    pull = _pull(state, row.issue_id)
    detail: dict[str, Any] = {
        "issue_id": row.issue_id, "issue_identifier": row.identifier, "title": row.title,
        "state": row.state, "url": row.url,
        "checkpoint": checkpoint[0] if checkpoint else None,
        "stage": checkpoint[1] if checkpoint else None,
        "description": None, "comments": [], "plan": None, "tracker_error": None,
        "pull_request": pull["url"] if pull is not None else None,
        "pull": pull, "runs": _runs(state, row.issue_id),
    }  # fmt: skip
    try:
        fresh = await tracker.fetch_issues_by_ids([row.issue_id])
        issue = next((i for i in fresh if i.id == row.issue_id), None)
        if issue is not None:
            detail["description"] = issue.description
            for comment in await tracker.list_comments(issue):
                marker = marker_of(comment.body)
                body = unmarked(comment.body)
                if marker is not None and marker[0] == "plan":
                    detail["plan"] = body
                detail["comments"].append({**comment.to_template(), "body": body})
    except TrackerError as exc:
        detail["tracker_error"] = str(exc)
    # The ticket's workspace where its runs were: here, or its SSH host (read over ssh).
    workspaces = workspaces_of(row.issue_id)
    path = workspaces.path_for(row.identifier)
    host = workspaces.remote_host
    detail["workspace_path"] = str(path)
    detail["workspace_host"] = host
    there_cmd = f"cd {shlex.quote(str(path))} && exec $SHELL -l"
    detail["open_command"] = (
        None  # a pod's workspace ended with its run: there is nothing to open
        if not workspaces.outlives_run
        else f"ssh -t {shlex.quote(host)} {shlex.quote(there_cmd)}"
        if host
        else open_command(path)
    )
    there = not workspaces.outlives_run or bool(await workspaces.peer_paths([row.identifier]))
    evidence = await workspaces.read_evidence(row.identifier) if there else None
    detail["evidence"] = evidence
    _render_words(detail)
    base = _base_of(evidence, settings)
    diff = await workspaces.branch_diff(row.identifier, base, env) if base and there else None
    detail["diff"] = diff.to_json() if diff is not None else None
    return detail


async def branch_patches(
    identifier: str,
    settings: Settings,
    workspaces: Workspaces,
    env: Mapping[str, str],
) -> dict[str, str]:
    """Each changed file's patch on the ticket's branch, by path (empty when its workspace
    is gone or its base unknown)."""
    if workspaces.outlives_run and not await workspaces.peer_paths([identifier]):
        return {}
    evidence = await workspaces.read_evidence(identifier)
    base = _base_of(evidence, settings)
    diff = await workspaces.branch_diff(identifier, base, dict(env)) if base else None
    return {f.path: f.patch for f in diff.files if f.patch} if diff is not None else {}


def _runs(state: SchedulerState, issue_id: str) -> dict[str, Any] | None:
    """The ticket's runs by kind and the recent ones (what the run ledger keeps)."""
    ledger = state.ledgers.get(issue_id)
    if ledger is None:
        return None
    return {"counts": dict(ledger.counts), "recent": list(ledger.history),
            "stopped": ledger.escalated}  # fmt: skip


def _render_words(detail: dict[str, Any]) -> None:
    """The words people and agents wrote, as safe HTML beside the text (`markdown.render`)."""
    detail["description_html"] = render(detail["description"])
    detail["plan_html"] = render(detail["plan"])
    for comment in detail["comments"]:
        comment["body_html"] = render(comment.get("body"))
    evidence = detail.get("evidence")
    if isinstance(evidence, dict) and isinstance(evidence.get("summary"), str):
        detail["summary_html"] = render(evidence["summary"])


def _base_of(evidence: Mapping[str, Any] | None, settings: Settings) -> str | None:
    """What the branch is reviewed against: the base its evidence names, else the workflow's."""
    workspace = evidence.get("workspace") if evidence else None
    if isinstance(workspace, Mapping) and isinstance(workspace.get("base"), str):
        return str(workspace["base"])
    return settings.workspace.base_ref

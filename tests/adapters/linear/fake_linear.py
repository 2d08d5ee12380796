"""An in-memory Linear workspace that answers the adapter's GraphQL operations by name.

The same fake serves the unit tests (through respx) and the end-to-end test (through a real
HTTP server on 127.0.0.1). Every answer it gives is executed against Linear's published schema
with the answer as root value (`check_contract`): a fake that drifted from Linear's types
(a null in a non-null field, a string where a Float goes) is recorded in `violations`, which the
fixtures assert empty. Answers that are deliberately malformed (`patch_node`, `fail_next`) are
exempt, and say so. `fail_operation` makes one operation fail the way a flaky Linear
does (a 5xx, with or without the change having been made) while every other keeps answering.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from graphql import GraphQLSchema, execute_sync, parse

ENDPOINT = "https://linear.test/graphql"
API_KEY = "lin_api_TESTKEY_0123456789abcdef"

_OPERATION = re.compile(r"\b(?:query|mutation)\s+([A-Za-z_][A-Za-z0-9_]*)")

ENG_STATES = [
    ("Backlog", "backlog"),
    ("Todo", "unstarted"),
    ("In Progress", "started"),
    ("Human Review", "started"),
    ("Done", "completed"),
    ("Canceled", "canceled"),
    ("Duplicate", "duplicate"),
]
OPS_STATES = [("Todo", "unstarted"), ("Doing", "started"), ("Shipped", "completed")]
STAGE_STATES = [
    ("Plan Review", "started"),
    ("Ready", "unstarted"),
    ("Rework", "started"),
    ("Needs Attention", "started"),
]
"""The states a stage-mode workflow moves ENG's tickets through, beside `ENG_STATES`."""


@dataclass
class FakeTeam:
    id: str
    key: str
    states: list[dict[str, str]]

    def state(self, name: str) -> dict[str, str]:
        return next(s for s in self.states if s["name"] == name)


@dataclass
class FakeIssue:
    id: str
    identifier: str
    title: str
    state: str
    team: str = "ENG"
    project: str | None = "proj1slug"
    priority: int = 0
    labels: list[str] = field(default_factory=list)
    blocked_by: list[str] = field(default_factory=list)
    """Identifiers of issues that block this one."""
    assignee: str | None = None
    description: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    creator: str | None = "Ada Lovelace"
    """The name of the user who opened it; None for one an integration opened."""


@dataclass
class FakeUser:
    id: str
    name: str
    display_name: str
    guest: bool = False
    """A guest of the workspace, who sees only some of its teams."""


@dataclass
class FakeComment:
    id: str
    issue_id: str
    body: str
    user: FakeUser | None
    created_at: datetime


@dataclass
class Canned:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    applied: bool = False
    """The operation takes effect before this answer is given (an answer lost on the way)."""


class FakeLinear:
    def __init__(self, schema: GraphQLSchema | None = None) -> None:
        self.schema = schema
        self.teams = {
            "ENG": FakeTeam("team-eng", "ENG", _states("eng", ENG_STATES)),
            "OPS": FakeTeam("team-ops", "OPS", _states("ops", OPS_STATES)),
        }
        self.projects: dict[str, list[str]] = {"proj1slug": ["ENG", "OPS"], "solo": ["ENG"]}
        """Project slugIds and the keys of their teams."""
        self.issues: dict[str, FakeIssue] = {}
        self.viewer_id = "user-me"
        self.users = {
            "user-me": FakeUser("user-me", "Symphony Bot", "symphony"),
            "user-ana": FakeUser("user-ana", "Ana Lima", "ana"),
        }
        self.page_cap = 50
        self.comment_page_cap = 100
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.headers_seen: list[Mapping[str, str]] = []
        self.comment_records: list[FakeComment] = []
        self.attachments: dict[tuple[str, str], str | None] = {}
        self.violations: list[str] = []
        self.patches: dict[str, dict[str, Any]] = {}
        self.canned: list[Canned] = []
        self.failing: dict[str, list[Canned]] = {}
        """Answers waiting for the next requests of one operation, by operation name."""
        self.lock = threading.Lock()

    # Arranging the workspace

    def add(self, identifier: str, /, state: str = "Todo", **fields: Any) -> FakeIssue:
        issue = FakeIssue(
            id=f"uuid-{identifier.lower()}",
            identifier=identifier,
            title=fields.pop("title", f"Ticket {identifier}"),
            state=state,
            team=fields.pop("team", identifier.split("-")[0]),
            created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=len(self.issues)),
            **fields,
        )
        self.issues[issue.id] = issue
        return issue

    def by_identifier(self, identifier: str) -> FakeIssue:
        return next(i for i in self.issues.values() if i.identifier == identifier)

    def comment(
        self,
        identifier: str,
        body: str,
        /,
        user: str | None = "user-ana",
        at: datetime | None = None,
    ) -> FakeComment:
        """A comment on an issue, by `user` (an id in `users`, or None for an integration)."""
        number = len(self.comment_records) + 1
        comment = FakeComment(
            id=f"comment-{number}",
            issue_id=self.by_identifier(identifier).id,
            body=body,
            user=self.users[user] if user is not None else None,
            created_at=at or datetime(2026, 2, 1, tzinfo=UTC) + timedelta(minutes=number),
        )
        self.comment_records.append(comment)
        return comment

    @property
    def comments(self) -> list[tuple[str, str]]:
        """(issue id, body) of every comment, in the order they were made."""
        return [(c.issue_id, c.body) for c in self.comment_records]

    def comments_on(self, identifier: str) -> list[FakeComment]:
        issue_id = self.by_identifier(identifier).id
        return [c for c in self.comment_records if c.issue_id == issue_id]

    def patch_node(self, identifier: str, /, **fields: Any) -> None:
        """Overwrite fields of an issue's node as served (deliberately malformed answers)."""
        self.patches[self.by_identifier(identifier).id] = fields

    def fail_next(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.canned.append(Canned(status, body, headers or {}))

    def add_states(self, team: str, states: list[tuple[str, str]]) -> None:
        """Add workflow states `(name, type)` to a team (Linear: team settings, Workflow)."""
        prefix = self.teams[team].key.lower()
        self.teams[team].states.extend(_states(prefix, states))

    def fail_operation(
        self, name: str, status: int, body: Any = None, *, times: int = 1, applied: bool = False
    ) -> None:
        """Answer the next `times` requests of operation `name` with `status` and `body`; with
        `applied` the operation is carried out first, as when only the answer is lost."""
        self.failing.setdefault(name, []).extend(
            Canned(status, body, {}, applied) for _ in range(times)
        )

    def failures_left(self, name: str) -> int:
        with self.lock:
            return len(self.failing.get(name, []))

    def operations(self) -> list[str]:
        return [name for name, _ in self.requests]

    # Answering

    def answer(self, body: Any, headers: Mapping[str, str]) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            body = body if isinstance(body, dict) else {}
            query = str(body.get("query") or "")
            variables = body.get("variables") or {}
            match = _OPERATION.search(query)
            name = match.group(1) if match else "?"
            self.requests.append((name, variables))
            self.headers_seen.append(dict(headers))
            if self.canned:
                canned = self.canned.pop(0)
                return canned.status, canned.body, canned.headers
            handler: Callable[[dict[str, Any]], dict[str, Any]] | None = getattr(
                self, f"_op_{name}", None
            )
            if self.failing.get(name):
                failure = self.failing[name].pop(0)
                if failure.applied and handler is not None:
                    handler(variables)
                return failure.status, failure.body, failure.headers
            if handler is None:
                error = {
                    "message": f"Unknown operation {name}",
                    "extensions": {"type": "graphql error", "code": "GRAPHQL_VALIDATION_FAILED"},
                }
                return 400, {"errors": [error]}, {}
            result = handler(variables)
            if "errors" not in result and not self._served_patched(result):
                self.check_contract(query, variables, result["data"])
            return 200, result, {"x-ratelimit-requests-remaining": "4999"}

    def check_contract(self, query: str, variables: dict[str, Any], data: Any) -> None:
        if self.schema is None:
            return
        result = execute_sync(self.schema, parse(query), root_value=data, variable_values=variables)
        if result.errors:
            self.violations.extend(str(e) for e in result.errors)
        elif result.data != data:
            self.violations.append(f"answer has fields the query did not ask for: {data}")

    def respx_handler(self, request: httpx.Request) -> httpx.Response:
        status, body, headers = self.answer(json.loads(request.content), request.headers)
        return httpx.Response(status, json=body, headers=headers)

    # Operations

    def _op_SymphonyProjectIssues(self, v: dict[str, Any]) -> dict[str, Any]:
        return self._page(lambda i: i.project == v["slug"], v)

    def _op_SymphonyTeamIssues(self, v: dict[str, Any]) -> dict[str, Any]:
        return self._page(lambda i: i.team == v["teamKey"], v)

    def _op_SymphonyIssuesById(self, v: dict[str, Any]) -> dict[str, Any]:
        found = [self.node(i) for i in self.issues.values() if i.id in v["ids"]]
        return {"data": {"issues": {"nodes": found[: v["first"]]}}}

    def _op_SymphonyViewer(self, v: dict[str, Any]) -> dict[str, Any]:
        return {"data": {"viewer": {"id": self.viewer_id}}}

    def _op_AgentViewer(self, v: dict[str, Any]) -> dict[str, Any]:
        return {"data": {"viewer": {"id": self.viewer_id, "name": "Symphony Bot"}}}

    def _op_SymphonyIssueTeamStates(self, v: dict[str, Any]) -> dict[str, Any]:
        issue = self.issues.get(v["id"])
        if issue is None:
            return _not_found()
        team = self.teams[issue.team]
        return {
            "data": {
                "issue": {
                    "id": issue.id,
                    "identifier": issue.identifier,
                    "state": {"id": team.state(issue.state)["id"], "name": issue.state},
                    "team": {"id": team.id, "key": team.key, "states": {"nodes": team.states}},
                }
            }
        }

    def _op_SymphonyMoveIssue(self, v: dict[str, Any]) -> dict[str, Any]:
        issue = self.issues.get(v["id"])
        if issue is None:
            return _not_found()
        team = self.teams[issue.team]
        state = next((s for s in team.states if s["id"] == v["stateId"]), None)
        if state is None:
            return {"errors": [{"message": "Invalid state for this team"}], "data": None}
        issue.state = state["name"]
        return {
            "data": {
                "issueUpdate": {
                    "success": True,
                    "issue": {
                        "id": issue.id,
                        "identifier": issue.identifier,
                        "state": {"id": state["id"], "name": state["name"]},
                    },
                }
            }
        }

    def _op_SymphonyAddComment(self, v: dict[str, Any]) -> dict[str, Any]:
        issue = self._lookup(v["issueId"])
        if issue is None:
            return _not_found()
        comment = self.comment(issue.identifier, v["body"], user=self.viewer_id)
        node = {
            **self.comment_node(comment),
            "url": f"https://linear.app/acme/comment/{len(self.comment_records)}",
        }
        return {"data": {"commentCreate": {"success": True, "comment": node}}}

    def _op_SymphonyEditComment(self, v: dict[str, Any]) -> dict[str, Any]:
        comment = next((c for c in self.comment_records if c.id == v["id"]), None)
        if comment is None:
            return _not_found("Comment")
        comment.body = v["body"]
        return {"data": {"commentUpdate": {"success": True, "comment": self.comment_node(comment)}}}

    def _op_SymphonyCommentOwner(self, v: dict[str, Any]) -> dict[str, Any]:
        comment = next((c for c in self.comment_records if c.id == v["id"]), None)
        if comment is None:
            return _not_found("Comment")
        node = {
            "id": comment.id,
            "issue": {"id": comment.issue_id},
            "user": {"id": comment.user.id} if comment.user else None,
        }
        return {"data": {"comment": node}}

    def _op_SymphonyIssueComments(self, v: dict[str, Any]) -> dict[str, Any]:
        issue = self._lookup(v["id"])
        if issue is None:
            return _not_found()
        mine = [c for c in self.comment_records if c.issue_id == issue.id]
        start = int(v["after"]) if v.get("after") else 0
        page = mine[start : start + min(v["first"], self.comment_page_cap)]
        end = start + len(page)
        comments = {
            "nodes": [self.comment_node(c) for c in page],
            "pageInfo": {"hasNextPage": end < len(mine), "endCursor": str(end) if page else None},
        }
        return {"data": {"issue": {"id": issue.id, "comments": comments}}}

    def _op_SymphonyTeamByKey(self, v: dict[str, Any]) -> dict[str, Any]:
        team = self.teams.get(v["key"])
        return {"data": {"teams": {"nodes": [self.team_node(team)] if team else []}}}

    def _op_SymphonyProjectTeams(self, v: dict[str, Any]) -> dict[str, Any]:
        keys = self.projects.get(v["slug"])
        if keys is None:
            return {"data": {"projects": {"nodes": []}}}
        project = {
            "id": f"project-{v['slug']}",
            "slugId": v["slug"],
            "teams": {
                "nodes": [self.team_node(self.teams[key]) for key in keys],
                "pageInfo": {"hasNextPage": False},
            },
        }
        return {"data": {"projects": {"nodes": [project]}}}

    def _op_SymphonyIssueScope(self, v: dict[str, Any]) -> dict[str, Any]:
        issue = self._lookup(v["id"])
        if issue is None:
            return _not_found()
        node = {
            "id": issue.id,
            "identifier": issue.identifier,
            "team": self.team_node(self.teams[issue.team]),
            "project": (
                {"id": f"project-{issue.project}", "slugId": issue.project}
                if issue.project
                else None
            ),
        }
        return {"data": {"issue": node}}

    def _op_SymphonyIssueRef(self, v: dict[str, Any]) -> dict[str, Any]:
        issue = self._lookup(v["id"])
        if issue is None:
            return _not_found()
        return {"data": {"issue": {"id": issue.id, "identifier": issue.identifier}}}

    def _op_SymphonyCreateIssue(self, v: dict[str, Any]) -> dict[str, Any]:
        team = next((t for t in self.teams.values() if t.id == v["teamId"]), None)
        if team is None:
            return _not_found("Team")
        state = next((s for s in team.states if s["id"] == v["stateId"]), None)
        if state is None:
            return {"errors": [{"message": "Invalid state for this team"}], "data": None}
        project = v.get("projectId")
        slug = project.removeprefix("project-") if project else None
        if slug is not None and slug not in self.projects:
            return _not_found("Project")
        numbers = [
            int(i.identifier.split("-")[1]) for i in self.issues.values() if i.team == team.key
        ]
        issue = self.add(
            f"{team.key}-{max(numbers, default=0) + 1}",
            state=state["name"],
            title=v["title"],
            description=v.get("description"),
            project=slug,
        )
        node = {"id": issue.id, "identifier": issue.identifier}
        return {"data": {"issueCreate": {"success": True, "issue": node}}}

    def _op_SymphonyAddBlocker(self, v: dict[str, Any]) -> dict[str, Any]:
        blocker, blocked = self._lookup(v["blockerId"]), self._lookup(v["issueId"])
        if blocker is None or blocked is None:
            return _not_found()
        if blocker.identifier not in blocked.blocked_by:
            blocked.blocked_by.append(blocker.identifier)
        relation = {"id": f"relation-{blocker.id}-{blocked.id}"}
        return {"data": {"issueRelationCreate": {"success": True, "issueRelation": relation}}}

    def _op_SymphonyAttachUrl(self, v: dict[str, Any]) -> dict[str, Any]:
        if v["issueId"] not in self.issues:
            return _not_found()
        key = (v["issueId"], v["url"])
        self.attachments[key] = v.get("title")
        return {
            "data": {
                "attachmentLinkURL": {
                    "success": True,
                    "attachment": {
                        "id": f"attachment-{sorted(self.attachments).index(key)}",
                        "url": v["url"],
                        "title": v.get("title") or v["url"],
                    },
                }
            }
        }

    # Shapes

    def _lookup(self, key: str) -> FakeIssue | None:
        """An issue by id or identifier: Linear's `issue(id:)` takes either."""
        found = self.issues.get(key)
        return found or next((i for i in self.issues.values() if i.identifier == key), None)

    def comment_node(self, comment: FakeComment) -> dict[str, Any]:
        """The `SymphonyComment` fragment of a comment."""
        user = comment.user
        return {
            "id": comment.id,
            "body": comment.body,
            "createdAt": comment.created_at.isoformat().replace("+00:00", "Z"),
            "user": (
                {"name": user.name, "displayName": user.display_name, "guest": user.guest}
                if user
                else None
            ),
        }

    def team_node(self, team: FakeTeam) -> dict[str, Any]:
        return {"id": team.id, "key": team.key, "states": {"nodes": team.states}}

    def node(self, issue: FakeIssue) -> dict[str, Any]:
        """The `SymphonyIssue` fragment of an issue, as Linear would serve it."""
        team = self.teams[issue.team]
        state = team.state(issue.state)
        stamp = issue.created_at.isoformat().replace("+00:00", "Z")
        blockers = [self.by_identifier(b) for b in issue.blocked_by]
        node: dict[str, Any] = {
            "id": issue.id,
            "identifier": issue.identifier,
            "title": issue.title,
            "description": issue.description,
            "priority": float(issue.priority),
            "branchName": f"{issue.identifier.lower()}-work",
            "url": f"https://linear.app/acme/issue/{issue.identifier}",
            "createdAt": stamp,
            "updatedAt": stamp,
            "state": dict(state),
            "assignee": {"id": issue.assignee} if issue.assignee else None,
            "creator": {"name": issue.creator} if issue.creator else None,
            "team": {"id": team.id, "key": team.key},
            "project": (
                {"id": f"project-{issue.project}", "slugId": issue.project}
                if issue.project
                else None
            ),
            "labels": {"nodes": [{"name": label} for label in issue.labels]},
            "inverseRelations": {
                "nodes": [
                    {
                        "type": "blocks",
                        "issue": {
                            "id": b.id,
                            "identifier": b.identifier,
                            "state": {
                                "name": b.state,
                                "type": self.teams[b.team].state(b.state)["type"],
                            },
                        },
                    }
                    for b in blockers
                ]
            },
        }
        node.update(self.patches.get(issue.id, {}))
        return node

    def _page(self, in_scope: Callable[[FakeIssue], bool], v: dict[str, Any]) -> dict[str, Any]:
        matching = [i for i in self.issues.values() if in_scope(i) and i.state in v["states"]]
        start = int(v["after"]) if v.get("after") else 0
        size = min(v["first"], self.page_cap)
        page = matching[start : start + size]
        end = start + len(page)
        return {
            "data": {
                "issues": {
                    "nodes": [self.node(i) for i in page],
                    "pageInfo": {"hasNextPage": end < len(matching), "endCursor": str(end)},
                }
            }
        }

    def _served_patched(self, result: dict[str, Any]) -> bool:
        # Deliberately malformed nodes are the point of those tests, not contract drift.
        issues = (result.get("data") or {}).get("issues")
        nodes = issues.get("nodes", []) if isinstance(issues, dict) else []
        return any(isinstance(n, dict) and n.get("id") in self.patches for n in nodes) or any(
            n.get("id") is None for n in nodes if isinstance(n, dict)
        )


def _states(prefix: str, states: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [
        {"id": f"state-{prefix}-{name.lower().replace(' ', '-')}", "name": name, "type": kind}
        for name, kind in states
    ]


def _not_found(entity: str = "Issue") -> dict[str, Any]:
    error = {
        "message": f"Entity not found: {entity}",
        "extensions": {
            "type": "invalid input",
            "userPresentableMessage": f"Could not find referenced {entity}.",
        },
    }
    return {"errors": [error], "data": None}


class FakeLinearServer:
    """The fake behind a real HTTP server on 127.0.0.1, checking the API key on every request."""

    def __init__(self, fake: FakeLinear, api_key: str = API_KEY) -> None:
        self.fake = fake
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                seen = {name.lower(): value for name, value in self.headers.items()}
                headers: dict[str, str] = {}
                if seen.get("authorization") != api_key:
                    status, body = 400, _auth_error()
                else:
                    status, body, headers = outer.fake.answer(json.loads(raw), seen)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # Polled every 50 ms rather than 500: shutdown waits for the next poll.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/graphql"

    def __enter__(self) -> FakeLinearServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def _auth_error() -> dict[str, Any]:
    error = {
        "message": "Authentication required, not authenticated",
        "extensions": {"type": "authentication error", "code": "AUTHENTICATION_ERROR"},
    }
    return {"errors": [error]}

"""Contract tests against the community OpenAPI 3.1 description of Kaiten
(tracker-schemas/kaiten/adapter-subset.openapi.json):

- every request the adapter sends uses a path, method and query parameters the description has,
  and its JSON body validates against the operation's request schema;
- every body the fakes return validates against the response schema of its operation.

The daemon's writes are checked the same way: moves, comments (list, add, edit), a new card and
its blockers. The published comment shape names only `author_id`; the fake also embeds the
author's `User`, which the schema allows (it closes no object) and the adapter reads.

Kaiten publishes no machine-readable spec; this one is transcribed from its docs. Its card
schema leaves the inline `column` and `lane` objects untyped, so nothing checks their fields:
the adapter reads the column from `column_id` and the board's own column list instead.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from openapi_schema_validator import OAS31Validator

from symphony.base.issue import Issue
from symphony.tracker.contract import NewTicket
from symphony_adapters._support.ratelimit import SlidingWindowLimiter
from symphony_adapters.kaiten.config import parse_config
from symphony_adapters.kaiten.tracker import KaitenTracker
from tests.adapters.kaiten import payloads
from tests.adapters.kaiten.fake_kaiten import PREFIX, FakeKaiten, serve
from tests.adapters.kaiten.payloads import BACKLOG, BOARD, DOING, DONE, REVIEW

TOKEN = "kaiten_contract_token_value"


@cache
def openapi(folder: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (folder / "kaiten" / "adapter-subset.openapi.json").read_text()
    )
    return spec


def operation(spec: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    for template, operations in spec["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            return template, operations[method.lower()]
    raise AssertionError(f"{method} {path} is not in the Kaiten subset")


def validate(spec: dict[str, Any], schema: dict[str, Any], value: Any) -> None:
    OAS31Validator({**copy.deepcopy(schema), "components": spec["components"]}).validate(value)


def check_body(spec: dict[str, Any], method: str, path: str, status: int, body: Any) -> None:
    _, op = operation(spec, method, path)
    response = op["responses"].get(str(status))
    assert response is not None, f"{method} {path} has no documented {status}"
    content = response.get("content", {}).get("application/json")
    if content is not None:
        validate(spec, content["schema"], body)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/cards", [payloads.card(1), payloads.card(2, DOING, tags=["Bug"], asap=True)]),
        ("GET", "/cards", [payloads.card(3, DONE, state=3, responsible=9, lane_id=None)]),
        ("GET", "/cards/1", payloads.card(1, REVIEW, blocked=True, blocked_by=[2])),
        ("GET", "/cards/1", payloads.card(1, condition=2, description=None)),
        ("PATCH", "/cards/1", payloads.card(1, DONE, state=3)),
        ("GET", f"/boards/{BOARD}/columns", payloads.columns()),
        ("GET", f"/columns/{BACKLOG}/subcolumns", payloads.columns()[2:4]),
        ("POST", "/cards/1/comments", payloads.comment(1, 1, "hello")),
        ("POST", "/cards/1/comments", payloads.comment(1, 1, "hi", author=payloads.user())),
        (
            "GET",
            "/cards/1/comments",
            [payloads.comment(1, 1, "a", author=payloads.user()), payloads.comment(2, 1, "b")],
        ),
        ("PATCH", "/cards/1/comments/2", payloads.comment(2, 1, "b2", deleted=False)),
        ("POST", "/cards", payloads.card(9, BACKLOG, description=None)),
        ("POST", "/cards/9/blockers", payloads.blocker(3, 9, 1)),
        ("GET", "/cards/9/blockers", [payloads.blocker(3, 9, 1)]),
        ("POST", "/cards/1/external-links", payloads.external_link(1, 1, "https://x.test", None)),
        ("GET", "/cards/1/external-links", [payloads.external_link(1, 1, "https://x.test", "PR")]),
    ],
)
def test_fake_bodies_match_the_published_response_schemas(
    tracker_schemas: Path, method: str, path: str, body: Any
) -> None:
    check_body(openapi(tracker_schemas), method, path, 200, body)


def test_the_card_schema_leaves_the_inline_column_untyped(tracker_schemas: Path) -> None:
    # Why the adapter does not rely on `card.column`: the description promises nothing in it.
    card = openapi(tracker_schemas)["components"]["schemas"]["Card"]["properties"]
    assert card["column"] == {"type": "object", "description": card["column"]["description"]}


async def test_requests_the_adapter_sends_and_fake_answers_follow_the_description(
    tracker_schemas: Path,
) -> None:
    spec = openapi(tracker_schemas)
    # Only top-level columns in the board listing: the adapter then asks for sub-columns too.
    fake = FakeKaiten(TOKEN, board_lists_subcolumns=False)
    fake.window_limit = 1_000  # the contract, not the pace, is tested
    fake.add(1, BACKLOG, tags=["Bug"], blocked_by=[2])
    fake.add(2, DOING)
    fake.add(3, DONE)
    with serve(fake):
        config = parse_config(
            {"base_url": fake.base, "board_id": BOARD, "space_id": 5, "lane_id": 7},
            {"KAITEN_TOKEN": TOKEN},
        )
        tracker = KaitenTracker(
            config,
            workflow_states=("Backlog", "In Progress", "Done"),
            terminal_states=("Done",),
            limiter=SlidingWindowLimiter(1_000, 1.0),
        )
        try:
            await tracker.discover_states()
            await tracker.fetch_issues_by_states(["Backlog", "In Progress"])
            await tracker.fetch_issues_by_states(["Done"])
            await tracker.fetch_issues_by_ids(["1", "2", "77"])
            issue = Issue(
                id="1",
                identifier="KT-1",
                title="t",
                state="Backlog",
                dispatchable=True,
                native_ref={"card_id": 1, "board_id": BOARD},
            )
            for name, arguments in [
                ("kaiten_move_card", {"state": "Done"}),
                ("kaiten_add_comment", {"body": "done"}),
                ("kaiten_add_link", {"url": "https://git.example/pr/5", "description": "PR"}),
            ]:
                result = await tracker.execute_tool(name, arguments, issue)
                assert result.success, result.output
            # The daemon's writes.
            await tracker.tracker_states()
            await tracker.move_issue(issue, "In Progress")
            comment = await tracker.add_comment(issue, "plan")
            await tracker.edit_comment(issue, comment.id, "plan, edited")
            await tracker.list_comments(issue)
            await tracker.link_pull_request(issue, "https://git.example/pr/6", "#6 Follow-up")
            [parent] = await tracker.fetch_issues_by_ids(["2"])
            created = await tracker.create_issue(
                NewTicket("Follow-up", "Why.", "Backlog", blocked_by=("KT-2", "3"), parent=parent)
            )
            assert [b.id for b in created.blocked_by] == ["2", "3"]
        finally:
            await tracker.aclose()
    assert {r.status for r in fake.requests} >= {200, 404}
    seen = set()
    for request in fake.requests:
        path = request.path[len(PREFIX) :]
        template, op = operation(spec, request.method, path)
        seen.add((request.method, template))
        allowed = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        unknown = set(request.query) - allowed
        assert not unknown, f"{request.method} {template} has no parameter(s) {unknown}"
        if request.body is not None:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            validate(spec, schema, request.body)
        check_body(spec, request.method, path, request.status, request.answer)
    assert seen >= {
        ("GET", "/boards/{board_id}/columns"),
        ("GET", "/columns/{column_id}/subcolumns"),
        ("GET", "/cards"),
        ("GET", "/cards/{card_id}"),
        ("PATCH", "/cards/{card_id}"),
        ("POST", "/cards/{card_id}/comments"),
        ("POST", "/cards/{card_id}/external-links"),
        ("GET", "/cards/{card_id}/external-links"),
        ("GET", "/cards/{card_id}/comments"),
        ("PATCH", "/cards/{card_id}/comments/{comment_id}"),
        ("POST", "/cards"),
        ("POST", "/cards/{card_id}/blockers"),
    }

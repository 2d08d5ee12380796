"""Holding `FakePulls`' traffic to GitHub's published description of the pulls API
(tracker-schemas/github/rest-pulls-subset, and rest-issues-subset for a pull request's labels).

A request must name a described operation, only its query parameters, and a body its request
schema accepts with no field it does not describe. An answer must have the shape its response
schema gives: every field the fake serves is described there with its type, though the fake
leaves out the many fields the adapter never reads (`required` is not held to).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from openapi_schema_validator import OAS30Validator

from tests.adapters.github.fake_pulls import Exchange

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


_COMMENT_IN = {
    "type": "object",
    "required": ["path", "body"],
    "properties": {
        "path": {"type": "string"},
        "position": {"type": "integer"},
        "body": {"type": "string"},
        "line": {"type": "integer"},
        "side": {"type": "string"},
        "start_line": {"type": "integer"},
        "start_side": {"type": "string"},
    },
}
_REVIEWS = "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"
REVIEW_OPERATIONS: dict[str, Any] = {
    _REVIEWS: {
        "post": {
            "parameters": [],
            "requestBody": {"content": {"application/json": {"schema": {
                "type": "object",
                "properties": {
                    "commit_id": {"type": "string"},
                    "body": {"type": "string"},
                    "event": {"type": "string",
                              "enum": ["APPROVE", "REQUEST_CHANGES", "COMMENT"]},
                    "comments": {"type": "array", "items": _COMMENT_IN},
                },
            }}}},
            "responses": {
                "200": {"content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/pull-request-review"}}}},
                "422": {"content": {"application/json": {"schema": {"type": "object",
                    "properties": {"message": {"type": "string"},
                                   "errors": {"type": "array", "items": {"type": "string"}}}}}}},
            },
        },
    },
    _REVIEWS + "/{review_id}/comments": {
        "get": {
            "parameters": [{"name": "per_page", "in": "query"}, {"name": "page", "in": "query"}],
            "responses": {"200": {"content": {"application/json": {"schema": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/pull-request-review-comment"},
            }}}}},
        },
    },
}  # fmt: skip
"""GitHub's `pulls/create-review` and `pulls/list-comments-for-review`, which the published
subset leaves out: their request fields and answers as GitHub documents them (the answers'
records are the subset's own `pull-request-review` and `pull-request-review-comment`)."""


@cache
def descriptions(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pulls subset with the review operations, the issues subset)."""
    github = folder / "github"
    pulls = json.loads((github / "rest-pulls-subset.openapi.json").read_text())
    for path, operations in REVIEW_OPERATIONS.items():
        pulls["paths"][path] = {**pulls["paths"].get(path, {}), **operations}
    return (pulls, json.loads((github / "rest-issues-subset.openapi.json").read_text()))


def operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    for template, operations in spec["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            found: dict[str, Any] = operations[method.lower()]
            return found
    raise AssertionError(f"{method} {path} is not in the published description")


def resolve(spec: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = spec
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def check_exchange(folder: Path, exchange: Exchange) -> None:
    if exchange.path == "/graphql" or exchange.path.startswith("/_downloads"):
        return  # GraphQL is held to its schema; a log download is not GitHub's API
    pulls, issues = descriptions(folder)
    spec = issues if exchange.path.endswith("/labels") else pulls
    where = f"{exchange.method} {exchange.path}"
    op = operation(spec, exchange.method, exchange.path)
    parameters = [resolve(spec, p) for p in op.get("parameters", [])]
    names = {p["name"] for p in parameters if p["in"] == "query"}
    assert set(exchange.query) <= names, (where, set(exchange.query) - names)
    if exchange.body is not None:
        schema = resolve(spec, op["requestBody"]["content"]["application/json"]["schema"])
        OAS30Validator(schema).validate(exchange.body)
        # The published request schemas allow any extra field; a misspelt one would pass.
        shapes = [schema, *schema.get("oneOf", []), *schema.get("anyOf", [])]
        known = {name for shape in shapes for name in resolve(spec, shape).get("properties", {})}
        unknown = set(exchange.body) - known
        assert not unknown, (where, unknown)
    if exchange.status == 304 or exchange.status >= 500:
        return  # no body; an outage is nobody's description
    response = resolve(spec, op["responses"].get(str(exchange.status)))
    assert response is not None, f"{where} has no documented {exchange.status}"
    content = response.get("content", {}).get("application/json")
    if content is None:
        assert exchange.answer is None, f"{where} {exchange.status} has no body"
        return
    problems = shape_problems(spec, content["schema"], exchange.answer, "answer")
    assert not problems, (where, problems)


def shape_problems(spec: dict[str, Any], schema: Any, value: Any, where: str) -> list[str]:
    """Where `value` leaves the shape `schema` describes: a field not described, a wrong type,
    a value outside an enum, a null where none is allowed."""
    schema = resolve(spec, schema)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            tries = [shape_problems(spec, option, value, where) for option in schema[key]]
            return [] if any(not t for t in tries) else min(tries, key=len)
    if "allOf" in schema:
        parts = [resolve(spec, part) for part in schema["allOf"]]
        merged = {k: v for part in parts for k, v in part.get("properties", {}).items()}
        nullable = any(part.get("nullable") for part in parts)
        schema = {"type": "object", "properties": merged, "nullable": nullable}
    if value is None:
        return [] if schema.get("nullable") else [f"{where} is null"]
    kind = schema.get("type") or ("object" if "properties" in schema else None)
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where} is not an object"]
        described = schema.get("properties", {})
        extra = schema.get("additionalProperties", not described)
        problems = []
        for key, item in value.items():
            if key in described:
                problems += shape_problems(spec, described[key], item, f"{where}.{key}")
            elif isinstance(extra, dict):
                problems += shape_problems(spec, extra, item, f"{where}.{key}")
            elif extra is not True:
                problems.append(f"{where}.{key} is not described")
        return problems
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where} is not an array"]
        items = schema.get("items", {})
        return [
            problem
            for index, item in enumerate(value)
            for problem in shape_problems(spec, items, item, f"{where}[{index}]")
        ]
    expected = _TYPES.get(str(kind))
    if expected is not None and (
        not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool))
    ):
        return [f"{where} is not a {kind}: {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where} is {value!r}, not one of {schema['enum']}"]
    return []

"""A small GitHub pulls API in memory (an httpx transport): a repository's pull requests as
GitHub lists, opens, labels and edits them, every request kept for the test to read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx


@dataclass
class FakePulls:
    slug: str = "acme/widgets"
    default_branch: str = "main"
    branches: set[str] = field(default_factory=lambda: {"main"})
    pulls: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, list[str]], Any]] = field(default_factory=list)
    """(method, path, query, JSON body) of every request."""
    tokens: list[str | None] = field(default_factory=list)

    def record(self, number: int) -> dict[str, Any]:
        return next(p for p in self.pulls if p["number"] == number)

    def merge(self, number: int) -> None:
        pull = self.record(number)
        pull.update(state="closed", merged_at="2026-12-02T10:00:00Z")

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._answer)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.url.query.decode())
        body = json.loads(request.content) if request.content else None
        path, method = request.url.path, request.method
        self.requests.append((method, path, query, body))
        self.tokens.append(request.headers.get("Authorization"))
        repo = f"/repos/{self.slug}"
        if (method, path) == ("GET", repo):
            return httpx.Response(200, json={"full_name": self.slug,
                                             "default_branch": self.default_branch})  # fmt: skip
        if (method, path) == ("GET", f"{repo}/pulls"):
            owner, _, branch = query["head"][0].partition(":")
            found = [p for p in self.pulls if p["head"]["ref"] == branch and owner == "acme"]
            return httpx.Response(200, json=sorted(found, key=lambda p: -p["number"]))
        if (method, path) == ("POST", f"{repo}/pulls"):
            if body["base"] not in self.branches:
                return httpx.Response(422, json={"message": "Validation Failed",
                                                 "errors": [{"field": "base"}]})  # fmt: skip
            number = 100 + len(self.pulls) + 1
            pull = {
                "number": number,
                "html_url": f"https://github.com/{self.slug}/pull/{number}",
                "state": "open",
                "title": body["title"],
                "body": body["body"],
                "draft": body.get("draft", False),
                "merged_at": None,
                "labels": [],
                "head": {"ref": body["head"], "sha": f"sha-{number}"},
                "base": {"ref": body["base"]},
            }
            self.pulls.append(pull)
            return httpx.Response(201, json=pull)
        found = re.fullmatch(rf"{re.escape(repo)}/(?:pulls|issues)/(\d+)(?:/labels)?", path)
        if found is None:
            return httpx.Response(404, json={"message": "Not Found"})
        number = int(found.group(1))
        if method == "PATCH" and path == f"{repo}/pulls/{number}":
            pull = self.record(number)
            pull.update(title=body["title"], body=body["body"])
            pull["base"]["ref"] = body["base"]
            return httpx.Response(200, json=pull)
        if method == "POST" and path == f"{repo}/issues/{number}/labels":
            pull = self.record(number)
            pull["labels"] += [
                {"name": n} for n in body["labels"] if {"name": n} not in pull["labels"]
            ]
            return httpx.Response(200, json=pull["labels"])
        return httpx.Response(404, json={"message": "Not Found"})

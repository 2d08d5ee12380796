"""Webhooks: each provider's signature checked in constant time (valid, invalid, replayed,
oversized deliveries), the tickets a payload names, and a delivery that makes the daemon look at
once, through the real HTTP app, against the GitHub fake, with a poll ten minutes away."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from symphony.base.secrets import SecretMasker
from symphony.observability.server import create_app
from symphony.tracker.webhooks import MAX_DELIVERY_BYTES, hmac_sha256_hex
from symphony_adapters.github.config import parse_config as github_config
from symphony_adapters.github.webhook import GitHubWebhook
from symphony_adapters.gitlab.config import parse_config as gitlab_config
from symphony_adapters.gitlab.webhook import GitLabWebhook
from symphony_adapters.linear.webhook import REPLAY_WINDOW_S, LinearWebhook
from tests.adapters.daemon import start_daemon, write_workflow
from tests.adapters.github.fake_github import FakeGitHub, serve

SECRET = "whsec_for_tests_0001"
ENV = {"GITHUB_TOKEN": "ghp_x", "GITLAB_TOKEN": "glpat-x", "HOOK_SECRET": SECRET}


def github_receiver(**provider: Any) -> GitHubWebhook:
    config = github_config(
        {"repository": "acme/widgets", "webhook_secret": "$HOOK_SECRET", **provider},
        ENV,
        ("Todo",),
        ("Done",),
    )
    assert config.webhook_secret is not None and config.webhook_secret.env_name == "HOOK_SECRET"
    return GitHubWebhook(config, config.webhook_secret.value)


def issue_event(number: int, repo: str = "acme/widgets") -> bytes:
    return json.dumps(
        {"action": "labeled", "issue": {"number": number}, "repository": {"full_name": repo}}
    ).encode()


def test_github_deliveries_need_the_body_s_hmac_and_name_their_issue() -> None:
    hook = github_receiver()
    body = issue_event(7)
    good = {"x-hub-signature-256": "sha256=" + hmac_sha256_hex(SECRET, body)}
    assert hook.verify(good, body, time.time())
    assert not hook.verify(good, body + b" ", time.time())  # any change to the body
    assert not hook.verify({"x-hub-signature-256": "sha256=" + "0" * 64}, body, time.time())
    assert not hook.verify({}, body, time.time())
    wrong_secret = "sha256=" + hmac_sha256_hex("another secret", body)
    assert not hook.verify({"x-hub-signature-256": wrong_secret}, body, time.time())
    assert hook.issue_ids(json.loads(body)) == ["7"]
    assert hook.issue_ids(json.loads(issue_event(7, "acme/other"))) is None  # look at all
    assert hook.issue_ids({"zen": "Keep it logically awesome.", "hook_id": 1}) == []


def test_gitlab_deliveries_need_the_token_and_name_their_issue_by_iid() -> None:
    config = gitlab_config(
        {"project": "acme/widgets", "webhook_secret": "$HOOK_SECRET"}, ENV, ("Todo",), ("Done",)
    )
    assert config.webhook_secret is not None
    hook = GitLabWebhook(config, config.webhook_secret.value)
    assert hook.verify({"x-gitlab-token": SECRET}, b"{}", 0.0)
    assert not hook.verify({"x-gitlab-token": SECRET[:-1]}, b"{}", 0.0)
    assert not hook.verify({}, b"{}", 0.0)
    project = {"id": 12, "path_with_namespace": "acme/widgets"}
    issue = {"object_kind": "issue", "object_attributes": {"iid": 4}, "project": project}
    note = {"object_kind": "note", "issue": {"iid": 5}, "project": project}
    assert hook.issue_ids(issue) == ["4"] and hook.issue_ids(note) == ["5"]
    other = {**issue, "project": {"id": 13, "path_with_namespace": "acme/other"}}
    assert hook.issue_ids(other) is None


def test_linear_deliveries_need_the_signature_and_a_fresh_timestamp() -> None:
    hook = LinearWebhook(SECRET)
    now = 1_800_000_000.0

    def delivery(sent_s: float, **payload: Any) -> tuple[dict[str, str], bytes]:
        body = json.dumps({"webhookTimestamp": int(sent_s * 1000), **payload}).encode()
        return {"linear-signature": hmac_sha256_hex(SECRET, body)}, body

    headers, body = delivery(now - 5, type="Issue", data={"id": "uuid-1"})
    assert hook.verify(headers, body, now)
    assert hook.issue_ids(json.loads(body)) == ["uuid-1"]
    # The same delivery replayed later than the window: refused, though correctly signed.
    assert not hook.verify(headers, body, now + REPLAY_WINDOW_S + 10)
    assert not hook.verify(*delivery(now + REPLAY_WINDOW_S + 5), now)  # dated in the future
    assert not hook.verify({"linear-signature": "00"}, body, now)
    unsigned_body = json.dumps({"type": "Issue"}).encode()
    assert not hook.verify(
        {"linear-signature": hmac_sha256_hex(SECRET, unsigned_body)}, unsigned_body, now
    )  # no timestamp at all
    comment = {"type": "Comment", "data": {"id": "c-1", "issueId": "uuid-2"}}
    assert hook.issue_ids(comment) == ["uuid-2"]
    assert hook.issue_ids({"type": "Project", "data": {"id": "p"}}) is None


class Observed:
    """What the HTTP app needs of the daemon, recording the refreshes it asks for."""

    def __init__(self, receiver: Any) -> None:
        self.receiver = receiver
        self.refreshes: list[tuple[str, ...] | None] = []
        self.follows = 0
        self.masker = SecretMasker()

    def snapshot(self) -> dict[str, Any]:
        return {}

    async def issue_detail(self, wanted: str) -> dict[str, Any] | None:
        return None

    def request_refresh(self, ids: Any = None) -> None:
        self.refreshes.append(tuple(ids) if ids is not None else None)

    def webhook(self, kind: str) -> Any:
        return self.receiver if kind == "github" else None

    def follow_webhook(self, kind: str, headers: Mapping[str, str]) -> bool:
        # The daemon asks its code host which events are about pull requests.
        about = kind == "github" and headers.get("x-github-event") == "check_run"
        self.follows += about
        return about

    def add_listener(self, listener: Any) -> None:
        return None


async def test_the_endpoint_answers_each_kind_of_delivery_as_it_should() -> None:
    observed = Observed(github_receiver())
    app = create_app(observed)  # type: ignore[arg-type]
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    url = "/api/v1/webhooks/github"
    body = issue_event(3)
    signed = {"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(SECRET, body)}
    async with client:
        good = await client.post(url, content=body, headers=signed)
        assert good.status_code == 202 and good.json() == {"queued": True, "issues": ["3"]}
        bad = await client.post(url, content=body, headers={"X-Hub-Signature-256": "sha256=x"})
        assert bad.status_code == 401 and bad.json() == {"error": "unauthorized"}
        big = b"{" + b" " * MAX_DELIVERY_BYTES + b"}"
        too_big = await client.post(url, content=big, headers=signed)
        assert too_big.status_code == 413

        async def chunks() -> Any:  # no Content-Length: the limit holds while it streams
            for _ in range(3):
                yield b" " * (MAX_DELIVERY_BYTES // 2)

        streamed = await client.post(url, content=chunks(), headers=signed)
        assert streamed.status_code == 413
        other = await client.post("/api/v1/webhooks/gitlab", content=body, headers=signed)
        assert other.status_code == 404
        junk = b"not json"
        unreadable = await client.post(
            url,
            content=junk,
            headers={"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(SECRET, junk)},
        )
        assert unreadable.status_code == 400
        foreign = issue_event(9, "acme/other")
        whole = await client.post(
            url, content=foreign,
            headers={"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(SECRET, foreign)},
        )  # fmt: skip
        assert whole.status_code == 202
        check = await client.post(
            url, content=body, headers={**signed, "X-GitHub-Event": "check_run"}
        )
        assert check.status_code == 202 and check.json() == {"queued": True, "pull_requests": True}
    # Only verified deliveries asked for anything: one ticket, then a whole poll; the check
    # run's delivery made the daemon read its pull requests, no ticket.
    assert observed.refreshes == [("3",), None]
    assert observed.follows == 1


@pytest.mark.slow
async def test_a_signed_delivery_starts_the_ticket_without_waiting_for_the_poll(
    tmp_path: Path,
) -> None:
    github = FakeGitHub(token="ghp_webhook_e2e_0001")
    with serve(github):
        tracker = {
            "kind": "github",
            "provider": {
                "repository": "acme/widgets",
                "api_url": github.base,
                "webhook_secret": "$HOOK_SECRET",
            },
            "active_states": ["Todo", "In Progress"],
            "terminal_states": ["Done", "Cancelled"],
        }
        env = {
            "FAKE_AGENT_SCENARIO": "hang",
            "GITHUB_TOKEN": "ghp_webhook_e2e_0001",
            "HOOK_SECRET": SECRET,
        }
        run = start_daemon(write_workflow(tmp_path, tracker, polling_ms=600_000), env)
        app = create_app(run.orchestrator.view)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        try:
            await run.until(lambda: run.orchestrator.health.last_tick_at is not None)
            github.add(1, labels=["status:todo"])  # a person labels an issue Todo
            body = issue_event(1)
            async with client:
                forged = await client.post(
                    "/api/v1/webhooks/github", content=body,
                    headers={"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex("guess", body)},
                )  # fmt: skip
                assert forged.status_code == 401
                await asyncio.sleep(0)  # nothing was queued: nothing may start
                assert "1" not in run.orchestrator.state.running
                sent = await client.post(
                    "/api/v1/webhooks/github", content=body,
                    headers={"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(SECRET, body)},
                )  # fmt: skip
                assert sent.status_code == 202
            await run.until(lambda: "1" in run.orchestrator.state.running, timeout=15)
            # The refresh read that one issue, not the whole repository.
            paths = [r.path for r in github.requests]
            assert any(p.endswith("/issues/1") for p in paths), paths
        finally:
            await run.stop()

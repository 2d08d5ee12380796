"""The model gateway: usage read from the providers' answers, the environment an agent gets
instead of its key, the core's decisions, and the server between a run and a real local
upstream (a stdlib HTTP server on 127.0.0.1 that streams like the provider)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest

from symphony.base.limits import LimitKind
from symphony.base.wire import WireUsage
from symphony.config.pricing import Price, parse_pricing
from symphony.config.sections import BudgetSettings, Settings
from symphony.core import gateway as core_gateway
from symphony.core.gateway import Refusal, RefusalKind
from symphony.core.state import AgentPause, RunningEntry, SchedulerState, StopReason
from symphony.gateway.access import model_access
from symphony.gateway.server import ModelGateway, ModelGrant, WireReport
from symphony.gateway.tokens import ANTHROPIC, OPENAI, routes, through_gateway
from symphony.gateway.usage import UsageReader, limit_of, usage_of_json
from tests.factories import make_issue, make_settings
from tests.fakes.quiet_http import QuietHTTPServer

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

OPENAI_STREAM = (
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"r"}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"delta":"hi"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r",'
    b'"model":"gpt-5","usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":20},'
    b'"output_tokens":30,"total_tokens":150}}}\n\n'
)
ANTHROPIC_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-x",'
    b'"usage":{"input_tokens":100,"cache_read_input_tokens":50,'
    b'"cache_creation_input_tokens":10,"output_tokens":1}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"x"}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":20}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def read_in_pieces(provider: str, stream: bytes, size: int) -> WireUsage | None:
    reader = UsageReader(provider, streaming=True)
    for start in range(0, len(stream), size):
        reader.feed(stream[start : start + size])
    return reader.finish()


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_the_usage_of_a_stream_is_read_however_it_is_cut(size: int) -> None:
    assert read_in_pieces(OPENAI, OPENAI_STREAM, size) == WireUsage(
        OPENAI, "gpt-5", input_tokens=120, cached_input_tokens=20, output_tokens=30
    )
    assert read_in_pieces(ANTHROPIC, ANTHROPIC_STREAM, size) == WireUsage(
        ANTHROPIC, "claude-x", input_tokens=160, cached_input_tokens=50, cache_write_tokens=10,
        output_tokens=20,
    )  # fmt: skip


def test_a_stream_is_complete_once_its_usage_passed_and_not_before() -> None:
    reader = UsageReader(ANTHROPIC, streaming=True)
    cut = ANTHROPIC_STREAM.index(b"event: message_delta")
    reader.feed(ANTHROPIC_STREAM[:cut])
    assert not reader.complete
    reader.feed(ANTHROPIC_STREAM[cut:])
    assert reader.complete


def test_a_json_answer_and_a_stream_without_usage() -> None:
    body = {"model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 2}}
    assert usage_of_json(ANTHROPIC, body) == WireUsage(ANTHROPIC, "claude-x", 5, 0, 0, 2)
    reader = UsageReader(OPENAI, streaming=False)
    reader.feed(json.dumps({"usage": {"input_tokens": 3, "output_tokens": 4}}).encode())
    assert reader.finish() == WireUsage(OPENAI, None, 3, 0, 0, 4)
    assert read_in_pieces(OPENAI, b"data: {}\n\n", 3) is None


def test_a_refusal_is_read_as_the_providers_limit() -> None:
    usage = json.dumps(
        {"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                   "resets_at": int((NOW + timedelta(hours=2)).timestamp())}}
    ).encode()  # fmt: skip
    limit = limit_of(429, {}, usage, NOW)
    assert limit is not None and limit.kind is LimitKind.USAGE
    assert limit.resets_at == NOW + timedelta(hours=2)
    rate = limit_of(429, {"retry-after": "30"}, b'{"error":{"message":"slow down"}}', NOW)
    assert rate is not None and rate.kind is LimitKind.RATE
    assert rate.resets_at == NOW + timedelta(seconds=30) and rate.detail == "slow down"
    overloaded = limit_of(529, {}, b"", NOW)
    assert overloaded is not None and overloaded.kind is LimitKind.OVERLOADED
    assert limit_of(401, {}, b"", NOW) is None and limit_of(500, {}, b"", NOW) is None


def test_the_agent_gets_a_token_and_the_gateway_where_it_had_keys_and_base_urls() -> None:
    env = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "PATH": "/bin",
           "ANTHROPIC_BASE_URL": "http://proxy.example/"}  # fmt: skip
    found = routes(env)
    assert [(r.provider.name, r.upstream, r.key) for r in found] == [
        (OPENAI, "https://api.openai.com/v1", "sk-o"),
        (ANTHROPIC, "http://proxy.example", "sk-a"),
    ]
    given = through_gateway(env, found, "http://127.0.0.1:9", "sym-t")
    assert given == {
        "OPENAI_API_KEY": "sym-t", "ANTHROPIC_API_KEY": "sym-t", "PATH": "/bin",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/openai",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/anthropic",
    }  # fmt: skip
    # A subscription login: no key, no route; the agent calls its provider itself.
    assert routes({"CLAUDE_CONFIG_DIR": "/h/.claude"}) == ()


# -- the core's decisions ------------------------------------------------------------------------


def running_state(
    per_ticket_usd: float | None = None, pricing: dict[str, Any] | None = None
) -> tuple[SchedulerState, Settings]:
    state = SchedulerState()
    issue = make_issue("ABC-1", id="1")
    state.running["1"] = RunningEntry(issue, None, 0.0, NOW, agent_kind="claude")
    settings = dataclasses.replace(
        make_settings(),
        budget=BudgetSettings(per_ticket_usd=per_ticket_usd),
        pricing=parse_pricing(pricing or {}),
    )
    return state, settings


def test_an_agent_on_another_host_gets_the_gateway_at_the_address_it_reaches_it_at() -> None:
    grant = ModelGrant(
        "tok",
        {"OPENAI_BASE_URL": "http://127.0.0.1:4000/openai/v1", "OPENAI_API_KEY": "tok",
         "NOTE": "http://127.0.0.1:4000 is not a base"},
        "http://127.0.0.1:4000",
        ("openai",),
    )  # fmt: skip
    assert grant.env_at("http://127.0.0.1:21000") == {
        "OPENAI_BASE_URL": "http://127.0.0.1:21000/openai/v1",
        "OPENAI_API_KEY": "tok",
        "NOTE": "http://127.0.0.1:4000 is not a base",
    }


def test_a_call_is_refused_once_the_run_stops_its_kind_is_paused_or_its_budget_spent() -> None:
    state, settings = running_state(per_ticket_usd=1.0)
    assert core_gateway.refusal(state, settings, "1", "claude", NOW) is None
    assert core_gateway.refusal(state, settings, "2", "claude", NOW) == Refusal(
        RefusalKind.REVOKED, "symphony: this run has ended; its token is revoked"
    )
    state.agent_pauses["claude"] = AgentPause(
        "claude", LimitKind.USAGE, "spent", NOW, NOW + timedelta(hours=1), True
    )
    paused = core_gateway.refusal(state, settings, "1", "claude", NOW)
    assert paused is not None and paused.kind is RefusalKind.LIMITED
    assert paused.resets_at == NOW + timedelta(hours=1)
    assert core_gateway.refusal(state, settings, "1", "claude", NOW + timedelta(hours=2)) is None
    state.running["1"].stop_reason = StopReason.PERSON
    stopped = core_gateway.refusal(state, settings, "1", "claude", NOW)
    assert stopped is not None and stopped.kind is RefusalKind.REVOKED


def test_usage_at_the_wire_is_priced_and_stops_a_run_over_budget_before_its_agent_says_so() -> None:
    state, settings = running_state(0.5, {"claude-x": {"input": 1.0, "output": 10.0}})
    call = WireUsage(ANTHROPIC, "claude-x", input_tokens=100_000, output_tokens=20_000)
    # $0.30 a call: the first stays within the budget, the second spends it.
    assert core_gateway.on_wire_usage(state, "1", call, settings) == []
    wire = state.running["1"].wire
    assert wire is not None and wire.cost_usd == pytest.approx(0.3) and wire.requests == 1
    assert core_gateway.refusal(state, settings, "1", "claude", NOW) is None
    effects = core_gateway.on_wire_usage(state, "1", call, settings)
    assert [type(e).__name__ for e in effects] == ["StopWorker"]
    assert state.running["1"].stop_reason is StopReason.BUDGET
    assert state.wire_totals["1"].total_tokens == 240_000
    assert Price(1.0, 10.0).cost_usd(200_000, 0, 40_000) == pytest.approx(0.6)
    refused = core_gateway.refusal(state, settings, "1", "claude", NOW)
    assert refused is not None and refused.kind is RefusalKind.REVOKED


def test_a_limit_at_the_wire_pauses_the_agent_kind_at_once() -> None:
    state, _ = running_state()
    limit = limit_of(429, {"retry-after": "600"}, b'{"error":{"message":"usage limit"}}', NOW)
    assert limit is not None
    core_gateway.on_wire_limit(state, "1", limit, NOW)
    pause = state.agent_pauses["claude"]
    assert pause.named and pause.until == NOW + timedelta(seconds=600)
    assert pause.limit is LimitKind.USAGE


# -- the server, between a run and a real local upstream ------------------------------------------


class Upstream(QuietHTTPServer):
    """A provider on 127.0.0.1: records each call and answers with `answer`."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: list[tuple[str, dict[str, str], bytes]] = []
        self.answer: tuple[int, str, bytes] = (200, "text/event-stream", OPENAI_STREAM)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Upstream

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.calls.append((self.path, headers, body))
        status, kind, payload = self.server.answer
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


class Daemon:
    """What the gateway asks and tells: a refusal to give, and the reports it made."""

    def __init__(self) -> None:
        self.refusal: Refusal | None = None
        self.reports: list[WireReport] = []

    def admit(self, issue_id: str, agent_kind: str) -> Refusal | None:
        return self.refusal


async def test_a_call_goes_upstream_with_the_real_key_and_comes_back_unchanged(
    upstream: Upstream,
) -> None:
    daemon = Daemon()
    gateway = ModelGateway(daemon.admit, daemon.reports.append, wall=lambda: NOW)
    env = {"OPENAI_API_KEY": "sk-real", "OPENAI_BASE_URL": f"{upstream.url}/v1"}
    try:
        grant = await gateway.grant("1", "codex", env)
        assert grant is not None and "sk-real" not in json.dumps(grant.env)
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"{grant.env['OPENAI_BASE_URL']}/responses?x=1",
                headers={"authorization": f"Bearer {grant.token}", "originator": "codex"},
                json={"model": "gpt-5", "stream": True},
            )
            assert answer.status_code == 200 and answer.content == OPENAI_STREAM
            path, headers, body = upstream.calls[0]
            assert path == "/v1/responses?x=1" and headers["authorization"] == "Bearer sk-real"
            assert headers["originator"] == "codex" and json.loads(body)["model"] == "gpt-5"
            assert daemon.reports == [
                WireReport("1", usage=WireUsage(OPENAI, "gpt-5", 120, 20, 0, 30))
            ]
            # A refusal of the daemon's, in the provider's words; nothing goes upstream.
            daemon.refusal = Refusal(RefusalKind.LIMITED, "paused", NOW + timedelta(minutes=5))
            refused = await client.post(
                f"{grant.env['OPENAI_BASE_URL']}/responses",
                headers={"authorization": f"Bearer {grant.token}"}, json={},
            )  # fmt: skip
            assert refused.status_code == 429 and refused.headers["retry-after"] == "300"
            assert refused.json()["error"]["type"] == "usage_limit_reached"
            assert len(upstream.calls) == 1 and daemon.reports[-1].refused
            # A revoked token opens nothing, at once.
            daemon.refusal = None
            gateway.revoke(grant)
            revoked = await client.post(
                f"{grant.env['OPENAI_BASE_URL']}/responses",
                headers={"authorization": f"Bearer {grant.token}"}, json={},
            )  # fmt: skip
            assert revoked.status_code == 401 and len(upstream.calls) == 1
    finally:
        await gateway.close()


async def test_an_anthropic_limit_is_passed_on_and_reported(upstream: Upstream) -> None:
    daemon = Daemon()
    gateway = ModelGateway(daemon.admit, daemon.reports.append, wall=lambda: NOW)
    env = {"ANTHROPIC_API_KEY": "sk-ant-real", "ANTHROPIC_BASE_URL": upstream.url}
    refusal = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    upstream.answer = (429, "application/json", refusal)
    try:
        grant = await gateway.grant("1", "claude", env)
        assert grant is not None
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"{grant.env['ANTHROPIC_BASE_URL']}/v1/messages",
                headers={"x-api-key": grant.token}, json={"stream": True},
            )  # fmt: skip
        assert answer.status_code == 429 and answer.content == refusal
        assert upstream.calls[0][1]["x-api-key"] == "sk-ant-real"
        [report] = daemon.reports
        assert report.limit is not None and report.limit.kind is LimitKind.RATE
    finally:
        await gateway.close()


def test_check_says_which_agents_go_through_the_gateway_and_which_keep_their_login() -> None:
    settings = make_settings()
    environ = {"PATH": "/bin", "OPENAI_API_KEY": "sk-o", "CLAUDE_CONFIG_DIR": "/h/.claude"}
    codex, claude = model_access(settings, ["codex", "claude"], environ)
    assert "codex: through the daemon's model gateway (OPENAI_API_KEY stays" in codex
    assert "claude: its own login (no API key in its environment)" in claude

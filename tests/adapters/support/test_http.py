"""The HTTP plumbing every tracker adapter shares: retries, rate limits, errors, ETags."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
import respx

from symphony.tracker.contract import (
    MISSING_TRACKER_SECRET,
    TRACKER_RATE_LIMITED,
    TRACKER_REQUEST,
    TRACKER_RESPONSE,
    TRACKER_STATUS,
    TrackerError,
)
from symphony_adapters._support.graphql import graphql, is_mutation
from symphony_adapters._support.http import HttpClient, next_link
from symphony_adapters._support.normalize import as_int, parse_timestamp
from symphony_adapters._support.provider import provider_secret
from tests.adapters.clock import FakeClock

BASE = "https://api.example.test"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def client(clock: FakeClock) -> HttpClient:
    return HttpClient(
        provider="Example",
        base_url=BASE,
        headers={"Authorization": "Bearer tok_secret_value"},
        clock=clock,
        sleep=clock.sleep,
    )


@respx.mock
async def test_transient_server_errors_are_retried_then_succeed(clock: FakeClock) -> None:
    route = respx.get(f"{BASE}/x").mock(
        side_effect=[httpx.Response(503), httpx.Response(502), httpx.Response(200, json={"a": 1})]
    )
    response = await client(clock).request("GET", "/x")
    assert response.body == {"a": 1} and route.call_count == 3
    assert len(clock.slept) == 2


@respx.mock
async def test_retries_are_bounded_and_end_in_a_status_error(clock: FakeClock) -> None:
    route = respx.get(f"{BASE}/x").mock(return_value=httpx.Response(500, json={"message": "boom"}))
    with pytest.raises(TrackerError) as err:
        await client(clock).request("GET", "/x")
    assert route.call_count == 3
    assert err.value.category == TRACKER_STATUS and "500" in err.value.message
    assert "boom" in err.value.message


@respx.mock
async def test_transport_failure_is_a_request_error(clock: FakeClock) -> None:
    respx.get(f"{BASE}/x").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(TrackerError) as err:
        await client(clock).request("GET", "/x")
    assert err.value.category == TRACKER_REQUEST


async def test_an_unreachable_tracker_is_named_by_its_address_and_the_reason(
    clock: FakeClock,
) -> None:
    # A real connection to a port nobody listens on: the operating system's own refusal.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    unreachable = HttpClient(
        provider="Example", base_url=f"http://127.0.0.1:{port}/api", headers={},
        clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    with pytest.raises(TrackerError) as err:
        await unreachable.request("GET", "/issues", params={"token": "not-for-logs"})
    message = err.value.message
    assert message.startswith(f"Example unreachable at http://127.0.0.1:{port}: ConnectError")
    assert "refused" in message.lower()
    assert "not-for-logs" not in message and "/issues" not in message


@respx.mock
async def test_429_with_retry_after_blocks_further_requests_until_then(clock: FakeClock) -> None:
    route = respx.get(f"{BASE}/x").mock(
        return_value=httpx.Response(429, headers={"retry-after": "30"})
    )
    api = client(clock)
    with pytest.raises(TrackerError) as err:
        await api.request("GET", "/x")
    assert err.value.category == TRACKER_RATE_LIMITED and err.value.retry_after_s == 30
    clock.now += 10
    with pytest.raises(TrackerError) as again:
        await api.request("GET", "/x")
    assert again.value.category == TRACKER_RATE_LIMITED
    assert route.call_count == 1  # the blocked call spent nothing
    clock.now += 21
    route.mock(return_value=httpx.Response(200, json=[]))
    assert (await api.request("GET", "/x")).body == []


@respx.mock
async def test_403_with_no_remaining_quota_waits_for_the_reset_header(clock: FakeClock) -> None:
    reset = int(clock.now + 120)
    respx.get(f"{BASE}/x").mock(
        return_value=httpx.Response(
            403, headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}
        )
    )
    with pytest.raises(TrackerError) as err:
        await client(clock).request("GET", "/x")
    assert err.value.category == TRACKER_RATE_LIMITED
    assert err.value.retry_after_s == pytest.approx(120, abs=1)


@respx.mock
async def test_authentication_failure_names_the_problem_but_never_the_token(
    clock: FakeClock,
) -> None:
    respx.get(f"{BASE}/x").mock(return_value=httpx.Response(401, json={"message": "Bad creds"}))
    with pytest.raises(TrackerError) as err:
        await client(clock).request("GET", "/x")
    assert err.value.category == TRACKER_STATUS
    assert "401" in err.value.message and "tok_secret_value" not in str(err.value)


@respx.mock
async def test_body_that_is_not_json_is_a_response_error(clock: FakeClock) -> None:
    respx.get(f"{BASE}/x").mock(return_value=httpx.Response(200, text="<html>oops"))
    with pytest.raises(TrackerError) as err:
        await client(clock).request("GET", "/x")
    assert err.value.category == TRACKER_RESPONSE


@respx.mock
async def test_conditional_get_reuses_the_cached_body_on_304(clock: FakeClock) -> None:
    route = respx.get(f"{BASE}/x").mock(
        side_effect=[
            httpx.Response(200, json=[1, 2], headers={"etag": '"v1"'}),
            httpx.Response(304),
        ]
    )
    api = client(clock)
    first = await api.request("GET", "/x", conditional=True)
    second = await api.request("GET", "/x", conditional=True)
    assert first.body == second.body == [1, 2]
    assert route.calls[1].request.headers["if-none-match"] == '"v1"'
    assert api.quota.not_modified == 1 and api.quota.requests == 2


@respx.mock
async def test_quota_headers_are_recorded(clock: FakeClock) -> None:
    respx.get(f"{BASE}/x").mock(
        return_value=httpx.Response(
            200, json={}, headers={"x-ratelimit-remaining": "4999", "x-ratelimit-reset": "5"}
        )
    )
    api = client(clock)
    await api.request("GET", "/x")
    assert api.quota.remaining == 4999 and api.quota.reset_at == 5


@respx.mock
async def test_graphql_errors_fail_the_call_and_limits_block_the_client(clock: FakeClock) -> None:
    respx.post(f"{BASE}/graphql").mock(
        side_effect=[
            httpx.Response(200, json={"errors": [{"message": "Field x unknown"}]}),
            httpx.Response(
                200,
                json={"errors": [{"message": "slow down", "type": "RATE_LIMITED"}]},
                headers={"retry-after": "9"},
            ),
            httpx.Response(200, json={"data": {"ok": True}}),
        ]
    )
    api = client(clock)

    def limited(error: object) -> bool:
        return isinstance(error, dict) and error.get("type") == "RATE_LIMITED"

    with pytest.raises(TrackerError) as err:
        await graphql(api, "{ x }", {}, path="/graphql", is_rate_limited=limited)
    assert err.value.category == TRACKER_RESPONSE and "Field x unknown" in err.value.message
    with pytest.raises(TrackerError) as limit:
        await graphql(api, "{ x }", {}, path="/graphql", is_rate_limited=limited)
    assert limit.value.category == TRACKER_RATE_LIMITED and limit.value.retry_after_s == 9
    clock.now += 10
    assert await graphql(api, "{ x }", {}, path="/graphql") == {"ok": True}


def test_next_link_is_read_from_the_link_header() -> None:
    headers = httpx.Headers(
        {"link": '<https://x/y?page=2>; rel="next", <https://x/y?page=9>; rel="last"'}
    )
    assert next_link(headers) == "https://x/y?page=2"
    assert next_link(httpx.Headers({})) is None


def test_secret_comes_from_the_named_or_default_variable_and_missing_is_clear() -> None:
    assert provider_secret({}, "token", "GITHUB_TOKEN", {"GITHUB_TOKEN": "abc"}).value == "abc"
    secret = provider_secret({"token": "$MY_TOKEN"}, "token", "GITHUB_TOKEN", {"MY_TOKEN": "x"})
    assert (secret.value, secret.env_name) == ("x", "MY_TOKEN")
    with pytest.raises(TrackerError) as err:
        provider_secret({}, "token", "GITHUB_TOKEN", {"GITHUB_TOKEN": ""})
    assert err.value.category == MISSING_TRACKER_SECRET and "$GITHUB_TOKEN" in err.value.message


def test_timestamps_and_integers_normalize_or_become_none() -> None:
    assert parse_timestamp("2026-01-02T03:04:05Z") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_timestamp("2026-01-02T03:04:05.123+02:00") is not None
    assert parse_timestamp("yesterday") is None and parse_timestamp(None) is None
    assert as_int(3.0) == 3 and as_int(True) is None and as_int("3") is None


@respx.mock
async def test_a_post_is_not_sent_again_after_a_5xx_or_a_lost_answer(clock: FakeClock) -> None:
    # A comment or ticket the provider created before answering 503 must not be created twice.
    route = respx.post(f"{BASE}/comments").mock(return_value=httpx.Response(503))
    http = client(clock)
    with pytest.raises(TrackerError) as err:
        await http.request("POST", "/comments", json_body={"body": "hi"})
    assert err.value.category == TRACKER_STATUS and route.call_count == 1
    lost = respx.post(f"{BASE}/lost").mock(side_effect=httpx.ReadTimeout("lost"))
    with pytest.raises(TrackerError) as err:
        await http.request("POST", "/lost", json_body={})
    assert lost.call_count == 1 and "may have been applied" in err.value.message


@respx.mock
async def test_a_post_that_never_reached_the_provider_is_retried(clock: FakeClock) -> None:
    route = respx.post(f"{BASE}/comments").mock(
        side_effect=[httpx.ConnectError("refused"), httpx.Response(201, json={"id": 1})]
    )
    response = await client(clock).request("POST", "/comments", json_body={"body": "hi"})
    assert response.status == 201 and route.call_count == 2


@respx.mock
async def test_a_graphql_query_is_retried_but_a_mutation_is_not(clock: FakeClock) -> None:
    assert is_mutation("# note\n  mutation Move { x }") and not is_mutation("query { x }")
    route = respx.post(f"{BASE}/graphql").mock(
        side_effect=[httpx.Response(502), httpx.Response(200, json={"data": {"x": 1}})]
    )
    assert await graphql(client(clock), "query { x }", {}, path="/graphql") == {"x": 1}
    assert route.call_count == 2
    route.mock(side_effect=[httpx.Response(502), httpx.Response(200, json={"data": {}})])
    with pytest.raises(TrackerError):
        await graphql(client(clock), "mutation { x }", {}, path="/graphql")
    assert route.call_count == 3

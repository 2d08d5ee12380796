"""The HTTP server against a hostile page, probed over real HTTP: forged Host names (DNS
rebinding), framing, redirect tricks, cross-origin posts, token guessing from one address
behind spoofed forwarding headers, and malformed bodies; the framing also in real Chromium."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.observability.auth import LOGIN_FAILURES
from symphony.observability.server import RunningServer, create_app, serve
from symphony.observability.web_guard import accepted_hosts, host_allowed, safe_next
from symphony.tracker.webhooks import hmac_sha256_hex
from tests.harness import Board, Running, scenario_env, start
from tests.observability.test_server import _with_server
from tests.tracker.test_webhooks import SECRET, github_receiver

TOKEN = "correct-horse-battery-staple"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Running, RunningServer]]:
    board = Board(tmp_path)
    board.ticket("ABC-1", state="Done")
    board.write_workflow()
    run = start(board, scenario_env("complete", HOME=str(tmp_path)), watch=False)
    http = await serve(create_app(run.orchestrator.view, auth_token=TOKEN), "127.0.0.1", 0)
    try:
        yield run, http
    finally:
        await http.stop()
        await run.stop()


def port_of(http: RunningServer) -> int:
    return int(http.url.rstrip("/").rsplit(":", 1)[1])


async def test_only_the_server_s_own_names_are_answered(
    served: tuple[Running, RunningServer],
) -> None:
    _, http = served
    port = port_of(http)
    async with httpx.AsyncClient(base_url=http.url) as client:
        for name in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            assert (await client.get("/api/v1/state", headers={"Host": name})).status_code == 200
        for name in (f"attacker.example:{port}", "rebind.attacker.example", ""):
            answer = await client.get("/api/v1/state", headers={"Host": name})
            assert answer.status_code == 421, name
            assert answer.json()["error"]["code"] == "unknown_host"
            assert "server.allowed_hosts" in answer.json()["error"]["message"]
    assert host_allowed("dash.example.com", accepted_hosts("0.0.0.0", ("*.example.com",)))
    assert not host_allowed("example.org", accepted_hosts("0.0.0.0", ("*.example.com",)))
    assert host_allowed("anything", accepted_hosts("0.0.0.0", ()))  # bound wide, none named


async def test_every_answer_forbids_framing(served: tuple[Running, RunningServer]) -> None:
    _, http = served
    async with httpx.AsyncClient(base_url=http.url) as client:
        for path in ("/", "/review", "/login", "/api/v1/state", "/nowhere"):
            answer = await client.get(path)
            assert answer.headers["content-security-policy"] == "frame-ancestors 'none'", path
            assert answer.headers["x-frame-options"] == "DENY"


async def test_a_state_changing_request_from_another_site_is_refused(
    served: tuple[Running, RunningServer],
) -> None:
    run, http = served
    refreshes: list[object] = []
    run.orchestrator.view.request_refresh = lambda ids=None: refreshes.append(ids)  # type: ignore[method-assign]
    async with httpx.AsyncClient(base_url=http.url) as client:
        for headers in (
            {"Origin": "http://attacker.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
        ):
            for path in ("/api/v1/refresh", "/logout", "/api/v1/actions/pause"):
                answer = await client.post(path, headers=headers)
                assert answer.status_code == 403, (path, headers)
        assert refreshes == []
        mine = await client.post("/api/v1/refresh", headers={"Origin": http.url.rstrip("/")})
        assert mine.status_code == 202
        assert (await client.post("/api/v1/refresh")).status_code == 202  # a script, no origin


@pytest.mark.parametrize(
    "target",
    ["//evil.example/", "/\\evil.example", "https://evil.example/", "/a\r\nSet-Cookie: x=1",
     "/\tevil", "javascript:alert(1)"],
)  # fmt: skip
async def test_the_login_sends_nowhere_but_this_server(
    served: tuple[Running, RunningServer], target: str
) -> None:
    _, http = served
    async with httpx.AsyncClient(base_url=http.url) as client:
        form = await client.get("/login", params={"next": target})
        assert form.status_code == 200 and 'name="next" value="/"' in form.text
        done = await client.post("/login", data={"name": "ada", "token": TOKEN, "next": target})
        assert done.status_code == 303 and done.headers["location"] == "/"
    assert safe_next("/review?ticket=ABC-1", "/") == "/review?ticket=ABC-1"


async def test_guessed_tokens_are_limited_per_address_whatever_it_says_it_forwards(
    served: tuple[Running, RunningServer],
) -> None:
    _, http = served
    async with httpx.AsyncClient(base_url=http.url) as client:
        for n in range(LOGIN_FAILURES):
            guess = await client.post(
                "/api/v1/actions/pause",
                headers={"Authorization": f"Bearer guess-{n}", "X-Forwarded-For": f"10.0.0.{n}"},
            )
            assert guess.status_code == 401
        right = await client.post(
            "/api/v1/actions/pause",
            headers={"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "10.9.9.9"},
        )
        assert right.status_code == 429 and int(right.headers["retry-after"]) > 0
        login = await client.post("/login", data={"name": "x", "token": TOKEN},
                                  headers={"X-Forwarded-For": "10.1.1.1"})  # fmt: skip
        assert login.status_code == 429  # one count for logins and bearer tokens


async def test_malformed_bodies_get_a_clean_400(served: tuple[Running, RunningServer]) -> None:
    run, http = served
    receiver = github_receiver()
    run.orchestrator.view.webhook = lambda kind: receiver  # type: ignore[method-assign]
    deep = b"[" * 100_000 + b"]" * 100_000
    odd = json.dumps({"issue": ["not", "an", "object"], "repository": 7}).encode()
    async with httpx.AsyncClient(base_url=http.url) as client:
        for body in (deep, b"{not json", odd):
            signed = {"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(SECRET, body),
                      "X-GitHub-Event": "issues"}  # fmt: skip
            answer = await client.post("/api/v1/webhooks/github", content=body, headers=signed)
            assert answer.status_code in (400, 202), answer.text
            assert "Traceback" not in answer.text and "internal_error" not in answer.text
        acted = await client.post(
            "/api/v1/ABC-1/actions/cancel", content=deep,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )  # fmt: skip
        assert (
            acted.status_code == 400 and acted.json()["error"]["message"] == "the body is not JSON"
        )
    assert time.time()  # the daemon still answers: the server did not fall over
    async with httpx.AsyncClient(base_url=http.url) as client:
        assert (await client.get("/livez")).status_code == 200


@pytest.mark.slow  # a real Chromium, as the dashboard's browser tests
def test_a_hostile_page_cannot_frame_the_dashboard(tmp_path: Path) -> None:
    """Real Chromium: a page of another origin frames the dashboard; the frame stays empty."""
    import asyncio
    import threading

    from tests.observability.test_dashboard_browser import _page  # real Chromium, or skip

    ready: dict[str, str] = {}
    stop = threading.Event()

    async def main() -> None:
        board = Board(tmp_path)
        board.write_workflow()
        run = start(board, scenario_env("complete", HOME=str(tmp_path)), watch=False)
        http = await serve(create_app(run.orchestrator.view), "127.0.0.1", 0)
        attacker = await asyncio.start_server(
            lambda r, w: _answer(w, ready["dashboard"]), "127.0.0.1", 0
        )
        ready["dashboard"] = http.url
        ready["attacker"] = f"http://localhost:{attacker.sockets[0].getsockname()[1]}/"
        while not stop.is_set():
            await asyncio.sleep(0.05)
        attacker.close()
        await http.stop()
        await run.stop()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while "attacker" not in ready and time.monotonic() < deadline:
            time.sleep(0.05)
        with _page("framed", 800) as page:
            page.goto(ready["attacker"])
            page.wait_for_timeout(1500)
            frame = page.frame(name="victim")
            framed = frame.evaluate("document.body ? document.body.innerText : ''") if frame else ""
            assert "symphony" not in framed.lower()
    finally:
        stop.set()
        thread.join(10)


def _answer(writer: object, dashboard: str) -> None:
    page = (f'<html><body><iframe name="victim" src="{dashboard}" width=600 height=400>'
            "</iframe></body></html>").encode()  # fmt: skip
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(page)}\r\n\r\n"
    writer.write(head.encode() + page)  # type: ignore[attr-defined]
    writer.close()  # type: ignore[attr-defined]


def test_the_names_and_proxies_a_server_trusts_are_checked_at_load(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.write_workflow()
    server = {"port": 8080, "host": "0.0.0.0", "auth_token": TOKEN}
    path = _with_server(board, {**server, "allowed_hosts": ["Dash.Example.com", "*.corp.io"],
                                "trusted_proxies": ["10.0.0.0/8", "::1"]})  # fmt: skip
    settings = load_settings(path, {}).server
    assert settings.allowed_hosts == ("dash.example.com", "*.corp.io")
    assert settings.trusted_proxies == ("10.0.0.0/8", "::1")
    for bad, said in (
        ({"allowed_hosts": ["https://dash.example.com/"]}, "host names"),
        ({"trusted_proxies": ["proxy.local"]}, "addresses or networks"),
    ):
        with pytest.raises(ConfigError, match=said):
            load_settings(_with_server(board, {**server, **bad}), {})

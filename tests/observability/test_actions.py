"""A person's actions through the HTTP server: the token, the login, CSRF, and pausing and
resuming dispatch for the whole daemon, against a real orchestrator on a local board."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.observability.auth import CSRF_COOKIE, LOGIN_FAILURES, SESSION_COOKIE
from symphony.observability.server import create_app
from tests.harness import Board, Running, scenario_env, start
from tests.observability.test_server import _with_server

TOKEN = "correct-horse-battery-staple"
BASE = "http://symphony"


@pytest.fixture
async def idle(tmp_path: Path) -> AsyncIterator[Running]:
    """A daemon with nothing to do: one ticket, already Done."""
    board = Board(tmp_path)
    board.ticket("ABC-1", state="Done")
    board.write_workflow()
    run = start(board, scenario_env("complete", HOME=str(tmp_path)), watch=False)
    try:
        yield run
    finally:
        await run.stop()


def client(run: Running, token: str | None = TOKEN) -> httpx.AsyncClient:
    app = create_app(run.orchestrator.view, auth_token=token)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


def bearer(token: str = TOKEN, actor: str = "ada") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Symphony-Actor": actor}


def activity(run: Running) -> list[str]:
    return [row["message"] for row in run.orchestrator.snapshot()["activity"]]


async def test_without_a_token_configured_every_action_is_refused(idle: Running) -> None:
    async with client(idle, token=None) as http:
        answer = await http.post("/api/v1/actions/pause", headers=bearer())
        page = await http.get("/login")
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "actions_disabled"
    assert "server.auth_token" in answer.json()["error"]["message"]
    assert idle.orchestrator.state.paused is None
    assert "Actions are off" in page.text


async def test_the_token_pauses_and_resumes_dispatch_and_the_activity_says_who(
    idle: Running,
) -> None:
    async with client(idle) as http:
        paused = await http.post("/api/v1/actions/pause", headers=bearer())
        again = await http.post("/api/v1/actions/pause", headers=bearer())
        state = (await http.get("/api/v1/state")).json()
        resumed = await http.post("/api/v1/actions/resume", headers=bearer(actor="bob"))
        not_paused = await http.post("/api/v1/actions/resume", headers=bearer())
        unknown = await http.post("/api/v1/actions/explode", headers=bearer())
    assert paused.status_code == 200 and paused.json() == {
        "action": "pause", "by": "ada", "paused": True,
    }  # fmt: skip
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_paused"
    assert state["paused"]["by"] == "ada"
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert not_paused.status_code == 409
    assert unknown.status_code == 404
    assert idle.orchestrator.state.paused is None
    assert "dispatch paused by ada" in activity(idle)
    assert "dispatch resumed by bob" in activity(idle)


async def test_a_wrong_token_or_another_origin_changes_nothing(idle: Running) -> None:
    async with client(idle) as http:
        wrong = await http.post("/api/v1/actions/pause", headers=bearer("not-the-token"))
        foreign = await http.post(
            "/api/v1/actions/pause", headers={**bearer(), "Origin": "https://evil.example"}
        )
        anonymous = await http.post("/api/v1/actions/pause")
    assert wrong.status_code == 401
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "cross_origin"
    assert anonymous.status_code == 401
    assert idle.orchestrator.state.paused is None


async def test_a_browser_logs_in_once_and_acts_with_its_csrf_token(idle: Running) -> None:
    async with client(idle) as http:
        form = {"name": "Ada Lovelace", "token": TOKEN, "next": "/review"}
        login = await http.post("/login", data=form)
        assert login.status_code == 303 and login.headers["location"] == "/review"
        cookies = login.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith(f"{SESSION_COOKIE}="))
        assert "HttpOnly" in session and "SameSite=strict" in session
        csrf = http.cookies[CSRF_COOKIE]
        no_csrf = await http.post("/api/v1/actions/pause")
        wrong_csrf = await http.post("/api/v1/actions/pause", headers={"X-Symphony-CSRF": "x"})
        assert idle.orchestrator.state.paused is None
        paused = await http.post("/api/v1/actions/pause", headers={"X-Symphony-CSRF": csrf})
        await http.post("/logout")
        after = await http.post("/api/v1/actions/resume", headers={"X-Symphony-CSRF": csrf})
    assert no_csrf.status_code == 403 and no_csrf.json()["error"]["code"] == "csrf"
    assert wrong_csrf.status_code == 403
    assert paused.status_code == 200 and paused.json()["by"] == "Ada Lovelace"
    assert after.status_code == 401  # logged out: the session opens nothing
    assert idle.orchestrator.state.paused is not None


async def test_failed_logins_are_limited_per_address_and_never_redirect_away(
    idle: Running,
) -> None:
    async with client(idle) as http:
        for _ in range(LOGIN_FAILURES):
            failed = await http.post("/login", data={"name": "x", "token": "guess"})
            assert failed.status_code == 401
        limited = await http.post("/login", data={"name": "x", "token": TOKEN})
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    async with client(idle) as http:
        away = await http.post(
            "/login", data={"name": "x", "token": TOKEN, "next": "//evil.example/"}
        )
    assert away.status_code == 303 and away.headers["location"] == "/"


def test_a_server_reachable_from_other_machines_needs_a_token(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.write_workflow()
    path = _with_server(board, {"port": 8080, "host": "0.0.0.0"})
    with pytest.raises(ConfigError, match=r"set server\.auth_token"):
        load_settings(path, {})
    path = _with_server(board, {"host": "0.0.0.0", "auth_token": "$SYMPHONY_TOKEN"})
    with pytest.raises(ConfigError, match=r"set server\.auth_token"):
        load_settings(path, {})  # unset: no token
    assert load_settings(path, {"SYMPHONY_TOKEN": TOKEN}).server.auth_token == TOKEN
    path = _with_server(board, {"auth_token": "short"})
    with pytest.raises(ConfigError, match="at least 16 characters"):
        load_settings(path, {})


STAGES = {
    "plan": {"states": ["Todo"], "on_success": "Plan Review"},
    "implement": {"states": ["Ready", "Rework"], "on_success": "Human Review", "evidence": True},
}


@pytest.fixture
async def reviewing(tmp_path: Path) -> AsyncIterator[tuple[Board, Running]]:
    """A stage-mode daemon whose board has a plan and a diff waiting for a person."""
    board = Board(tmp_path)
    board.ticket("ABC-1", state="Plan Review")
    board.ticket("ABC-2", state="Human Review")
    board.write_workflow(stages=STAGES)
    _, front, prompt = board.workflow.read_text().split("---\n", 2)
    config = yaml.safe_load(front)
    del config["tracker"]["active_states"]  # the stages define them
    config["stages"] = STAGES  # in their order: the plan stage first
    board.workflow.write_text(f"---\n{yaml.safe_dump(config, sort_keys=False)}---\n{prompt}")
    run = start(board, scenario_env("complete", HOME=str(tmp_path)), watch=False)
    try:
        await run.until(lambda: run.orchestrator.board.row("ABC-2") is not None)
        yield board, run
    finally:
        await run.stop()


async def test_approving_a_plan_moves_the_ticket_and_says_who_on_it(
    reviewing: tuple[Board, Running],
) -> None:
    board, run = reviewing
    async with client(run) as http:
        answer = await http.post("/api/v1/ABC-1/actions/approve", headers=bearer())
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "action": "approve", "ticket": "ABC-1", "by": "ada", "target": "Ready", "queued": True,
    }  # fmt: skip
    await run.until(lambda: board.state_of("ABC-1") != "Plan Review")
    assert board.state_of("ABC-1") == "Ready"
    text = (board.tickets / "ABC-1.md").read_text()
    assert "ada approved at Plan Review; moving the ticket to Ready." in text
    assert any("ada: approve ABC-1" in line for line in activity(run))


async def test_requesting_changes_puts_the_words_on_the_ticket_for_its_next_run(
    reviewing: tuple[Board, Running],
) -> None:
    board, run = reviewing
    async with client(run) as http:
        empty = await http.post("/api/v1/ABC-2/actions/request_changes", headers=bearer())
        wrong = await http.post("/api/v1/ABC-2/actions/approve_everything", headers=bearer())
        unknown = await http.post("/api/v1/NOPE-9/actions/approve", headers=bearer())
        sent = await http.post(
            "/api/v1/ABC-2/actions/request_changes", headers=bearer(actor="bob"),
            json={"comment": "Handle negative numbers too."},
        )  # fmt: skip
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "comment_required"
    assert wrong.status_code == 404 and unknown.status_code == 404
    assert sent.status_code == 200 and sent.json()["target"] == "Rework"
    await run.until(lambda: board.state_of("ABC-2") == "Rework", timeout=10)
    text = (board.tickets / "ABC-2.md").read_text()
    assert "bob requested changes at Human Review" in text
    assert "Handle negative numbers too." in text


async def test_an_action_away_from_a_checkpoint_is_refused_and_changes_nothing(
    reviewing: tuple[Board, Running],
) -> None:
    board, run = reviewing
    async with client(run) as http:
        first = await http.post("/api/v1/ABC-1/actions/approve", headers=bearer())
        await run.until(lambda: board.state_of("ABC-1") == "Ready")
        again = await http.post("/api/v1/ABC-1/actions/approve", headers=bearer())
        no_token = await http.post("/api/v1/ABC-2/actions/cancel")
    assert first.status_code == 200
    assert again.status_code == 409
    assert again.json()["error"]["code"] in ("not_at_checkpoint", "busy")
    assert no_token.status_code == 401 and board.state_of("ABC-2") == "Human Review"


async def test_stop_ends_the_agent_and_holds_the_ticket_until_retried(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(polling_ms=100)
    # A home of its own: a login shell killed mid-profile must not slow later tests.
    run = start(board, scenario_env("hang", HOME=str(tmp_path)), watch=False)
    running = run.orchestrator.state.running
    try:
        await run.until(lambda: "id-ABC-1" in running or "ABC-1" in running)
        (issue_id,) = running
        async with client(run) as http:
            stopped = await http.post("/api/v1/ABC-1/actions/stop", headers=bearer())
            await run.until(lambda: issue_id not in running)
            row = run.orchestrator.board.row
            # Polls pass: the held ticket is not started again, and says why.
            await run.until(lambda: (row("ABC-1").reason or "").startswith("stopped"), timeout=5)
            assert issue_id not in running
            detail = (await http.get("/api/v1/ABC-1")).json()
            again = await http.post("/api/v1/ABC-1/actions/stop", headers=bearer())
            retried = await http.post("/api/v1/ABC-1/actions/retry", headers=bearer())
            await run.until(lambda: issue_id in running)
    finally:
        await run.stop()
    assert stopped.status_code == 200 and stopped.json()["action"] == "stop"
    assert board.state_of("ABC-1") == "Todo"  # it stays where it is
    assert detail["reason"] == "stopped by a person: waits until it changes or is retried"
    # A second stop is acknowledged too (a person's stop is never refused as busy).
    assert again.status_code == 200 and again.json()["action"] == "stop"
    assert retried.status_code == 200
    assert any("ada stopped ABC-1; nothing starts it" in line for line in activity(run))


async def test_the_review_queue_lists_plans_before_diffs_and_a_ticket_reads_whole(
    reviewing: tuple[Board, Running],
) -> None:
    _, run = reviewing
    async with client(run) as http:
        queue = (await http.get("/api/v1/review")).json()
        detail = await http.get("/api/v1/ABC-2/review")
        missing = await http.get("/api/v1/NOPE-1/review")
        page = await http.get("/review")
    assert queue["actions"] is True
    assert [(r["issue_identifier"], r["checkpoint"]) for r in queue["queue"]] == [
        ("ABC-1", "plan"), ("ABC-2", "diff"),
    ]  # fmt: skip
    body = detail.json()
    assert body["issue_identifier"] == "ABC-2" and body["checkpoint"] == "diff"
    assert body["description"] == "Do the thing for ABC-2."
    assert body["diff"] is None and body["evidence"] is None  # no workspace yet
    assert missing.status_code == 404
    assert page.status_code == 200 and "<title>symphony: review</title>" in page.text


async def test_splitting_a_plan_makes_the_tickets_in_order_and_closes_the_plan(
    reviewing: tuple[Board, Running],
) -> None:
    board, run = reviewing
    tickets = [
        {"title": "Parse the input", "description": "First half of the plan."},
        {"title": "Print the report", "description": "Second half."},
    ]
    async with client(run) as http:
        empty = await http.post("/api/v1/ABC-1/actions/split", headers=bearer(), json={})
        diff = await http.post(
            "/api/v1/ABC-2/actions/split", headers=bearer(), json={"tickets": tickets}
        )
        split = await http.post(
            "/api/v1/ABC-1/actions/split", headers=bearer(), json={"tickets": tickets}
        )
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "tickets_required"
    assert diff.status_code == 409 and diff.json()["error"]["code"] == "not_a_plan"
    assert split.status_code == 200, split.text
    assert split.json()["target"] == "Cancelled"
    await run.until(lambda: board.state_of("ABC-1") == "Cancelled", timeout=10)
    made = sorted(p for p in board.tickets.glob("*.md") if p.stem not in ("ABC-1", "ABC-2"))
    assert len(made) == 2
    texts = {p.stem: p.read_text() for p in made}
    first = next(k for k, v in texts.items() if "Parse the input" in v)
    second = next(k for k, v in texts.items() if "Print the report" in v)
    assert board.state_of(first) == "Todo" and board.state_of(second) == "Todo"
    assert first in texts[second]  # the second waits for the first
    closing = (board.tickets / "ABC-1.md").read_text()
    assert f"Split into {first}, {second}." in closing and "ada split it at Plan Review" in closing


async def test_a_split_sent_twice_at_once_makes_its_tickets_once(
    reviewing: tuple[Board, Running],
) -> None:
    import asyncio

    board, run = reviewing
    tickets = [{"title": "Parse the input"}, {"title": "Print the report"}]
    async with client(run) as http:
        first, second = await asyncio.gather(*(
            http.post("/api/v1/ABC-1/actions/split", headers=bearer(), json={"tickets": tickets})
            for _ in range(2)
        ))  # fmt: skip
    codes = sorted([first.status_code, second.status_code])
    assert codes == [200, 409], (first.text, second.text)
    refused = first if first.status_code == 409 else second
    assert refused.json()["error"]["code"] == "busy"
    await run.until(lambda: board.state_of("ABC-1") == "Cancelled", timeout=10)
    made = [p for p in board.tickets.glob("*.md") if p.stem not in ("ABC-1", "ABC-2")]
    assert len(made) == 2

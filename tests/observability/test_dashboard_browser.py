"""The dashboard in a real headless Chromium, against the daemon running the quickstart board.

What a person watching the page would see: the tickets being worked appear by themselves, a
ticket moved to Done leaves the running table (and its blocked successor takes the slot), a
broken WORKFLOW.md raises the banner and fixing it clears it, and a ticket's detail panel opens.
The browser is Debian's `chromium` (`SYMPHONY_CHROMIUM` overrides the path); without it the test
is skipped, unless `SYMPHONY_REQUIRE_BROWSER=1` (set by CI) makes that a failure. A screenshot of
each step is saved under `test-artifacts/` (`SYMPHONY_TEST_ARTIFACTS` overrides).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from symphony.base.limits import LimitKind
from symphony.config.load import load_settings
from symphony.core.state import AgentPause, SchedulerState
from symphony.store import Store
from tests.harness import Daemon, Folder
from tests.quickstart import prepare_quickstart

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def _chromium() -> str:
    path = os.environ.get("SYMPHONY_CHROMIUM") or shutil.which("chromium")
    if path is None:
        reason = "no chromium on PATH (apt-get install chromium, or set SYMPHONY_CHROMIUM)"
        if os.environ.get("SYMPHONY_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def _artifacts() -> Path:
    folder = Path(os.environ.get("SYMPHONY_TEST_ARTIFACTS", REPO / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def _daemon(
    root: Path,
    delay_ms: str,
    without: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    **settings: str,
) -> Iterator[str]:
    """The CLI daemon on the quickstart board with `--port 0`, the tickets `without` taken off
    the board, and the quickstart's `settings` (`key: value` lines of its WORKFLOW.md) changed;
    yields its URL."""
    workflow = prepare_quickstart(root)
    for identifier in without:
        (root / ".symphony" / "board" / f"{identifier}.md").unlink()
    text = workflow.read_text()
    for key, value in settings.items():
        text, found = re.subn(rf"(?m)^(\s*{key}:) \S+", rf"\g<1> {value}", text)
        assert found == 1, key
    workflow.write_text(text)
    daemon = Daemon(
        Folder(root, workflow), {"DEMO_AGENT_DELAY_MS": delay_ms, **(env or {})}, "--port", "0"
    )
    try:
        yield daemon.url()
    finally:
        daemon.stop()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The quickstart daemon whose demo agent holds each turn open, so tickets stay running
    while the page is read; yields (url, workdir)."""
    with _daemon(tmp_path, "600000") as url:
        yield url, tmp_path


@contextlib.contextmanager
def _page(name: str, height: int) -> Iterator[Any]:
    """A page of a headless Chromium with the tests' timeouts; on failure a screenshot
    `<name>-failure.png` is saved, and at the end the page must have raised no script error."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": height})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        try:
            yield page
            assert errors == []
        except Exception:
            page.screenshot(path=_artifacts() / f"{name}-failure.png", full_page=True)
            raise
        finally:
            browser.close()


def _set_state(ticket: Path, state: str) -> None:
    text = ticket.read_text()
    ticket.write_text(re.sub(r"(?m)^state: .*$", f"state: {state}", text, count=1))


def test_dashboard_shows_the_fleet_and_updates_by_itself(daemon: tuple[str, Path]) -> None:
    from playwright.sync_api import expect

    url, workdir = daemon
    board = workdir / ".symphony" / "board"
    artifacts = _artifacts()
    with _page("dashboard", 900) as page:
        page.goto(url)
        running = page.locator("#running tbody tr")

        # Three slots: the two Todo tickets (planning) and the Ready one (implementing);
        # DEMO-3 waits for DEMO-2.
        expect(running).to_have_count(3)
        shown = sorted(running.evaluate_all("rows => rows.map(r => r.dataset.issue)"))
        api = httpx.get(f"{url}api/v1/state").json()
        assert shown == sorted(row["issue_identifier"] for row in api["running"])
        assert shown == ["DEMO-1", "DEMO-2", "DEMO-4"]
        expect(page.locator("#connection")).to_have_text("live")
        expect(page.locator('[data-card="running"] .value')).to_have_text("3")
        title = page.locator('#running tr[data-issue="DEMO-1"] td').nth(1)
        expect(title).to_have_text("Add a usage example to the README")
        # Which agent and model each session runs: plans on the ACP demo agent, the
        # implementation on the codex-protocol one.
        expect(page.locator('#running tr[data-issue="DEMO-1"] td.agent')).to_contain_text("acp")
        expect(page.locator('#running tr[data-issue="DEMO-1"] td.agent')).to_contain_text("demo")
        expect(page.locator('#running tr[data-issue="DEMO-4"] td.agent')).to_contain_text("codex")
        # The board view: the waiting ticket, its stage and why it waits.
        waiting = page.locator('#board tr[data-issue="DEMO-3"]')
        expect(waiting).to_contain_text("plan")
        expect(waiting).to_contain_text("blocked by DEMO-2 (Todo)")
        expect(page.locator('#board tr[data-issue="DEMO-4"]')).to_contain_text("implement")
        page.screenshot(path=artifacts / "dashboard-running.png", full_page=True)
        # A tracker URL only becomes a link when it is a web or file address.
        linkable = page.evaluate(
            "[linkable('https://t/1'), linkable('file:///b/1.md'),"
            " linkable('javascript:alert(1)'), linkable(' javascript:x'), linkable(null)]"
        )
        assert linkable == [True, True, False, False, False]

        # The detail panel shows the session and where its workspace is.
        page.locator('#running tr[data-issue="DEMO-1"]').click()
        detail = page.locator("#detail")
        expect(detail).to_be_visible()
        expect(detail.locator("h2")).to_have_text("DEMO-1")
        expect(detail).to_contain_text(str(workdir / ".symphony" / "workspaces" / "DEMO-1"))
        expect(detail).to_contain_text("turn_started")
        page.screenshot(path=artifacts / "dashboard-detail.png", full_page=True)
        page.keyboard.press("Escape")
        expect(detail).to_be_hidden()

        # A ticket moved to Done leaves the table without a reload; its successor starts.
        _set_state(board / "DEMO-2.md", "Done")
        httpx.post(f"{url}api/v1/refresh")
        expect(page.locator('#running tr[data-issue="DEMO-2"]')).to_have_count(0)
        expect(page.locator('#running tr[data-issue="DEMO-3"]')).to_have_count(1)
        stopped = page.locator("#activity li", has_text="DEMO-2").filter(has_text="stopping")
        expect(stopped.first).to_contain_text("terminal")

        # A broken WORKFLOW.md raises the banner with its error; a fix clears it.
        workflow = workdir / "WORKFLOW.md"
        good = workflow.read_text()
        workflow.write_text(good.replace("interval_ms: 5000", "interval_ms: soon"))
        banner = page.locator("#banner-workflow")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("polling.interval_ms must be an integer")
        page.screenshot(path=artifacts / "dashboard-broken-workflow.png", full_page=True)
        workflow.write_text(good)
        expect(banner).to_have_count(0)


def test_dashboard_shows_outcomes_evidence_and_a_full_review_queue(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    artifacts = _artifacts()
    # A fast agent: the plans reach Plan Review and DEMO-4, after a fix turn, Human Review.
    # DEMO-6 is taken off: whether it starts before the queue fills would be a race.
    with (
        _daemon(tmp_path, "0", without=("DEMO-6",), max_in_review="2") as url,
        _page("dashboard-outcomes", 1000) as page,
    ):
        page.goto(url)
        banner = page.locator("#banner-review")
        expect(banner).to_contain_text("Reviewers are behind: 3 tickets wait for review")
        expect(page.locator('[data-card="review"] .value')).to_have_text("3 / 2")
        # Outcomes: three hand-offs (two plans, one implementation) and the gates' record.
        expect(page.locator('[data-card="handoffs"] .value')).to_have_text("3")
        expect(page.locator('[data-card="handoffs"] svg.spark')).to_have_count(1)
        expect(page.locator('#gates tr[data-gate="committed"]')).to_contain_text("50%")
        expect(page.locator('#gates tr[data-gate="tests"]')).to_contain_text("100%")
        # The hand-off's evidence in the ticket's panel: what the daemon ran.
        # The title: its status cell holds the pull request's link, which opens the file.
        row = page.locator('#board tr[data-issue="DEMO-4"]')
        expect(row.locator("a.pull")).to_contain_text("#1 open")
        row.locator("td.title").click()
        evidence = page.locator("#evidence")
        expect(evidence).to_contain_text("Evidence (hand-off 1 to Human Review)")
        expect(evidence).to_contain_text("passed after 1 fix turn(s)")
        expect(evidence).to_contain_text("by codex (demo)")
        expect(evidence).to_contain_text("NOTES/DEMO-4.md")
        # Spend: the quickstart prices the demonstration agent's pretend model.
        expect(page.locator('[data-card="spend"] .value')).to_have_text(
            re.compile(r"^\$\d+\.(\d\d|\d{4})$")
        )
        expect(page.locator('[data-card="spend"] svg.spark')).to_have_count(1)
        expect(page.locator("#tickets tbody tr").first).to_contain_text("$")
        expect(page.locator("#detail")).to_contain_text("Cost")
        # How to open the worktree, and its branch.
        expect(page.locator("#open-command")).to_contain_text("workspaces/DEMO-4")
        expect(page.locator("#detail")).to_contain_text("symphony/DEMO-4")
        page.screenshot(path=artifacts / "dashboard-outcomes.png", full_page=True)
        _read_in_order_and_polished(page, url)


def _read_in_order_and_polished(page: Any, url: str) -> None:
    """The board first, then what runs and what waits to run, then money and outcomes; plots
    inside their cards at fourteen days and at one; no `null` or Markdown source in the panel;
    links that open; one time format."""
    from playwright.sync_api import expect

    order = ["#board-section", "#running-section", "#retrying-section", "#totals",
             "#tickets-section", "#outcomes-section", "#activity-section"]  # fmt: skip
    tops = [page.locator(selector).bounding_box()["y"] for selector in order]
    assert tops == sorted(tops), dict(zip(order, tops, strict=True))
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 1000})
        overflowing = page.evaluate(
            """() => [...document.querySelectorAll('.card svg.spark')].filter((svg) => {
                 const card = svg.closest('.card').getBoundingClientRect();
                 const plot = svg.getBoundingClientRect();
                 return plot.right > card.right + 0.5 || plot.left < card.left - 0.5;
               }).map((svg) => svg.closest('.card').dataset.card)"""
        )
        assert overflowing == [], (width, overflowing)
    page.set_viewport_size({"width": 1400, "height": 1000})
    days = page.locator('[data-card="spend"] svg.spark').get_attribute("data-days")
    assert days == "14"
    # One day reads as one bar across the plot, not a dot at its edge.
    one = page.evaluate(
        """() => { const plot = sparkline([0.02], ['2026-12-06'], money);
                   document.querySelector('[data-card="spend"]').appendChild(plot);
                   const svg = plot.querySelector('svg'), bar = svg.querySelector('rect');
                   const s = svg.getBoundingClientRect(), b = bar.getBoundingClientRect();
                   const result = { bars: svg.querySelectorAll('rect').length,
                                    middle: (b.left + b.right) / 2 - s.left, width: s.width,
                                    tip: bar.textContent, axis: plot.innerText };
                   plot.remove(); return result; }"""
    )
    assert one["bars"] == 1 and abs(one["middle"] - one["width"] / 2) < 2, one
    assert one["tip"] == "2026-12-06 $0.02" and "12-06" in one["axis"], one
    # The panel writes no `null` and no Markdown source; its links are the daemon's pages.
    detail = page.locator("#detail")
    expect(detail).to_contain_text("Pull request")
    text = detail.inner_text()
    assert "null" not in text and "undefined" not in text and "**" not in text, text
    rendered = page.evaluate(
        "() => { const n = markdown("
        "'Use `calc.add` **now**\\n- one\\n- <img src=x onerror=alert(1)>');"
        " return [n.querySelector('code').textContent, n.querySelector('strong').textContent,"
        " n.querySelectorAll('li').length, n.querySelectorAll('img').length, n.innerText]; }"
    )
    assert rendered[:4] == ["calc.add", "now", 2, 0] and "<img" in rendered[4], rendered
    pull = detail.locator("#pull-request a")
    assert pull.get_attribute("href") == "local/pull/DEMO-4"
    shown = httpx.get(f"{url}local/pull/DEMO-4", timeout=10)
    assert shown.status_code == 200 and "symphony/DEMO-4" in shown.text
    assert "review" in shown.text
    ticket = detail.locator("#tracker-link")
    assert ticket.get_attribute("href") == "local/ticket/DEMO-4"
    assert httpx.get(f"{url}local/ticket/DEMO-4", timeout=10).status_code == 200
    assert httpx.get(f"{url}local/pull/NOPE-1", timeout=10).status_code == 404
    # One time format: 24-hour, seconds shown.
    expect(page.locator("#updated")).to_have_text(re.compile(r"^updated \d\d:\d\d:\d\d$"))


def test_dashboard_shows_each_agent_its_provider_limited_across_a_restart(tmp_path: Path) -> None:
    """A daemon stopped while its agents were limited: its successor keeps the pauses (read
    from the store), starts nothing on them, and the page says until when."""
    from playwright.sync_api import expect

    workflow = prepare_quickstart(tmp_path)
    settings = load_settings(workflow, dict(os.environ))
    assert settings.state is not None
    now = datetime.now(UTC)
    state = SchedulerState()
    for kind in ("codex", "acp"):
        state.agent_pauses[kind] = AgentPause(
            kind, LimitKind.USAGE, "usage limit reached", now, now + timedelta(hours=1), True
        )
    store, _ = Store.open(settings.state.path)
    said = {"at": now.isoformat(), "event": "paused", "message": "dispatch paused by ada",
            "issue_identifier": None, "level": "info"}  # fmt: skip
    try:
        store.save(state, 0.0, now, activity=[said])
    finally:
        store.close()
    daemon = Daemon(Folder(tmp_path, workflow), {"DEMO_AGENT_DELAY_MS": "0"}, "--port", "0")
    try:
        url = daemon.url()
        with _page("dashboard-limited", 900) as page:
            page.goto(url)
            expect(page.locator("#banner-limit-codex")).to_contain_text(
                "codex is limited by its provider until"
            )
            expect(page.locator("#banner-limit-acp")).to_contain_text(
                "(usage limit: usage limit reached): no ticket starts on it until then"
            )
            # The recent events the last daemon saw are still there.
            expect(page.locator("#activity li", has_text="dispatch paused by ada")).to_have_count(1)
            page.screenshot(path=_artifacts() / "dashboard-limited.png", full_page=True)
        snapshot = httpx.get(f"{url}api/v1/state", timeout=10).json()
        assert {limit["agent"] for limit in snapshot["limits"]} == {"codex", "acp"}
        assert snapshot["running"] == []  # nothing started on a limited agent
    finally:
        daemon.stop()

"""The review page in a real headless Chromium on the quickstart: log in once, then approve a
plan and send another back with words, keyboard only, and find both on the board's files.
Screenshots at desktop and laptop widths are kept under `test-artifacts/`."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import wait_until
from tests.observability.test_dashboard_browser import _artifacts, _daemon, _page

pytestmark = pytest.mark.slow

TOKEN = "review-token-for-the-browser"


def log_in(page: Any, url: str) -> None:
    """Log in on the page as Ada with the actions' token; it lands on the review page."""
    page.goto(f"{url}login?next=/review")
    page.fill("input[name=name]", "Ada")
    page.fill("input[name=token]", TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_url("**/review")


def _state(ticket: Path) -> str:
    match = re.search(r"(?m)^state: (.*)$", ticket.read_text())
    return match.group(1).strip() if match else ""


def test_a_person_reviews_plans_with_the_keyboard_alone(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    board = tmp_path / ".symphony" / "board"
    artifacts = _artifacts()
    with _daemon(tmp_path, "0", env={"SYMPHONY_TOKEN": TOKEN}) as url:

        def plans() -> list[str]:
            queue = httpx.get(f"{url}api/v1/review").json()["queue"]
            return [r["issue_identifier"] for r in queue if r["checkpoint"] == "plan"]

        assert wait_until(lambda: len(plans()) >= 2, 60), plans()
        with _page("review", 900) as page:
            # A waiting ticket's detail on the dashboard links to its review.
            page.goto(url)
            page.locator('#board tr[data-issue="DEMO-2"]').click()
            expect(page.locator("#review-this")).to_have_attribute("href", "review#DEMO-2")
            page.goto(f"{url}review#DEMO-2")
            expect(page.locator(".item.selected")).to_have_attribute("data-issue", "DEMO-2")
            # Not logged in: reading works, acting says to log in.
            page.goto(f"{url}review")
            expect(page.locator("#approve")).to_be_visible()  # the first ticket is open
            page.keyboard.press("a")
            expect(page.locator("#result")).to_contain_text("Log in to act")

            log_in(page, url)
            first = page.locator(".item.selected")
            expect(page.locator("#approve")).to_be_visible()
            chosen = first.get_attribute("data-issue")
            assert chosen in plans()
            expect(page.locator("#plan")).to_be_visible()
            page.screenshot(path=artifacts / "review-desktop.png", full_page=True)
            page.set_viewport_size({"width": 1280, "height": 800})
            page.screenshot(path=artifacts / "review-laptop.png", full_page=True)

            page.keyboard.press("a")
            expect(page.locator("#result")).to_contain_text(f"approve: moving {chosen} to Ready")
            assert chosen is not None
            assert wait_until(lambda: _state(board / f"{chosen}.md") == "Ready", 30)
            assert "Ada approved at Plan Review" in (board / f"{chosen}.md").read_text()

            # Another plan, reached with j and k (the approved one may be back already as a
            # diff to review: the demonstration agent is quick), split into two tickets.
            assert wait_until(lambda: chosen not in plans(), 30)
            other = plans()[0]
            select(page, other)
            page.locator("#split").click()
            page.keyboard.type("Guard divide by zero -- raise a clear error")
            page.keyboard.press("Enter")
            page.keyboard.type("Document the error")
            page.keyboard.press("Control+Enter")
            expect(page.locator("#result")).to_contain_text(f"split: moving {other} to Cancelled")
            assert wait_until(lambda: _state(board / f"{other}.md") == "Cancelled", 30)
            made = [p for p in board.glob("*.md") if "Guard divide by zero" in p.read_text()]
            assert len(made) == 1
            page.screenshot(path=artifacts / "review-after-split.png", full_page=True)

            # A diff sent back with words, keyboard only.
            assert wait_until(lambda: python_diff(url) is not None, 60)
            diff = python_diff(url)
            assert diff is not None
            select(page, diff)
            # The evidence says whether it merges, the pull request's checks show beside it.
            expect(page.locator("#merge-check")).to_contain_text("Merges cleanly onto")
            expect(page.locator("#pull-checks")).to_contain_text("checks: ")
            expect(page.locator("#evidence details.tail").first).to_be_attached()
            # The diff is highlighted, and `s` lays it out side by side (and back).
            python = page.locator('#diff section[data-path$=".py"]').first
            expect(python.locator(".tok-kw").first).to_be_visible()
            page.keyboard.press("s")
            expect(page.locator("#diff")).to_have_attribute("data-layout", "side-by-side")
            side = page.locator("#diff table.side").first
            expect(side).to_be_visible()
            added = side.locator("td.code.l-add").first
            expect(added).to_be_visible()
            assert side.locator("td.num").count() >= 2
            page.screenshot(path=artifacts / "review-side-by-side.png", full_page=True)
            page.keyboard.press("s")
            expect(page.locator("#diff table.unified").first).to_be_visible()
            page.keyboard.press("r")
            expect(page.locator("#feedback")).to_be_focused()
            page.keyboard.type("Name the test after what it checks, please.")
            page.keyboard.press("Control+Enter")
            expect(page.locator("#result")).to_contain_text(f"request_changes: moving {diff}")
            assert wait_until(lambda: _state(board / f"{diff}.md") == "Rework", 30)
            assert "Name the test after what it checks" in (board / f"{diff}.md").read_text()


def python_diff(url: str) -> str | None:
    """A diff waiting for review that changes a Python file (DEMO-4's adds a function)."""
    for row in queue_of(url):
        if row["checkpoint"] != "diff":
            continue
        review = httpx.get(f"{url}api/v1/{row['issue_identifier']}/review").json()
        files = (review.get("diff") or {}).get("files") or []
        if any(f["path"].endswith(".py") and f.get("patch") for f in files):
            return row["issue_identifier"]
    return None


def queue_of(url: str) -> list[dict[str, str]]:
    return list(httpx.get(f"{url}api/v1/review").json()["queue"])


def select(page: Any, identifier: str) -> None:
    """Move the selection to `identifier` with j and k, and wait until its review shows."""
    from playwright.sync_api import expect

    page.reload()
    items = page.locator(".item")
    expect(items.first).to_be_visible()
    order = items.evaluate_all("rows => rows.map(r => r.dataset.issue)")
    now = order.index(page.locator(".item.selected").get_attribute("data-issue"))
    for _ in range(abs(order.index(identifier) - now)):
        page.keyboard.press("j" if order.index(identifier) > now else "k")
    expect(page.locator("#detail h2")).to_contain_text(identifier)


BROWSER_NOTICES = """
window.__shown = [];
window.Notification = class {
  constructor(title, options) { window.__shown.push({ title, ...options }); }
  static get permission() { return "granted"; }
  static requestPermission() { return Promise.resolve("granted"); }
};
"""
"""Headless Chromium shows no notification: the page's calls are recorded instead, as if the
person had granted the permission."""


def test_the_open_dashboard_notifies_the_browser_when_a_diff_waits(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with _daemon(tmp_path, "0", env={"SYMPHONY_TOKEN": TOKEN}) as url:

        def plans() -> list[str]:
            return [r["issue_identifier"] for r in queue_of(url) if r["checkpoint"] == "plan"]

        assert wait_until(lambda: len(plans()) >= 1, 60), plans()
        with _page("browser-notices", 900) as page:
            page.add_init_script(BROWSER_NOTICES)
            # What waits as the page opens (the demonstration agents go on meanwhile, so a
            # new hand-off may still be notified while the test looks).
            waiting = {
                (r["issue_identifier"], "its plan waits" if r["checkpoint"] == "plan"
                 else "its changes wait")
                for r in queue_of(url)
            }  # fmt: skip
            page.goto(url)
            expect(page.locator("#connection")).to_have_text("live")
            chosen = plans()[0]
            approved = httpx.post(
                f"{url}api/v1/{chosen}/actions/approve",
                headers={"Authorization": f"Bearer {TOKEN}", "X-Symphony-Actor": "ada"},
            )
            assert approved.status_code == 200, approved.text
            page.wait_for_function(
                "(id) => window.__shown.some(n => n.title === "
                "`${id}: its changes wait for your review in Human Review`)",
                arg=chosen,
            )
            shown = page.evaluate("window.__shown")
    # What was there when the page opened is not repeated; each notice shows once.
    repeated = [
        n["title"] for n in shown for ticket, what in waiting
        if n["title"].startswith(f"{ticket}: {what}")
    ]  # fmt: skip
    assert repeated == []
    tags = [n["tag"] for n in shown]
    assert len(tags) == len(set(tags))


def test_a_person_stops_and_cancels_running_tickets_and_neither_starts_again(
    tmp_path: Path,
) -> None:
    """The agents hold every turn open: DEMO-1 and DEMO-2 are mid-turn when a person stops
    one and cancels the other from the review page; both are acknowledged at once, and a
    long watch of polls sees neither dispatched again."""
    from playwright.sync_api import expect

    board = tmp_path / ".symphony" / "board"
    env = {"SYMPHONY_TOKEN": TOKEN}
    with _daemon(tmp_path, "600000", env=env, interval_ms="250") as url:

        def running() -> list[str]:
            rows = httpx.get(f"{url}api/v1/review").json()["running"]
            return [r["issue_identifier"] for r in rows]

        assert wait_until(lambda: {"DEMO-1", "DEMO-2"} <= set(running()), 60), running()
        with _page("review-stop", 900) as page:
            log_in(page, url)
            first = page.locator('#running .item[data-issue="DEMO-1"]')
            expect(first).to_contain_text("first run")
            first.locator("button.stop").click()
            expect(page.locator("#running-result")).to_contain_text("stopped DEMO-1")
            second = page.locator('#running .item[data-issue="DEMO-2"]')
            second.locator("button.cancel").click()
            expect(page.locator("#running-result")).to_contain_text(
                "cancel: moving DEMO-2 to Cancelled"
            )
            page.screenshot(path=_artifacts() / "review-running.png", full_page=True)
        assert wait_until(lambda: _state(board / "DEMO-2.md") == "Cancelled", 30)
        assert "Ada cancelled it" in (board / "DEMO-2.md").read_text()
        # Watched over many polls (250 ms each): neither is started again.
        seen: set[str] = set()
        deadline = time.monotonic() + 15  # 60 polls
        while time.monotonic() < deadline:
            seen.update(running())
            time.sleep(0.1)
        assert not seen & {"DEMO-1", "DEMO-2"}, seen
        assert _state(board / "DEMO-1.md") == "Todo"  # a stop leaves it where it is
        detail = httpx.get(f"{url}api/v1/DEMO-1").json()
        assert detail["reason"] == "stopped by a person: waits until it changes or is retried"

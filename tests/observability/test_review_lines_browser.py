"""Line comments on the review page in a real headless Chromium, against the daemon with a
GitHub or a GitLab fake behind the real code host adapter: three comments on two files (one a
range), written and sent with the keyboard alone, reach the host as one review with three
comments at their lines (GitHub) or as three diff discussions (GitLab), and the rework run's
prompt with the code round each. A ticket description and a diff line holding script and
`<img onerror>` payloads show as text and run nothing. Screenshots at 1400 and 390 px wide go
to the folder the test prints (`SYMPHONY_TEST_ARTIFACTS`, else `test-artifacts/`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from symphony.codehost.contract import CodeHost
from symphony.config.repository import RepositorySettings
from symphony.observability.server import create_app, serve
from tests.adapters.github.fake_pulls import FakePulls
from tests.adapters.github.test_pulls import host as github_host
from tests.adapters.gitlab.fake_merge_requests import FakeMergeRequests
from tests.adapters.gitlab.test_merge_requests import host as gitlab_host
from tests.daemon.test_follow import start
from tests.factories import make_issue
from tests.fakes.agent import Call, ScriptedAgent
from tests.fakes.clock import FakeClock
from tests.fakes.tracker import MemoryTracker
from tests.harness import Running
from tests.observability.test_dashboard_browser import (
    CHROMIUM_FLAGS,
    TIMEOUT_MS,
    _artifacts,
    _chromium,
)

pytestmark = pytest.mark.slow

TOKEN = "line-comments-token"
PAYLOAD = '<script>window.__xss = 1</script> <img src=x onerror="window.__xss = 2">'
CREATE = (
    "git init -q -b main && git config user.email t@example.test && "
    "git config user.name tester && git commit -q --allow-empty -m start && "
    "git checkout -q -b symphony-work"
)
FILES = {  # the first run's change: two files, one line of app.py holding a payload
    "notes.txt": "one\ntwo\nthree\nfour\n",
    "app.py": "def parse(text):\n    return text.split()\n"
    "html = '<img src=x onerror=\"window.__xss = 3\">'\n# a long line: " + "word " * 80 + "\n",
}


def work(template: Path) -> str:
    """The before_run hook: the first run's change, copied in and committed once."""
    template.mkdir()
    for name, text in FILES.items():
        (template / name).write_text(text)
    return f"[ -f notes.txt ] || {{ cp {template}/* . && git add -A && git commit -q -m work; }}"


DONE = Call("report_outcome", {"outcome": "done", "summary": "Did the work."})
FIXED = Call("report_outcome", {"outcome": "done", "summary": "Answered every comment."})


@dataclass
class Hosted:
    """The daemon's code host factory: the real adapter over the fake's transport."""

    make: Callable[[], CodeHost]
    remote: Path | None = None

    def __call__(self, repository: RepositorySettings) -> CodeHost:
        return self.make()


@contextlib.asynccontextmanager
async def reviewing(
    tmp_path: Path, hosted: Hosted
) -> AsyncIterator[tuple[Running, ScriptedAgent, str]]:
    tracker = MemoryTracker(make_issue("A-1", state="Ready", description=f"Fix it. {PAYLOAD}"))
    agent = ScriptedAgent(per_ticket={"A-1": [DONE]})
    run = start(
        tmp_path, tracker, agent, hosted, FakeClock(),  # type: ignore[arg-type]
        hooks={"after_create": CREATE, "before_run": work(tmp_path / "template")},
        workspace={"root": "workspaces", "base_ref": "main"},
        prompt="Work on {{ issue.identifier }}\n{{ review }}",
    )  # fmt: skip
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Human Review", timeout=30)
        agent.per_ticket["A-1"] = [FIXED]
        server = await serve(create_app(run.orchestrator.view, auth_token=TOKEN), "127.0.0.1", 0)
        try:
            yield run, agent, server.url.rstrip("/") + "/"
        finally:
            await server.stop()
    finally:
        await run.stop()


async def review_with_the_keyboard(url: str, name: str) -> None:
    from playwright.async_api import async_playwright, expect

    artifacts = _artifacts()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        try:
            await page.goto(f"{url}login?next=/review")
            await page.fill("input[name=name]", "Ada")
            await page.fill("input[name=token]", TOKEN)
            await page.keyboard.press("Enter")
            await page.wait_for_url("**/review")
            await expect(page.locator("#signed-in")).to_have_text("Signed in as Ada")
            await expect(page.locator("#sign-out")).to_be_visible()
            await expect(page.locator("#detail h2")).to_contain_text("A-1")
            await expect(page.locator('#tree li[data-path="app.py"]')).to_contain_text("+4")
            # The payloads are text: in the ticket and in the diff, and nothing ran.
            await expect(page.locator("#description")).to_contain_text("<script>window.__xss = 1")
            await expect(page.locator('section[data-path="app.py"]')).to_contain_text(
                '<img src=x onerror="window.__xss = 3">'
            )
            assert await page.evaluate("window.__xss") is None
            assert await page.locator("#detail img, #detail script").count() == 0
            # No git header; both numbers on each line; the long line wraps in the page.
            diff_text = await page.locator("#diff").inner_text()
            assert "diff --git" not in diff_text and "index " not in diff_text
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= 1400, width
            head = await page.locator("#head-sha").inner_text()
            assert len(head) == 7 and head == head.lower(), head

            # app.py: line 1, then lines 2 to 3; notes.txt: line 2; then the note.
            await page.keyboard.press("n")
            await page.keyboard.press("c")
            await page.keyboard.type("Name it after what it returns.")
            await page.keyboard.press("Control+Enter")
            for key in ("J", "v", "J", "c"):
                await page.keyboard.press(key)
            await expect(page.locator("#where")).to_have_text("app.py, lines 2\u20133")
            await page.keyboard.type("These two lines belong together.")
            await page.keyboard.press("Control+Enter")
            for key in ("n", "J", "c"):
                await page.keyboard.press(key)
            await page.keyboard.type("Call it second.")
            await page.keyboard.press("Control+Enter")
            await expect(page.locator("tr.draft")).to_have_count(3)
            # The run history writes its times as every page does, not as the store keeps them.
            runs = await page.locator("#history ul.history").first.inner_text()
            assert "first run" in runs and "+00:00" not in runs and "T" not in runs, runs
            await page.screenshot(path=artifacts / f"{name}-1400.png", full_page=True)
            await page.set_viewport_size({"width": 390, "height": 844})
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, width
            await page.screenshot(path=artifacts / f"{name}-390.png", full_page=True)
            await page.set_viewport_size({"width": 1400, "height": 1000})
            await page.keyboard.press("r")
            await page.keyboard.type("Three small things.")
            await page.keyboard.press("Control+Enter")
            await expect(page.locator("#result")).to_contain_text("request_changes: moving A-1")
            assert errors == []
        finally:
            await browser.close()
    print(f"review page screenshots: {artifacts}")


async def next_prompt(run: Running, agent: ScriptedAgent) -> str:
    await run.until(lambda: len(agent.of("A-1")) == 2 and bool(agent.of("A-1")[1].prompts), 30)
    prompt = agent.of("A-1")[1].prompts[0]
    assert "Three small things." in prompt
    assert "Comment 1: app.py, line 1" in prompt and "> 1 +| def parse(text):" in prompt
    assert "Comment 2: app.py, lines 2 to 3" in prompt
    assert "Comment 3: notes.txt, line 2" in prompt and "> 2 +| two" in prompt
    return prompt


async def test_three_line_comments_reach_github_as_one_review_and_the_next_prompt(
    tmp_path: Path,
) -> None:
    fake = FakePulls()
    async with reviewing(tmp_path, Hosted(lambda: github_host(fake))) as (run, agent, url):
        await review_with_the_keyboard(url, "review-lines-github")
        await next_prompt(run, agent)
        await run.until(lambda: sum(len(t.comments) for t in fake.threads) == 6, timeout=30)
    posted = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/reviews")]
    assert len(posted) == 1
    assert [(c["path"], c["line"], c.get("start_line"), c["side"])
            for c in posted[0].body["comments"]] == [
        ("app.py", 1, None, "RIGHT"), ("app.py", 3, 2, "RIGHT"), ("notes.txt", 2, None, "RIGHT"),
    ]  # fmt: skip
    assert "Three small things." in posted[0].body["body"]
    assert all("Answered every comment." in t.comments[-1][2] for t in fake.threads)


async def test_three_line_comments_reach_gitlab_as_three_diff_discussions(
    tmp_path: Path,
) -> None:
    fake = FakeMergeRequests(token="glpat-daemon_merge_requests_0123")
    async with reviewing(tmp_path, Hosted(lambda: gitlab_host(fake))) as (run, agent, url):
        await review_with_the_keyboard(url, "review-lines-gitlab")
        await next_prompt(run, agent)
    (merge_request,) = fake.merge_requests.values()
    positions = [d.notes[0]["position"] for d in merge_request.discussions]
    assert [(p["new_path"], p["new_line"]) for p in positions] == [
        ("app.py", 1),
        ("app.py", 3),
        ("notes.txt", 2),
    ]
    assert fake.notes and "Three small things." in fake.notes[0][1]

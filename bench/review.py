"""Review page benchmark: how long a 2,000-line diff takes to read and to show.

1. The API's cost: `branch_diff` (what `GET /api/v1/<ticket>/review` reads of git) on a real
   repository whose branch changes 2,000 lines over 8 files, 20 times; median and slowest.
2. The page: the real `review.html` in headless Chromium (Debian's `chromium`, or
   `SYMPHONY_CHROMIUM`), served with that diff by a small app on 127.0.0.1 that answers the two
   endpoints the page reads, 5 times: from navigation to interactive (the page's
   `review-interactive` mark: the ticket and the first screenful of the diff written, its keys
   answered; the other files follow a task each), and to the last file's lines on screen;
   median and slowest. Skipped, and said so, without a browser.

Targets: under 300 ms from the API; under 200 ms from navigation to an interactive page (every
file's numbered lines on screen, the page's script done), the median in Chromium.
Run from the repository root: `python bench/review.py` (about 20 seconds).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from symphony.workspace.diff import branch_diff

FILES, LINES = 8, 125
ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
       "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(path), *args], check=True, env=ENV, capture_output=True)


def repository(root: Path) -> Path:
    path = root / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for n in range(FILES):
        (path / f"module_{n}.py").write_text("".join(f"old_{i} = {i}\n" for i in range(LINES)))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    git(path, "checkout", "-q", "-b", "symphony/B-1")
    for n in range(FILES):
        (path / f"module_{n}.py").write_text("".join(f"new_{i} = {i} * 2\n" for i in range(LINES)))
    git(path, "commit", "-q", "-am", "work")
    return path


def line(name: str, times: list[float]) -> None:
    print(f"  {name:<34} median {statistics.median(times):7.1f} ms   "
          f"slowest {max(times):7.1f} ms")  # fmt: skip


async def api_times(path: Path) -> tuple[list[float], dict[str, Any]]:
    times, body = [], {}
    for _ in range(20):
        began = time.perf_counter()
        diff = await branch_diff(path, "main", ENV)
        times.append((time.perf_counter() - began) * 1000)
        assert diff is not None
        body = diff.to_json()
    return times, body


def page_times(diff: dict[str, Any]) -> list[float] | str:
    chromium = os.environ.get("SYMPHONY_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        return "no chromium on PATH (apt-get install chromium)"
    from playwright.sync_api import sync_playwright

    page_bytes = resources.files("symphony.observability").joinpath("review.html").read_bytes()
    ticket = {"issue_identifier": "B-1", "issue_id": "b1", "title": "A big change",
              "state": "Human Review", "checkpoint": "diff", "stage": "implement", "url": None,
              "pull_request": None}  # fmt: skip
    detail = {**ticket, "description": "", "comments": [], "plan": None, "evidence": None,
              "diff": diff, "open_command": "code .", "workspace_path": "/w",
              "tracker_error": None}  # fmt: skip

    async def page(_: Any) -> Response:
        return Response(page_bytes, media_type="text/html")

    async def queue(_: Any) -> JSONResponse:
        return JSONResponse({"queue": [ticket], "actions": True, "paused": None})

    async def review(_: Any) -> JSONResponse:
        return JSONResponse(detail)

    app = Starlette(routes=[Route("/review", page), Route("/api/v1/review", queue),
                            Route("/api/v1/B-1/review", review)])  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    last = f"module_{FILES - 1}.py"
    times: list[float] = []
    complete: list[float] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
            )
            for _ in range(5):
                tab = browser.new_page(viewport={"width": 1400, "height": 900})
                began = time.perf_counter()
                tab.goto(f"http://127.0.0.1:{port}/review")
                tab.locator(f'section[data-path="{last}"] table.diff tr').last.wait_for()
                complete.append((time.perf_counter() - began) * 1000)
                # The page's own clock: navigation to the first diff on screen with its keys.
                times.append(
                    tab.evaluate("performance.getEntriesByName('review-interactive')[0].startTime")
                )
                tab.close()
            browser.close()
    finally:
        server.should_exit = True
        thread.join(5)
    line("page in Chromium, all lines", complete)
    return times


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sy-bench-review-") as scratch:
        path = repository(Path(scratch))
        times, diff = asyncio.run(api_times(path))
        changed = diff["added"] + diff["removed"]
        print(f"review of a diff of {changed:,} changed lines in {len(diff['files'])} files")
        line("API (branch_diff)", times)
        rendered = page_times(diff)
        if isinstance(rendered, str):
            print(f"  page in Chromium: skipped, {rendered}")
        else:
            line("page in Chromium, interactive", rendered)
            median = statistics.median(rendered)
            verdict = "under" if median < 200 else "OVER"
            print(f"  2,000-line diff to an interactive page: {median:.0f} ms ({verdict} 200 ms)")


if __name__ == "__main__":
    main()

"""Webhook reaction benchmark: a signed GitHub delivery -> the agent started.

The real `Orchestrator` runs the github adapter against the local GitHub fake
(`tests/adapters/github/fake_github.py`, over HTTP on 127.0.0.1) with a poll ten minutes away,
and the real HTTP app in process. Each trial labels a new issue `status:todo` on the fake, posts
the delivery GitHub would send (`X-Hub-Signature-256` over its body), and stops the clock when
the daemon asks for the issue's agent session (the agent process starts right then); the issue
is then closed and announced the same way, and its run left to stop. The delivery's refresh
reads that one issue, not the repository. Target: under 300 ms median.

Run from the repository root: `python bench/webhook_reaction.py` (about 15 s).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.agents import AgentLaunch, AgentSession
from symphony.agents.registry import open_session
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.observability.logging import configure_logging
from symphony.observability.server import create_app
from symphony.tracker.webhooks import hmac_sha256_hex
from tests.adapters.daemon import write_workflow
from tests.adapters.github.fake_github import FakeGitHub, serve

SECRET = "whsec_bench_0001"
TOKEN = "ghp_bench_token_0001"
TRIALS = 20


def delivery(number: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"action": "labeled", "issue": {"number": number},
         "repository": {"full_name": "acme/widgets"}}
    ).encode()  # fmt: skip
    return body, {"X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(SECRET, body)}


async def measure() -> list[float]:
    github = FakeGitHub(token=TOKEN)
    with serve(github), tempfile.TemporaryDirectory() as folder:
        tracker = {
            "kind": "github",
            "provider": {
                "repository": "acme/widgets",
                "api_url": github.base,
                "webhook_secret": "$HOOK_SECRET",
            },
            "active_states": ["Todo"],
            "terminal_states": ["Done"],
        }
        env = {
            **os.environ,
            "FAKE_AGENT_SCENARIO": "hang",
            "GITHUB_TOKEN": TOKEN,
            "HOOK_SECRET": SECRET,
        }
        asked: dict[str, float] = {}

        def session(launch: AgentLaunch) -> AgentSession:
            asked.setdefault(launch.env["SYMPHONY_ISSUE_IDENTIFIER"], time.perf_counter())
            return open_session(launch)

        workflow = write_workflow(Path(folder), tracker, polling_ms=600_000)
        orchestrator = Orchestrator(
            load_settings(workflow, env), environ=env, watch=False, session_factory=session
        )
        task = asyncio.create_task(orchestrator.run())
        app = create_app(orchestrator.view)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        reactions = []
        try:
            while orchestrator.health.last_tick_at is None:
                await asyncio.sleep(0.05)
            async with client:
                for number in range(1, TRIALS + 1):
                    github.add(number, labels=["status:todo"])
                    body, headers = delivery(number)
                    sent = time.perf_counter()
                    answer = await client.post(
                        "/api/v1/webhooks/github", content=body, headers=headers
                    )
                    assert answer.status_code == 202, answer.text
                    identifier = f"acme/widgets#{number}"
                    while identifier not in asked:
                        await asyncio.sleep(0.002)
                    reactions.append(asked[identifier] - sent)
                    github.edit(number, labels=["status:done"])
                    await client.post("/api/v1/webhooks/github", content=body, headers=headers)
                    while str(number) in orchestrator.state.running:
                        await asyncio.sleep(0.01)
        finally:
            orchestrator.stop()
            await asyncio.wait_for(task, 60)
    return reactions


def main() -> None:
    configure_logging(level="info", stream=io.StringIO())
    reactions = sorted(asyncio.run(measure()))
    print(
        f"delivery -> agent: median {statistics.median(reactions) * 1000:.0f} ms, "
        f"p90 {reactions[int(len(reactions) * 0.9) - 1] * 1000:.0f} ms over {len(reactions)} "
        "deliveries (target: under 300 ms median)"
    )


if __name__ == "__main__":
    main()

"""A person's line comments from the review page, through the daemon: posted on the pull
request as one review, given to the rework run with the code round each, answered on each
thread with the run's summary after its push, and never taken by following for a new review.
Approving notes the person on the pull request."""

from __future__ import annotations

from pathlib import Path

from symphony.base.pulls import DiffSide, ReviewVerdict
from tests.daemon.test_follow import start
from tests.factories import make_issue
from tests.fakes.agent import Call, ScriptedAgent
from tests.fakes.clock import FakeClock
from tests.fakes.code_host import MemoryCodeHost
from tests.fakes.tracker import MemoryTracker

CREATE = (
    "git init -q -b main && git config user.email t@example.test && "
    "git config user.name tester && git commit -q --allow-empty -m start && "
    "git checkout -q -b symphony-work"
)
WRITE = (  # the first run's work: a file of four lines on the branch
    "[ -f notes.txt ] || { printf 'one\\ntwo\\nthree\\nfour\\n' > notes.txt && "
    "git add notes.txt && git commit -q -m notes; }"
)
DONE = Call("report_outcome", {"outcome": "done", "summary": "Wrote the notes."})
FIXED = Call("report_outcome", {"outcome": "done", "summary": "Renamed two to second."})
COMMENTS = [
    {"path": "notes.txt", "line": 2, "side": "right", "body": "Call it second."},
    {"path": "notes.txt", "line": 4, "start_line": 3, "body": "Drop these two."},
]


async def test_line_comments_reach_the_pull_request_the_rework_prompt_and_each_thread(
    tmp_path: Path,
) -> None:
    tracker = MemoryTracker(make_issue("A-1", state="Ready"))
    host, clock = MemoryCodeHost(), FakeClock()
    agent = ScriptedAgent(per_ticket={"A-1": [DONE]})
    hooks = {"after_create": CREATE, "before_run": WRITE}
    run = start(tmp_path, tracker, agent, host, clock, hooks=hooks,
                workspace={"root": "workspaces", "base_ref": "main"},
                prompt="Work on {{ issue.identifier }}\n{{ review }}")  # fmt: skip
    view = run.orchestrator.view
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Human Review")
        (pull,) = host.pulls.values()
        bad = await view.ticket_action("A-1", "approve", comment="", by="Ada",
                                       comments=COMMENTS)  # fmt: skip
        assert not isinstance(bad, dict) and bad.code == "comments_invalid"
        answer = await view.ticket_action(
            "A-1", "request_changes", comment="Two small things.", by="Ada", comments=COMMENTS
        )
        assert isinstance(answer, dict) and answer["target"] == "Rework", answer
        ((number, review),) = host.reviews
        assert number == pull.number and review.verdict is ReviewVerdict.REQUEST_CHANGES
        assert review.body == "Changes requested by Ada on the review page.\n\nTwo small things."
        assert [(c.path, c.line, c.start_line, c.side) for c in review.comments] == [
            ("notes.txt", 2, None, DiffSide.RIGHT), ("notes.txt", 4, 3, DiffSide.RIGHT),
        ]  # fmt: skip

        agent.per_ticket["A-1"] = [FIXED]
        await run.until(lambda: len(agent.of("A-1")) == 2, timeout=10)
        prompt = agent.of("A-1")[1].prompts[0]
        assert "Comment 1: notes.txt, line 2" in prompt
        assert "> 2 +| two" in prompt and "  1 +| one" in prompt  # the code round it
        assert "Comment 2: notes.txt, lines 3 to 4" in prompt and "Drop these two." in prompt
        await run.until(lambda: tracker.by_identifier("A-1").state == "Human Review")
        await run.until(lambda: len(host.replies) == 2, timeout=10)
        assert [r[1] for r in host.replies] == ["t1", "t2"]
        assert all("Renamed two to second." in r[2] for r in host.replies)
        ticket = "\n".join(c.body for c in tracker.comments[tracker.by_identifier("A-1").id])
        assert "1. notes.txt, line 2: Call it second." in ticket

        # Following reads the daemon's own review and answered threads: nothing starts.
        for _ in range(3):
            clock.advance(2)
            run.orchestrator.request_refresh()
            await run.until(lambda: run.orchestrator.health.last_tick_at == clock.wall())
        assert tracker.by_identifier("A-1").state == "Human Review"
        assert len(agent.of("A-1")) == 2

        approved = await view.ticket_action("A-1", "approve", comment="", by="Ada")
        assert isinstance(approved, dict), approved
        note = host.reviews[-1][1]
        assert note.verdict is ReviewVerdict.COMMENT and note.body.startswith("Approved by Ada")
    finally:
        await run.stop()

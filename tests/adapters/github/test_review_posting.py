"""A person's review posted on GitHub: one review holding every line comment at its line and
side (a range with its first line), each comment's thread answered over REST afterwards, and
GitHub's refusal of a verdict on the token's own pull request met by a comment review; every
exchange held to GitHub's description of the reviews API."""

from __future__ import annotations

from pathlib import Path

from symphony.codehost.contract import DiffSide, LineComment, ReviewDraft, ReviewVerdict
from tests.adapters.github.fake_pulls import FakePulls
from tests.adapters.github.openapi_pulls import check_exchange
from tests.adapters.github.test_pulls import host

COMMENTS = (
    LineComment("app/parse.py", 12, "Name this after what it returns."),
    LineComment("app/parse.py", 30, "These three lines repeat the loop above.", start_line=28),
    LineComment("README.md", 4, "The old wording was right.", side=DiffSide.LEFT),
)
DRAFT = ReviewDraft(ReviewVerdict.REQUEST_CHANGES, "Changes requested by Ada.", "abc123", COMMENTS)


async def test_the_note_and_three_line_comments_reach_github_as_one_review(
    tracker_schemas: Path,
) -> None:
    fake = FakePulls()
    number = fake.add_pull("symphony/abc-1", "abc123")
    github = host(fake)
    posted = await github.submit_review(number, DRAFT)

    posts = [r for r in fake.requests if r.method == "POST"]
    assert [r.path for r in posts] == [f"/repos/acme/widgets/pulls/{number}/reviews"]
    sent = posts[0].body
    assert sent["event"] == "REQUEST_CHANGES" and sent["commit_id"] == "abc123"
    assert sent["body"] == "Changes requested by Ada."
    assert sent["comments"] == [
        {"path": "app/parse.py", "line": 12, "side": "RIGHT",
         "body": "Name this after what it returns."},
        {"path": "app/parse.py", "line": 30, "side": "RIGHT", "start_line": 28,
         "start_side": "RIGHT", "body": "These three lines repeat the loop above."},
        {"path": "README.md", "line": 4, "side": "LEFT", "body": "The old wording was right."},
    ]  # fmt: skip
    assert [r.state for r in fake.reviews] == ["CHANGES_REQUESTED"]
    threads = [t for t in fake.threads if t.number == number]
    assert [(t.path, t.line, t.start_line, t.side) for t in threads] == [
        ("app/parse.py", 12, None, "RIGHT"),
        ("app/parse.py", 30, 28, "RIGHT"),
        ("README.md", 4, None, "LEFT"),
    ]
    assert posted.threads == tuple(str(t.comments[0][0]) for t in threads)

    # The agent's answer on each thread, over REST, by the id the review answered with.
    for thread_id in posted.threads:
        await github.reply_to_thread(number, thread_id, "Addressed in abc1234: renamed.")
    assert [t.comments[-1][2] for t in threads] == ["Addressed in abc1234: renamed."] * 3
    # Read back, each thread is known by that id too: publishing finds it to answer.
    status = await github.read_status(number)
    assert {alias for t in status.threads for alias in t.aliases} >= set(posted.threads)
    for exchange in fake.requests:
        check_exchange(tracker_schemas, exchange)


async def test_a_verdict_github_refuses_on_the_tokens_own_pull_request_is_sent_as_comments(
    tracker_schemas: Path,
) -> None:
    fake = FakePulls(own_pulls=True)
    number = fake.add_pull("symphony/abc-1", "abc123")
    posted = await host(fake).submit_review(number, DRAFT)
    events = [r.body["event"] for r in fake.requests if r.path.endswith("/reviews")]
    assert events == ["REQUEST_CHANGES", "COMMENT"]
    assert [r.state for r in fake.reviews] == ["COMMENTED"]
    assert len(posted.threads) == 3
    for exchange in fake.requests:
        check_exchange(tracker_schemas, exchange)


async def test_an_approval_is_recorded_as_a_comment_review_without_line_comments() -> None:
    fake = FakePulls()
    number = fake.add_pull("symphony/abc-1", "abc123")
    note = ReviewDraft(ReviewVerdict.COMMENT, "Approved by Ada at abc1234.", "abc123")
    posted = await host(fake).submit_review(number, note)
    assert posted.threads == ()
    assert [(r.state, r.body) for r in fake.reviews] == [
        ("COMMENTED", "Approved by Ada at abc1234.")
    ]

"""Following and merging a pull request on GitHub: checks as passed, failed or pending with
the base's required flags, a failed check's output (the end of it) read once, an unchanged pull
request read again for no quota and no GraphQL, unresolved threads, a merge that names its head
and is never sent twice, thread replies; and all of it in GitHub's published descriptions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest
from graphql import parse, validate

from symphony.codehost.contract import (
    CHECK_OUTPUT_CHARS,
    CODE_HOST_HEAD_MOVED,
    CODE_HOST_REJECTED,
    CODE_HOST_RESPONSE,
    CODE_HOST_STATUS,
    CheckState,
    CodeHostError,
    Merged,
    PullState,
    Review,
    ReviewComment,
    ReviewDecision,
)
from symphony.config.repository import CodeHostKind, MergeMethod, RepositorySettings
from symphony_adapters.github import queries
from symphony_adapters.github.pulls import GitHubPulls
from tests.adapters.github.fake_github import FakeGitHub, serve
from tests.adapters.github.fake_pulls import FakePulls
from tests.adapters.github.openapi_pulls import check_exchange
from tests.adapters.github.test_contract import check_graphql_answer, graphql_schema

TOKEN = "ghp_daemon_follow_0123456789"
REPOSITORY = RepositorySettings(
    kind=CodeHostKind.GITHUB,
    slug="acme/widgets",
    api_url="https://api.github.com",
    token=TOKEN,
    token_env="GITHUB_TOKEN",
)
HEAD = "c0ffee0000000000000000000000000000000001"
MERGE = "/repos/acme/widgets/pulls/101/merge"


async def no_sleep(_: float) -> None:
    return None


def following() -> tuple[FakePulls, GitHubPulls]:
    """A fake with pull request #101 from `symphony/abc-1` at `HEAD`, and its code host."""
    fake = FakePulls()
    assert fake.add_pull("symphony/abc-1", HEAD) == 101
    return fake, GitHubPulls(REPOSITORY, transport=fake.transport(), sleep=no_sleep)


async def test_checks_are_passed_failed_or_pending_with_the_bases_required_flags() -> None:
    fake, github = following()
    fake.add_check(101, "lint", "success", required=True)
    fake.add_check(101, "docs", "neutral")
    fake.add_check(101, "nightly", "skipped")
    fake.add_check(101, "tests", "failure", required=True)
    fake.add_check(101, "e2e", "timed_out")
    fake.add_check(101, "deploy", "action_required")
    fake.add_check(101, "build", None, status="in_progress", required=True)
    fake.add_check(101, "queued", None, status="queued")
    fake.add_status(101, "ci/legacy", "success", required=True)
    fake.add_status(101, "ci/coverage", "error", description="coverage fell")
    fake.add_status(101, "ci/review-app", "pending")
    status = await github.read_status(101)
    assert {c.name: (c.state, c.required) for c in status.checks} == {
        "lint": (CheckState.PASSED, True),
        "docs": (CheckState.PASSED, False),
        "nightly": (CheckState.PASSED, False),
        "tests": (CheckState.FAILED, True),
        "e2e": (CheckState.FAILED, False),
        "deploy": (CheckState.FAILED, False),
        "build": (CheckState.PENDING, True),
        "queued": (CheckState.PENDING, False),
        "ci/legacy": (CheckState.PASSED, True),
        "ci/coverage": (CheckState.FAILED, False),
        "ci/review-app": (CheckState.PENDING, False),
    }
    assert all(c.output is None for c in status.checks if c.state is not CheckState.FAILED)
    assert status.pull.state is PullState.OPEN and status.pull.head_sha == HEAD
    assert status.mergeable is True and status.review_decision is ReviewDecision.NONE
    await github.aclose()


async def test_a_failed_actions_check_says_the_end_of_its_log_within_the_bound() -> None:
    fake, github = following()
    log = "first line of the job\n" + "collecting ...\n" * 2000 + "FAILED test_parse - KeyError"
    check = fake.add_check(
        101,
        "tests",
        "failure",
        summary="1 failed, 41 passed",
        annotations=(("src/parse.py", 12, "KeyError: 'title'"),),
        log=log,
    )
    fake.add_status(
        101, "ci/coverage", "failure", description="80% < 90%", target_url="https://cov.test/1"
    )
    status = await github.read_status(101)
    tests, coverage = status.checks
    assert tests.output is not None and len(tests.output) <= CHECK_OUTPUT_CHARS
    assert tests.output.endswith("FAILED test_parse - KeyError")
    assert "first line of the job" not in tests.output
    assert "1 failed, 41 passed" in tests.output
    assert "src/parse.py:12: KeyError: 'title'" in tests.output
    assert coverage.output == "80% < 90%\nhttps://cov.test/1"
    assert coverage.url == "https://cov.test/1"
    [logs] = [r for r in fake.requests if r.path.endswith("/logs")]
    assert (logs.path, logs.status) == (f"/repos/acme/widgets/actions/jobs/{check.id}/logs", 302)
    [download] = [r for r in fake.requests if r.path.startswith("/_downloads")]
    assert download.token is None  # the token stays with GitHub's API, not the log's host

    fake.add_review(101, "amy", "COMMENTED", "looking")
    again = await github.read_status(101)
    assert again.checks[0].output == tests.output and len(again.reviews) == 1
    assert sum(1 for r in fake.requests if r.path.endswith(("/logs", "/annotations"))) == 2
    await github.aclose()


async def test_a_failed_check_of_another_app_says_its_summary_and_annotations() -> None:
    fake, github = following()
    fake.add_check(
        101, "lint", "failure", summary="x" * 10_000 + "the end", annotations=(("a.py", 1, "E1"),)
    )
    [lint] = (await github.read_status(101)).checks
    assert lint.output is not None and len(lint.output) == CHECK_OUTPUT_CHARS
    assert lint.output.endswith("the end\n\na.py:1: E1")
    assert not any(r.path.endswith("/logs") for r in fake.requests)


async def test_an_unchanged_pull_request_read_again_costs_no_quota_and_sends_no_graphql() -> None:
    fake, github = following()
    fake.add_check(101, "tests", "failure", log="boom")
    fake.add_review(101, "amy", "APPROVED")
    fake.protect("main", 1)
    first = await github.read_status(101)
    spent, sent, graphql = fake.quota_used, len(fake.requests), fake.operations()
    again = await github.read_status(101)
    assert again is first
    assert fake.quota_used == spent and fake.operations() == graphql == ["PullRequestFollow"]
    assert [r.status for r in fake.requests[sent:]] == [304] * 5
    await github.aclose()


async def test_a_new_review_a_new_check_and_a_push_are_seen_at_the_next_read() -> None:
    fake, github = following()
    fake.add_check(101, "tests", "success")
    assert (await github.read_status(101)).reviews == ()
    fake.add_review(101, "amy", "CHANGES_REQUESTED", "please add a test")
    fake.add_review(101, "bob", "DISMISSED", "never mind")
    status = await github.read_status(101)
    assert status.reviews == (Review("amy", "changes_requested", "please add a test", True),)
    assert status.review_decision is ReviewDecision.CHANGES_REQUESTED
    fake.add_check(101, "lint", "failure")
    assert {c.name: c.state for c in (await github.read_status(101)).checks} == {
        "tests": CheckState.PASSED,
        "lint": CheckState.FAILED,
    }
    fake.push(101, "beef")
    fake.add_check(101, "tests", None, status="queued")
    pushed = await github.read_status(101)
    assert pushed.pull.head_sha == "beef"
    assert [(c.name, c.state) for c in pushed.checks] == [("tests", CheckState.PENDING)]
    assert fake.operations() == ["PullRequestFollow"] * 4
    await github.aclose()


async def test_only_unresolved_threads_come_with_path_line_diff_hunk_and_comments() -> None:
    fake, github = following()
    fake.outsiders.add("bob")
    open_thread = fake.add_thread(
        101, "src/parse.py", 12, ("amy", "This drops the title."), ("bob", "Agreed.")
    )
    done = fake.add_thread(101, "README.md", 3, ("amy", "typo"))
    fake.resolve(done)
    [thread] = (await github.read_status(101)).threads
    assert thread.id == open_thread.id and thread.id.startswith("PRRT_")
    assert (thread.path, thread.line) == ("src/parse.py", 12)
    assert thread.diff_hunk == open_thread.diff_hunk
    assert thread.comments == (
        ReviewComment("amy", "This drops the title.", author_member=True),
        ReviewComment("bob", "Agreed.", author_member=False),  # no part in the repository
    )
    await github.aclose()


async def test_the_bases_required_approvals_are_read_once_and_unknown_when_unreadable() -> None:
    fake, github = following()
    fake.protect("main", 2)
    fake.add_review(101, "amy", "APPROVED")
    status = await github.read_status(101)
    assert status.approvals_required == 2
    assert status.review_decision is ReviewDecision.REVIEW_REQUIRED
    fake.add_review(101, "bob", "APPROVED")
    assert (await github.read_status(101)).review_decision is ReviewDecision.APPROVED
    assert sum(1 for r in fake.requests if r.path.endswith("/protection")) == 1

    _, unprotected = following()  # GitHub answers 404, as to a token that may not look
    assert (await unprotected.read_status(101)).approvals_required is None
    await github.aclose()


async def test_the_rules_of_a_base_are_read_for_check_before_any_pull_request() -> None:
    fake, github = following()
    fake.protect("release", 0)
    assert await github.approvals_required("release") == 0
    assert await github.approvals_required("main") is None  # unprotected, or not ours to read
    await github.aclose()


async def test_a_conflict_and_a_merge_by_a_person_are_seen() -> None:
    fake, github = following()
    fake.set_mergeable(101, False)
    assert (await github.read_status(101)).mergeable is False
    fake.set_mergeable(101, None)  # GitHub is still computing it
    assert (await github.read_status(101)).mergeable is None
    fake.merge(101)
    assert (await github.read_status(101)).pull.state is PullState.MERGED
    await github.aclose()


async def test_a_merge_names_the_head_and_the_method() -> None:
    fake, github = following()
    merged = await github.merge(101, HEAD, MergeMethod.SQUASH)
    assert merged == Merged("m101")
    [put] = [r for r in fake.requests if r.method == "PUT"]
    assert (put.path, put.body) == (MERGE, {"sha": HEAD, "merge_method": "squash"})
    assert fake.record(101)["merged_at"] is not None


async def test_a_moved_head_is_said_as_such_and_a_conflict_is_refused_in_githubs_words() -> None:
    fake, github = following()
    fake.push(101, "beef")  # a push the daemon has not read yet
    with pytest.raises(CodeHostError) as moved:
        await github.merge(101, HEAD, MergeMethod.MERGE)
    assert moved.value.category == CODE_HOST_HEAD_MOVED
    assert "Head branch was modified" in moved.value.message
    fake.set_mergeable(101, False)
    with pytest.raises(CodeHostError) as conflicting:
        await github.merge(101, "beef", MergeMethod.REBASE)
    assert conflicting.value.category == CODE_HOST_REJECTED
    assert "not mergeable" in conflicting.value.message
    assert fake.record(101)["merged_at"] is None


async def test_a_merge_answered_502_is_read_back_not_sent_again() -> None:
    fake, github = following()
    fake.fail("PUT", MERGE, 502, applied=True)  # GitHub merged, then failed to say so
    assert await github.merge(101, HEAD, MergeMethod.SQUASH) == Merged("m101")
    assert [r.method for r in fake.requests] == ["PUT", "GET"]

    fake, github = following()
    fake.fail("PUT", MERGE, 502)
    with pytest.raises(CodeHostError) as failed:
        await github.merge(101, HEAD, MergeMethod.SQUASH)
    assert failed.value.category == CODE_HOST_STATUS and "502" in failed.value.message
    assert [r.method for r in fake.requests] == ["PUT", "GET"]
    assert fake.record(101)["merged_at"] is None


async def test_a_reply_goes_to_the_thread_it_names() -> None:
    fake, github = following()
    fake.add_thread(101, "a.py", 1, ("amy", "why?"))
    thread = fake.add_thread(101, "b.py", 2, ("amy", "and this?"))
    await github.reply_to_thread(101, thread.id, "Fixed in beef.")
    assert thread.comments[-1][1:] == ("symphony", "Fixed in beef.")
    assert fake.operations() == ["ReplyToThread"]
    assert fake.requests[-1].body["variables"] == {"threadId": thread.id, "body": "Fixed in beef."}
    with pytest.raises(CodeHostError) as unknown:
        await github.reply_to_thread(101, "PRRT_gone", "hello?")
    assert unknown.value.category == CODE_HOST_RESPONSE
    await github.aclose()


async def test_fake_github_serves_the_same_pull_requests_over_http() -> None:
    github = FakeGitHub(token=TOKEN)
    with serve(github):
        repository = RepositorySettings(
            CodeHostKind.GITHUB, "acme/widgets", github.base, TOKEN, "GITHUB_TOKEN"
        )
        host = GitHubPulls(repository, sleep=no_sleep)
        try:
            number = github.pulls.add_pull("symphony/abc-1", HEAD)
            github.pulls.add_check(number, "tests", "failure", log="... 1 failed", required=True)
            first = await host.read_status(number)
            spent = github.quota_used
            assert await host.read_status(number) is first and github.quota_used == spent
            [tests] = first.checks
            assert tests.required and tests.output is not None
            assert tests.output.endswith("1 failed")
            github.pulls.push(number, "beef")  # after a real push, a test names the new head
            github.pulls.add_check(number, "tests", "success", required=True)
            status = await host.read_status(number)
            assert [c.state for c in status.checks] == [CheckState.PASSED]
            assert await host.merge(number, "beef", MergeMethod.SQUASH) == Merged("m101")
        finally:
            await host.aclose()


class _Enterprise(httpx.AsyncBaseTransport):
    """GitHub Enterprise Server's paths (`/api/v3/...`, `/api/graphql`) onto the fake's."""

    def __init__(self, fake: FakePulls) -> None:
        self.inner = fake.transport()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        path = request.url.path.removeprefix("/api/v3").replace("/api/graphql", "/graphql")
        request.url = request.url.copy_with(path=path)
        return await self.inner.handle_async_request(request)


async def test_enterprise_server_is_asked_at_its_own_graphql_endpoint() -> None:
    fake = FakePulls()
    fake.add_pull("symphony/abc-1", HEAD)
    transport = _Enterprise(fake)
    repository = dataclasses.replace(REPOSITORY, api_url="https://ghe.example.test/api/v3")
    github = GitHubPulls(repository, transport=transport, sleep=no_sleep)
    await github.read_status(101)
    assert "/api/graphql" in transport.paths
    assert all(p.startswith("/api/v3/repos/") for p in transport.paths if p != "/api/graphql")
    await github.aclose()


# Against GitHub's published descriptions (tracker-schemas/github)


@pytest.mark.parametrize("name", ["PULL_FOLLOW", "REPLY_TO_THREAD"])
def test_the_follow_documents_validate_against_githubs_schema(
    tracker_schemas: Path, name: str
) -> None:
    assert validate(graphql_schema(tracker_schemas), parse(queries.ALL[name])) == []


async def test_following_and_merging_stay_within_githubs_descriptions(
    tracker_schemas: Path,
) -> None:
    fake, github = following()
    fake.protect("main", 1)
    fake.add_check(101, "tests", "failure", summary="1 failed", log="boom", required=True)
    fake.add_check(101, "lint", "failure", annotations=(("a.py", 1, "E1"),))
    fake.add_check(101, "build", None, status="in_progress")
    fake.add_status(101, "ci/legacy", "error", description="down", target_url="https://ci.test")
    fake.add_review(101, "amy", "APPROVED", "ship it")
    thread = fake.add_thread(101, "a.py", 1, ("amy", "why?"))
    fake.add_thread(101, "b.py", None, ("bob", "file comment"))
    await github.read_status(101)
    await github.read_status(101)
    await github.reply_to_thread(101, thread.id, "Because.")
    fake.add_check(101, "tests", "success", required=True)  # a rerun passes: not blocked
    with pytest.raises(CodeHostError):
        await github.merge(101, "0" * 40, MergeMethod.REBASE)
    fake.fail("PUT", MERGE, 502, applied=True)
    await github.merge(101, HEAD, MergeMethod.MERGE)
    with pytest.raises(CodeHostError):
        await github.merge(101, HEAD, MergeMethod.SQUASH)  # closed now: 405
    other, unprotected = following()
    await unprotected.read_status(101)
    exchanges = fake.requests + other.requests
    assert {r.status for r in exchanges} >= {200, 302, 304, 404, 405, 409, 502}
    schema = graphql_schema(tracker_schemas)
    for exchange in exchanges:
        check_exchange(tracker_schemas, exchange)
        if exchange.path == "/graphql":
            assert exchange.body["query"] in (queries.PULL_FOLLOW, queries.REPLY_TO_THREAD)
            check_graphql_answer(
                schema, exchange.body["query"], exchange.body["variables"], exchange.answer["data"]
            )


async def test_merge_is_allowed_only_as_github_s_mergeable_state_says() -> None:
    fake, github = following()
    fake.add_check(101, "tests", None, status="in_progress", required=True)
    blocked = await github.read_status(101)
    assert (blocked.merge_allowed, blocked.merge_state) == (False, "blocked")
    fake.add_check(101, "tests", "success", required=True)
    fake.add_check(101, "docs", "failure")  # not required: GitHub merges, the daemon weighs it
    unstable = await github.read_status(101)
    assert (unstable.merge_allowed, unstable.merge_state) == (True, "unstable")
    fake.add_check(101, "docs", "success")
    clean = await github.read_status(101)
    assert (clean.merge_allowed, clean.merge_state) == (True, "clean")
    fake.set_mergeable(101, None)  # still computing after a push
    computing = await github.read_status(101)
    assert (computing.merge_allowed, computing.merge_state) == (False, "unknown")


async def test_a_push_dismisses_a_stale_approval_where_the_base_asks_for_it() -> None:
    fake, github = following()
    fake.protect("main", 1)
    fake.dismiss_stale = True
    fake.add_review(101, "amy", "APPROVED", "ship it")
    assert (await github.read_status(101)).review_decision is ReviewDecision.APPROVED
    fake.push(101, "d" * 40)  # a person pushes: amy approved the old head only
    after = await github.read_status(101)
    assert after.review_decision is not ReviewDecision.APPROVED
    assert (after.merge_allowed, after.merge_state) == (False, "blocked")

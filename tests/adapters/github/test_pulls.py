"""GitHub as the code host of `repository:`: a branch's pull request opened once, updated on a
rework, never reopened once merged, with GitHub's refusals in its words; and every request
checked against GitHub's published description of the pulls API."""

from __future__ import annotations

from pathlib import Path

import pytest

from symphony.codehost.contract import (
    CODE_HOST_REJECTED,
    CODE_HOST_STATUS,
    CodeHostError,
    PullRequestDraft,
    PullState,
    code_host_adapter,
    publish_pull_request,
)
from symphony.config.repository import CodeHostKind, RepositorySettings
from symphony_adapters.github.pulls import GitHubPulls
from tests.adapters.github.fake_pulls import FakePulls
from tests.adapters.github.openapi_pulls import check_exchange, descriptions, resolve

TOKEN = "ghp_daemon_pulls_0123456789"
REPOSITORY = RepositorySettings(
    kind=CodeHostKind.GITHUB,
    slug="acme/widgets",
    api_url="https://api.github.com",
    token=TOKEN,
    token_env="GITHUB_TOKEN",
)
DRAFT = PullRequestDraft(
    branch="symphony/abc-1",
    title="ABC-1: Fix the parser",
    body="Gates: pytest passed (exit 0)",
    labels=("agent",),
)


async def no_sleep(_: float) -> None:
    return None


def host(fake: FakePulls) -> GitHubPulls:
    return GitHubPulls(REPOSITORY, transport=fake.transport(), sleep=no_sleep)


async def test_a_branch_gets_one_pull_request_opened_then_updated_on_a_rework() -> None:
    fake = FakePulls()
    github = host(fake)
    first = await publish_pull_request(github, DRAFT)
    assert first.opened and first.pull_request.number == 101
    assert first.pull_request.base == "main"  # the repository's default branch
    assert first.pull_request.url == "https://github.com/acme/widgets/pull/101"
    assert fake.record(101)["labels"] == [{"name": "agent"}]
    rework = PullRequestDraft(DRAFT.branch, "ABC-1: v2", "Gates: 2", labels=DRAFT.labels)
    again = await publish_pull_request(github, rework)
    assert not again.opened and again.pull_request.number == 101
    assert len(fake.pulls) == 1 and fake.record(101)["title"] == "ABC-1: v2"
    assert {r.token for r in fake.requests} == {f"Bearer {TOKEN}"}
    await github.aclose()


async def test_a_merged_pull_request_is_not_reopened_and_a_closed_one_is_replaced() -> None:
    fake = FakePulls()
    github = host(fake)
    await publish_pull_request(github, DRAFT)
    fake.record(101).update(state="closed")  # a person closed it unmerged
    replaced = await publish_pull_request(github, DRAFT)
    assert replaced.opened and replaced.pull_request.number == 102
    fake.merge(102)
    found = await github.find_pull_request(DRAFT.branch)
    assert found is not None and found.state is PullState.MERGED
    with pytest.raises(CodeHostError) as refused:
        await publish_pull_request(github, DRAFT)
    assert refused.value.category == CODE_HOST_REJECTED and "#102" in refused.value.message
    assert len(fake.pulls) == 2


async def test_a_base_github_refuses_is_rejected_in_githubs_words() -> None:
    fake = FakePulls()
    with pytest.raises(CodeHostError) as refused:
        await publish_pull_request(host(fake), PullRequestDraft("b", "t", "x", base="release"))
    assert refused.value.category == CODE_HOST_REJECTED
    assert "Validation Failed" in refused.value.message and not fake.pulls


async def test_other_failures_keep_their_kind_under_the_code_hosts_name() -> None:
    elsewhere = FakePulls(slug="someone/else")  # answers 404 for acme/widgets
    github = GitHubPulls(REPOSITORY, transport=elsewhere.transport(), sleep=no_sleep)
    with pytest.raises(CodeHostError) as failed:
        await github.default_branch()
    assert failed.value.category == CODE_HOST_STATUS and "404" in failed.value.message


def test_the_github_adapter_declares_its_code_host() -> None:
    adapter = code_host_adapter("github")
    assert adapter.kind == "github" and isinstance(adapter.create(REPOSITORY), GitHubPulls)
    with pytest.raises(CodeHostError):
        code_host_adapter("linear")  # a tracker kind that hosts no code


# Against GitHub's published description (tracker-schemas/github/rest-pulls-subset)


async def test_every_request_and_the_fields_read_are_in_githubs_description(
    tracker_schemas: Path,
) -> None:
    spec, _ = descriptions(tracker_schemas)
    fake = FakePulls()
    github = host(fake)
    await publish_pull_request(github, DRAFT)
    await publish_pull_request(github, DRAFT)
    assert {(r.method, r.path) for r in fake.requests} >= {
        ("GET", "/repos/acme/widgets"),
        ("GET", "/repos/acme/widgets/pulls"),
        ("POST", "/repos/acme/widgets/pulls"),
        ("POST", "/repos/acme/widgets/issues/101/labels"),
        ("PATCH", "/repos/acme/widgets/pulls/101"),
    }
    for exchange in fake.requests:
        check_exchange(tracker_schemas, exchange)
    pull = resolve(spec, spec["components"]["schemas"]["pull-request"])["properties"]
    assert {"number", "html_url", "state", "title", "draft", "merged_at", "head", "base"} <= set(
        pull
    )
    head = resolve(spec, pull["head"])["properties"]
    assert {"ref", "sha"} <= set(head)
    repository = resolve(spec, spec["components"]["schemas"]["full-repository"])["properties"]
    assert "default_branch" in repository

"""The code host's requests and the fake's answers against GitLab's published merge request
description (tracker-schemas/gitlab/rest-mr-subset), over real HTTP: the fake mounted in
`FakeGitLab`, as end-to-end tests of the daemon use it.

Names only, as for the issues subset (its types are unreliable, see tracker-schemas/README.md):
every request uses a path, method, query parameters (and their enum values) and body fields the
subset defines, with the fields it requires; every JSON answer uses only field names of the
operation's response schema. Where the subset cannot speak, the test says so: the job log is
plain text (the subset types it as a job), and `approvals_required` / `approvals_left` are what
GitLab's approval rules add to the open source edition's approvals entity, which the subset
describes.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from symphony.codehost.contract import PullRequestDraft, publish_pull_request
from symphony.config.repository import CodeHostKind, MergeMethod, RepositorySettings
from symphony_adapters.gitlab.merge_requests import GitLabMergeRequests
from tests.adapters.gitlab import payloads
from tests.adapters.gitlab.fake_gitlab import FakeGitLab, serve
from tests.adapters.gitlab.fake_members import documented_members_request
from tests.adapters.gitlab.fake_merge_requests import FakeMergeRequests
from tests.adapters.gitlab.test_contract import (
    check_names,
    operation,
    query_parameters,
    request_schema,
    response_schema,
    template_match,
)

TOKEN = "glpat-contract_token_value"
PROJECT = "/api/v4/projects/{id}"
MR = PROJECT + "/merge_requests/{merge_request_iid}"
NOTEABLE = PROJECT + "/merge_requests/{noteable_id}"
APPROVAL_RULE_FIELDS = frozenset({"approvals_required", "approvals_left"})


@cache
def openapi(folder: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (folder / "gitlab" / "rest-mr-subset.openapi.json").read_text()
    )
    return spec


def properties(spec: dict[str, Any], name: str) -> set[str]:
    return set(spec["components"]["schemas"][name]["properties"])


async def follow_one_merge_request(fake: FakeMergeRequests, base: str) -> None:
    """Publish, follow through a red and a green pipeline, reply, merge; then a second branch
    whose merge answer is lost."""
    repository = RepositorySettings(
        CodeHostKind.GITLAB, payloads.PROJECT, f"{base}/api/v4", TOKEN, "GITLAB_TOKEN"
    )
    gitlab = GitLabMergeRequests(repository)
    try:
        draft = PullRequestDraft("symphony/abc-1", "ABC-1: Fix", "Gates", draft=True, labels=("a",))
        iid = (await publish_pull_request(gitlab, draft)).pull_request.number
        await publish_pull_request(gitlab, PullRequestDraft("symphony/abc-1", "ABC-1: Fix", "v2"))
        red = fake.add_job(iid, "test", "failed", trace="\x1b[31mboom\x1b[0m\n")
        fake.add_job(iid, "lint", "failed", trace="meh", allow_failure=True)
        for n in range(101):  # two pages of discussions
            fake.add_discussion(iid, f"point {n}", path="src/a.py", line=n + 1)
        thread = fake.add_discussion(iid, "Why?", "bob")
        status = await gitlab.read_status(iid)
        assert status.checks[0].output == "boom" and len(status.threads) == 102
        assert (await gitlab.read_status(iid)) is status
        fake.set_job(red, "success")
        fake.approve(iid, "amy")
        await gitlab.reply_to_thread(iid, thread, "Because.")
        await gitlab.read_status(iid)
        await gitlab.merge(
            iid, str((await gitlab.read_status(iid)).pull.head_sha), MergeMethod.SQUASH
        )

        second = PullRequestDraft("symphony/abc-2", "ABC-2: More", "Gates")
        other = (await publish_pull_request(gitlab, second)).pull_request.number
        fake.fail_next_merge = 502
        await gitlab.merge(other, fake.record(other).sha, MergeMethod.MERGE)
    finally:
        await gitlab.aclose()


async def test_every_request_and_answer_is_in_the_merge_request_subset(
    tracker_schemas: Path,
) -> None:
    spec = openapi(tracker_schemas)
    fake = FakeMergeRequests(token=TOKEN)
    with serve(FakeGitLab(token=TOKEN, merge_requests=fake)) as server:
        await follow_one_merge_request(fake, server.base)

    seen: set[tuple[str, str]] = set()
    for request in fake.requests:
        members = documented_members_request(
            request.method, request.path, request.query, request.answer
        )
        if members is not None:
            seen.add((request.method, members))
            continue
        template, op = operation(spec, request.method, request.path)
        where = f"{request.method} {template}"
        seen.add((request.method, template))
        path_values = template_match(template, request.path) or {}
        if "noteable_id" in path_values:
            assert int(path_values["noteable_id"]) in fake.merge_requests, "the iid, not an id"
        parameters = query_parameters(op)
        unknown = set(request.query) - set(parameters)
        assert not unknown, f"{where} has no parameter(s) {unknown}"
        for key, values in request.query.items():
            enum = parameters[key].get("schema", {}).get("enum")
            assert enum is None or set(values) <= set(enum), (where, key, values)
        if request.body:
            body_schema = request_schema(spec, op)
            assert set(request.body) <= set(body_schema["properties"]), where
            assert set(body_schema.get("required", [])) <= set(request.body), where
        if request.status == 304 or isinstance(request.answer, bytes):
            continue  # no body; or the job log, plain text where the subset says JSON
        if str(request.status) not in op["responses"] or request.status >= 300:
            assert request.status == 502 and template == MR + "/merge", where
            continue  # the lost answer the fake was told to give
        answer = request.answer
        if template == MR + "/approvals":
            assert set(answer) & APPROVAL_RULE_FIELDS
            answer = {k: v for k, v in answer.items() if k not in APPROVAL_RULE_FIELDS}
        check_names(spec, response_schema(spec, op, request.status), answer, where)
    assert seen == {
        ("GET", PROJECT),
        ("GET", PROJECT + "/merge_requests"),
        ("POST", PROJECT + "/merge_requests"),
        ("GET", MR),
        ("PUT", MR),
        ("PUT", MR + "/merge"),
        ("GET", MR + "/approvals"),
        ("GET", NOTEABLE + "/discussions"),
        ("POST", NOTEABLE + "/discussions/{discussion_id}/notes"),
        ("GET", PROJECT + "/pipelines/{pipeline_id}/jobs"),
        ("GET", PROJECT + "/jobs/{job_id}/trace"),
        ("GET", PROJECT + "/members/all"),
    }
    assert {r.status for r in fake.requests} >= {200, 201, 304, 502}


def test_the_fields_the_adapter_reads_are_in_the_subset(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    assert {
        "iid", "state", "web_url", "source_branch", "target_branch", "title", "draft",
        "work_in_progress", "sha", "labels", "detailed_merge_status", "merge_status",
        "has_conflicts", "head_pipeline", "pipeline", "merge_commit_sha", "squash_commit_sha",
        "merge_error", "source_project_id", "target_project_id",
    } <= properties(spec, "API_Entities_MergeRequest")  # fmt: skip
    listed = properties(spec, "API_Entities_MergeRequestBasic")
    assert {"iid", "state", "source_branch", "sha", "draft", "source_project_id"} <= listed
    assert {"id", "sha", "status", "web_url", "yaml_errors"} <= properties(
        spec, "API_Entities_Ci_Pipeline"
    )
    job = properties(spec, "API_Entities_Ci_Job")
    assert {"id", "name", "status", "allow_failure", "web_url"} <= job
    assert "approved_by" in properties(spec, "API_Entities_MergeRequestApprovals")
    assert "user" in properties(spec, "API_Entities_Approvals")
    assert {"id", "notes"} <= properties(spec, "APIEntitiesDiscussion")
    note = properties(spec, "APIEntitiesNote")
    assert {"body", "author", "system", "resolvable", "resolved", "position"} <= note
    assert "default_branch" in properties(spec, "API_Entities_ProjectWithAccess")
    merge = properties(spec, "putApiV4ProjectsIdMergeRequestsMergeRequestIidMerge")
    assert {"sha", "squash", "merge_when_pipeline_succeeds"} <= merge

"""One masker of every secret: the values the daemon knows, and credentials recognized by their
shape whoever's they are, masked in text, JSON and every string field of what comes in."""

from __future__ import annotations

import json

import pytest

from symphony.base.pulls import (
    Check,
    CheckState,
    PullRequest,
    PullState,
    PullStatus,
    Review,
    ReviewComment,
    ReviewDecision,
    ReviewThread,
)
from symphony.base.secrets import REDACTED, SecretMasker, credential_variables

SHAPED = {
    "github": "ghp_" + "a1B2" * 9,
    "github fine-grained": "github_pat_" + "11ABCDEFG0" * 4,
    "github app": "ghs_" + "Z9" * 18,
    "gitlab": "glpat-" + "x1y2z3" * 4,
    "slack": "xoxb-1234567890-abcdefghij",
    "openai": "sk-proj-" + "q" * 40,
    "anthropic": "sk-ant-api03-" + "k" * 40,
    "aws": "AKIA" + "ABCDEFGHIJKLMNOP",
}


@pytest.mark.parametrize("kind", sorted(SHAPED))
def test_a_credential_is_masked_by_its_shape_though_nobody_named_it(kind: str) -> None:
    masker = SecretMasker()  # told nothing
    value = SHAPED[kind]
    line = f"+ export THE_TOKEN={value}\n+ curl -H 'x: {value}' https://api"
    masked = masker.mask(line)
    assert value not in masked and masked.count(REDACTED) == 2
    assert masked.startswith("+ export THE_TOKEN=")
    document = json.dumps({"log": line}).encode()
    assert value.encode() not in masker.mask_json(document)


def test_a_bearer_value_is_masked_and_ordinary_text_is_left_alone() -> None:
    masker = SecretMasker()
    masked = masker.mask("Authorization: Bearer eyJhbGciOi.abc-def_ghi\nnext line")
    assert masked == f"Authorization: Bearer {REDACTED}\nnext line"
    plain = "fix the task-runner: ask-for-help_flag, DEMO-12, sk-short, a_b-c"
    assert masker.mask(plain) == plain


def test_known_values_and_shapes_are_masked_in_every_field_of_a_reading() -> None:
    masker = SecretMasker()
    masker.set(["s3cret-of-the-repository"], source="workflow")
    token = SHAPED["github"]
    status = PullStatus(
        pull=PullRequest(7, "https://x/7", "b", "main", PullState.OPEN, "t", head_sha="a" * 40),
        mergeable=True,
        review_decision=ReviewDecision.CHANGES_REQUESTED,
        checks=(
            Check("ci", CheckState.FAILED, output=f"+ GH_TOKEN={token} s3cret-of-the-repository"),
        ),
        threads=(
            ReviewThread("t1", "a.py", 1, None, (ReviewComment("bob", f"use {token} here"),)),
        ),
        reviews=(Review("amy", "changes_requested", f"leaked: {token}"),),
    )
    masked = masker.mask_fields(status)
    text = repr(masked)
    assert token not in text and "s3cret-of-the-repository" not in text
    assert masked.checks[0].output == f"+ GH_TOKEN={REDACTED} {REDACTED}"
    assert masked.pull == status.pull  # nothing secret there: the same object
    assert masker.mask_fields(masked) == masked


def test_the_daemon_s_variables_named_like_a_credential_are_its_secrets() -> None:
    environ = {
        "ANTHROPIC_API_KEY": "sk-ant-key-value",
        "SMTP_PASSWORD": "hunter2hunter2",
        "GITLAB_TOKEN": "a-gitlab-token",
        "HOME": "/home/me",
        "PATH": "/usr/bin",
        "EMPTY_TOKEN": "",
    }
    assert sorted(credential_variables(environ)) == [
        "a-gitlab-token", "hunter2hunter2", "sk-ant-key-value",
    ]  # fmt: skip

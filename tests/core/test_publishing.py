"""What a publishing stage asks of the code host (`symphony.core.publishing`): the commit and
branch the daemon verified, never what the agent checked out afterwards."""

from __future__ import annotations

import dataclasses

from symphony.config.repository import CodeHostKind, PublishSettings, RepositorySettings
from symphony.config.stages import Report, StageOutcome
from symphony.core.evidence import WorkspaceFacts, build_evidence
from symphony.core.publishing import publish_intent
from tests.factories import make_issue, make_settings, make_stage

REPOSITORY = RepositorySettings(CodeHostKind.GITHUB, "o/r", "https://api.github.com", "t", None)


def test_the_intent_names_the_verified_commit_and_branch_from_the_evidence() -> None:
    stage = make_stage("implement", ("Ready",), evidence=True, publish=PublishSettings())
    settings = dataclasses.replace(make_settings(), repository=REPOSITORY)
    report = Report(StageOutcome.DONE, "did it")
    facts = WorkspaceFacts("symphony/ABC-1", "a" * 40, "main", "workspace.base_ref")
    evidence = build_evidence(
        identifier="ABC-1", stage="implement", target="Human Review", report=report,
        verification=None, facts=facts, turns=1, tokens=(1, 1, 2), agent_seconds=1.0,
        hand_off=1,
    )  # fmt: skip
    intent = publish_intent(stage, settings, make_issue(), report, evidence)
    assert intent is not None
    assert (intent.head, intent.branch) == ("a" * 40, "symphony/ABC-1")
    bare = publish_intent(stage, settings, make_issue(), report, None)
    assert bare is not None and (bare.head, bare.branch) == (None, None)

"""What a publishing stage asks of the code host (`symphony.core.publishing`): the commit and
branch the daemon verified, never what the agent checked out afterwards."""

from __future__ import annotations

import dataclasses

from symphony.config.repository import CodeHostKind, PublishSettings, RepositorySettings
from symphony.config.stages import Report, StageOutcome
from symphony.core.evidence import WorkspaceFacts, build_evidence
from symphony.core.publishing import publish_intent
from symphony.core.stage_outcomes import RunPush, TransitionPlan
from symphony.store.codec import plan_from_json, plan_to_json
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


def test_what_a_run_pushed_itself_names_the_branch_and_head_and_survives_the_store() -> None:
    stage = make_stage("implement", ("Ready",), publish=PublishSettings(base="main"))
    settings = dataclasses.replace(make_settings(), repository=REPOSITORY)
    report = Report(StageOutcome.DONE, "did it")
    pushed = RunPush("symphony/ABC-1", "b" * 40)
    intent = publish_intent(stage, settings, make_issue(), report, None, pushed=pushed)
    assert intent is not None and intent.pushed == pushed
    assert (intent.head, intent.branch) == ("b" * 40, "symphony/ABC-1")
    plan = TransitionPlan("implement", StageOutcome.DONE, "Human Review", (), publish=intent)
    assert plan_from_json(plan_to_json(plan)) == plan  # kept in the outbox across a restart
    refused = dataclasses.replace(plan, publish=dataclasses.replace(
        intent, pushed=RunPush("symphony/ABC-1", refused="protected")))  # fmt: skip
    assert plan_from_json(plan_to_json(refused)) == refused

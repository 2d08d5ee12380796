"""What happens to a hand-off after its run, traced: the publication hangs from the run that
handed off, each reading of the pull request and each merge is a trace of its own that links
back to the publication."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from symphony import core
from symphony.base.pulls import (
    Check,
    CheckState,
    PullRequest,
    PullState,
    PullStatus,
    ReviewDecision,
)
from symphony.base.secrets import SecretMasker
from symphony.daemon import follow
from symphony.telemetry import StepTrace, tracer_from_env
from tests.daemon.test_follow import DONE, passes_until, start
from tests.factories import make_issue
from tests.fakes.agent import ScriptedAgent
from tests.fakes.clock import FakeClock
from tests.fakes.code_host import MemoryCodeHost
from tests.fakes.tracker import MemoryTracker
from tests.otlp_receiver import Received, Receiver, start_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got, server = start_receiver()
    yield got
    server.shutdown()


def linked_to(span: Received, target: Received) -> bool:
    return span.links == [(target.trace_id, target.span_id)]


async def test_publication_readings_and_merge_each_have_a_span_that_leads_back_to_the_run(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = FakeClock()
    tracker = MemoryTracker(make_issue("A-1", state="Ready"))
    agent, host = ScriptedAgent(DONE), MemoryCodeHost()
    run = start(tmp_path, tracker, agent, host, clock,
                merge={"policy": "when_green_and_approved"},
                telemetry={"endpoint": receiver.url + "/v1/traces"})  # fmt: skip
    state = run.orchestrator.state
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Human Review")
        (pull,) = host.pulls.values()
        red = Check("ci", CheckState.FAILED, required=True, output="FAILED test_add")
        host.statuses[pull.number] = PullStatus(pull, True, ReviewDecision.NONE, (red,))
        await passes_until(run, clock, lambda: "id-A-1" in state.running)
        await run.until(lambda: len(agent.sessions) == 2 and agent.sessions[1].stopped)
        await run.until(lambda: "id-A-1" not in state.claimed)
        fixed = host.pulls[pull.number].head_sha
        green = Check("ci", CheckState.PASSED, required=True)
        host.statuses[pull.number] = PullStatus(
            host.pulls[pull.number], True, ReviewDecision.APPROVED, (green,)
        )
        await passes_until(run, clock, lambda: tracker.by_identifier("A-1").state == "Done")
    finally:
        await run.stop()

    first_run, fix_run = receiver.named("symphony.run")
    first, second = receiver.named("symphony.publish")
    # Each publication is a step of the run that handed off: in its trace, under its root.
    assert (first.trace_id, first.parent_id) == (first_run.trace_id, first_run.span_id)
    assert (second.trace_id, second.parent_id) == (fix_run.trace_id, fix_run.span_id)
    assert first.attributes["symphony.ticket"] == "A-1" and not first.error
    assert first.attributes["symphony.pull.url"] == pull.url
    assert first.attributes["symphony.pull.number"] == pull.number
    assert first.attributes["symphony.pull.head_sha"] == pull.head_sha
    assert first.attributes["symphony.pull.opened"] is True
    assert second.attributes["symphony.pull.opened"] is False
    assert second.attributes["symphony.pull.head_sha"] == fixed

    readings = receiver.named("symphony.follow")
    runs = {first_run.trace_id, fix_run.trace_id}
    # A reading is a trace of its own (a pull request is followed for hours), linked back.
    assert readings and all(r.parent_id == "" and r.trace_id not in runs for r in readings)
    assert all(r.attributes["symphony.pull.number"] == pull.number for r in readings)
    reds = [r for r in readings if r.attributes.get("symphony.pull.checks") == "red"]
    assert reds and all(linked_to(r, first) for r in reds)
    assert reds[0].attributes["symphony.pull.checks_failed"] == "ci"
    assert reds[0].attributes["symphony.pull.head_sha"] == pull.head_sha
    greens = [r for r in readings if r.attributes.get("symphony.pull.checks") == "green"]
    assert greens and all(linked_to(r, second) for r in greens)
    assert greens[0].attributes["symphony.pull.review"] == "approved"

    [merge] = receiver.named("symphony.merge")
    assert merge.parent_id == "" and linked_to(merge, second) and not merge.error
    assert merge.attributes["symphony.merge.answer"] == "merged"
    assert merge.attributes["symphony.pull.head_sha"] == fixed
    assert merge.attributes["symphony.merge.decision"]


async def test_a_publication_the_remote_refuses_ends_its_span_as_an_error(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = FakeClock()
    tracker = MemoryTracker(make_issue("A-1", state="Ready"))
    agent, host = ScriptedAgent(DONE), MemoryCodeHost()
    run = start(tmp_path, tracker, agent, host, clock,
                telemetry={"endpoint": receiver.url + "/v1/traces"})  # fmt: skip
    assert host.remote is not None
    hook = host.remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'branch is protected by policy' >&2\nexit 1\n")
    hook.chmod(0o755)
    try:
        await run.until(lambda: tracker.by_identifier("A-1").state == "Needs Attention")
    finally:
        await run.stop()
    [published] = receiver.named("symphony.publish")
    assert published.error and "branch is protected by policy" in published.message
    assert published.attributes["symphony.publish.outcome"] == "refused"
    assert "symphony.pull.url" not in published.attributes


async def test_a_reading_that_fails_and_a_merge_the_host_refuses_end_their_spans_as_errors(
    receiver: Receiver,
) -> None:
    tracer = tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    host = MemoryCodeHost()
    host.pulls[7] = PullRequest(7, "https://code.test/pull/7", "b", "main", PullState.OPEN, "t",
                                head_sha="a" * 40)  # fmt: skip
    published = tracer.start("symphony.publish")
    published.end()
    trace = StepTrace(tracer, published)
    masker = SecretMasker()

    read = await follow.read(host, core.ReadPullRequest("id-1", "A-1", 8), masker, trace)
    merge = core.MergePullRequest("id-1", "A-1", 7, "b" * 40, "squash", "green and approved")
    answered = await follow.merge(host, merge, masker, trace)
    tracer.shutdown()

    assert read.status is None and answered.answer is core.follow.MergeAnswer.REFUSED
    [reading] = receiver.named("symphony.follow")
    assert reading.error and reading.attributes["symphony.pull.number"] == 8
    [merging] = receiver.named("symphony.merge")
    assert merging.error and merging.message.startswith("refused: ")
    assert merging.attributes["symphony.merge.decision"] == "green and approved"
    assert merging.attributes["symphony.merge.answer"] == "refused"
    [publication] = receiver.named("symphony.publish")
    assert linked_to(reading, publication) and linked_to(merging, publication)

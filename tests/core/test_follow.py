"""The core of publishing and following a pull request: the hand-off that publishes, each
reading of the pull request judged on its head commit (merged, closed, a review, a conflict,
failed checks, pending checks) and merging by policy, one at a time per base. Pure: no I/O, an
injected clock."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from symphony import core
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
from symphony.config.repository import (
    CodeHostKind,
    FollowSettings,
    MergePolicy,
    MergeSettings,
    PublishSettings,
    RepositorySettings,
)
from symphony.config.sections import Settings
from symphony.config.stages import Report, StageMachine, StageOutcome
from symphony.core.follow import MergeAnswer, addressed_reply
from symphony.core.outcomes import MERGED
from tests.factories import WALL, make_issue, make_settings, make_stage

DONE = Report(StageOutcome.DONE, "Implemented it.")
REPOSITORY = RepositorySettings(
    CodeHostKind.GITHUB, "acme/widgets", "https://api.github.com", "t0ken", "GITHUB_TOKEN"
)
GREEN = Check("ci", CheckState.PASSED, required=True)
RED = Check("ci", CheckState.FAILED, required=True, url="https://ci/1", output="E boom")


def follow_settings(**follow: object) -> Settings:
    machine = StageMachine(
        (
            make_stage(
                "implement", ("Ready", "Rework"), on_success="Human Review", max_total_turns=10,
                publish=PublishSettings(title="{{ issue.identifier }}: {{ issue.title }}"),
            ),
        ),
        "Needs Attention",
    )  # fmt: skip
    settings = make_settings(active=("Ready", "Rework"))
    return dataclasses.replace(
        settings,
        machine=machine,
        repository=REPOSITORY,
        follow=FollowSettings(**{"on_changes_requested": "Rework", "on_merged": "Done", **follow}),  # type: ignore[arg-type]
    )


def with_merge(settings: Settings, **merge: object) -> Settings:
    policy = MergeSettings(policy=MergePolicy.WHEN_GREEN_AND_APPROVED, **merge)  # type: ignore[arg-type]
    return dataclasses.replace(settings, merge=policy)


def pull(number: int = 7, sha: str = "a" * 40, state: PullState = PullState.OPEN) -> PullRequest:
    return PullRequest(
        number, f"https://github.com/acme/widgets/pull/{number}", "symphony/A-1", "main",
        state, "A-1: Do it", head_sha=sha,
    )  # fmt: skip


def status(
    *checks: Check,
    decision: ReviewDecision = ReviewDecision.NONE,
    mergeable: bool | None = True,
    sha: str = "a" * 40,
    state: PullState = PullState.OPEN,
    **fields: object,
) -> PullStatus:
    return PullStatus(pull(sha=sha, state=state), mergeable, decision, checks, **fields)  # type: ignore[arg-type]


def published(state: core.SchedulerState, settings: Settings) -> str:
    """A ticket handed off by `implement`, its pull request published and the move confirmed."""
    issue = make_issue("A-1", state="Ready")
    (start,) = core.select_dispatches(state, [issue], settings, 0.0, WALL)
    assert isinstance(start, core.StartWorker)
    (perform,) = core.on_worker_exit(
        state, issue.id, core.WorkerExit(True, report=DONE), settings, 1.0
    )
    assert isinstance(perform, core.PerformTransition)
    core.follow.on_published(state, issue.id, pull(), WALL)
    core.on_transition_written(state, issue.id, core.WriteResult.MOVED, None, settings, 2.0, WALL)
    return issue.id


def read(
    state: core.SchedulerState,
    issue_id: str,
    seen: PullStatus,
    settings: Settings,
    now: float = 10.0,
) -> list[core.Effect]:
    return core.follow.on_pull_read(state, issue_id, seen, settings, now, WALL + timedelta(hours=1))


def moved_to(
    effects: list[core.Effect], state: core.SchedulerState, issue_id: str
) -> tuple[str, StageOutcome]:
    (perform,) = effects
    assert isinstance(perform, core.PerformTransition)
    plan = state.transitions[issue_id].plan
    return plan.target, plan.outcome


def test_a_stage_that_publishes_asks_for_its_pull_request_with_title_and_evidence() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue = make_issue("A-1", state="Ready", title="Fix the widget")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, report=DONE), settings, 1.0)
    intent = state.transitions[issue.id].plan.publish
    assert intent is not None
    assert intent.title_template == "{{ issue.identifier }}: {{ issue.title }}"
    assert "Implemented it." in intent.body and "Closes" not in intent.body
    # The same repository as the tracker: the body closes the ticket.
    closing = dataclasses.replace(
        settings, repository=dataclasses.replace(REPOSITORY, closes_tickets=True)
    )
    state = core.SchedulerState()
    core.select_dispatches(state, [issue], closing, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, report=DONE), closing, 1.0)
    body = state.transitions[issue.id].plan.publish.body  # type: ignore[union-attr]
    assert body.endswith("Closes A-1")


def test_a_refused_push_sends_the_ticket_to_escalation_with_the_remotes_words() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue = make_issue("A-1", state="Ready")
    core.select_dispatches(state, [issue], settings, 0.0, WALL)
    core.on_worker_exit(state, issue.id, core.WorkerExit(True, report=DONE), settings, 1.0)
    effects = core.on_transition_written(
        state, issue.id, core.WriteResult.REFUSED, "origin refused: pre-receive hook declined",
        settings, 2.0, WALL,
    )  # fmt: skip
    assert moved_to(effects, state, issue.id) == ("Needs Attention", StageOutcome.PUBLISH_FAILED)
    (comment,) = state.transitions[issue.id].plan.comments
    assert "pre-receive hook declined" in comment.body
    assert state.transitions[issue.id].plan.publish is None


def test_published_pull_requests_are_read_at_their_interval() -> None:
    state, settings = core.SchedulerState(), follow_settings(interval_ms=5000)
    issue_id = published(state, settings)
    record = state.pull_requests[issue_id]
    assert record.issue.state == "Human Review"  # where the daemon put it
    (effect,) = core.follow.due_reads(state, settings, 3.0)
    assert isinstance(effect, core.ReadPullRequest) and effect.number == 7
    assert core.follow.due_reads(state, settings, 3.0) == []  # one reading at a time
    assert read(state, issue_id, status(GREEN), settings, now=4.0) == []
    assert core.follow.next_read_at(state) == 9.0
    assert core.follow.due_reads(state, settings, 8.9) == []


def test_merged_on_the_host_moves_the_ticket_and_counts_the_merge() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    effects = read(state, issue_id, status(state=PullState.MERGED), settings)
    assert moved_to(effects, state, issue_id) == ("Done", StageOutcome.MERGED)
    (merged,) = [r for r in state.new_outcomes if r.kind == MERGED]
    assert merged.data["seconds"] == 3600.0 and merged.data["rework"] is False
    assert state.pull_requests[issue_id].state is PullState.MERGED
    assert core.follow.due_reads(state, settings, 100.0) == []  # no longer followed


def test_closed_unmerged_moves_to_on_closed_or_to_a_person() -> None:
    state, settings = core.SchedulerState(), follow_settings(on_closed="Cancelled")
    issue_id = published(state, settings)
    effects = read(state, issue_id, status(state=PullState.CLOSED), settings)
    assert moved_to(effects, state, issue_id) == ("Cancelled", StageOutcome.CLOSED)
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    effects = read(state, issue_id, status(state=PullState.CLOSED), settings)
    assert moved_to(effects, state, issue_id) == ("Needs Attention", StageOutcome.CLOSED)
    assert state.pull_requests[issue_id].state is PullState.CLOSED
    assert core.follow.due_reads(state, settings, 100.0) == []  # no longer followed


def test_failed_checks_start_one_fix_run_with_the_failure_while_the_ticket_waits() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    (start,) = read(state, issue_id, status(RED), settings)
    assert isinstance(start, core.StartWorker)
    assert (start.stage, start.hold_state) == ("implement", "Human Review")
    assert start.review is not None and "E boom" in start.review and "### ci" in start.review
    assert state.running[issue_id].hold_state == "Human Review"
    # While it runs nothing else is decided; the same failure is never fixed twice.
    assert read(state, issue_id, status(RED), settings) == []
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, report=DONE), settings, 20.0)
    pending = state.transitions[issue_id]
    assert pending.plan.target == "Human Review" and pending.plan.publish is not None
    core.on_transition_written(state, issue_id, core.WriteResult.MOVED, None, settings, 21.0, WALL)
    assert read(state, issue_id, status(RED), settings) == []
    assert state.pull_requests[issue_id].check_fixes == 1
    # A new head that fails again is a new failure.
    (again,) = read(state, issue_id, status(RED, sha="b" * 40), settings)
    assert isinstance(again, core.StartWorker)


def test_a_fix_run_is_not_stopped_by_its_ticket_waiting_in_review() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    read(state, issue_id, status(RED), settings)
    waiting = make_issue("A-1", state="Human Review")
    assert core.apply_refresh(state, [waiting], [issue_id], settings) == []
    moved = make_issue("A-1", state="Done")
    (stop,) = core.apply_refresh(state, [moved], [issue_id], settings)
    assert isinstance(stop, core.StopWorker)


def test_checks_that_keep_failing_escalate_after_max_check_fixes() -> None:
    state, settings = core.SchedulerState(), follow_settings(max_check_fixes=1)
    issue_id = published(state, settings)
    read(state, issue_id, status(RED), settings)
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, report=DONE), settings, 20.0)
    core.on_transition_written(state, issue_id, core.WriteResult.MOVED, None, settings, 21.0, WALL)
    effects = read(state, issue_id, status(RED, sha="b" * 40), settings)
    assert moved_to(effects, state, issue_id) == ("Needs Attention", StageOutcome.CAPPED)
    (comment,) = state.transitions[issue_id].plan.comments
    assert "1 check fix run did not settle it (follow.max_check_fixes: 1)" in comment.body
    assert "check fix 1/1 (ci)" in comment.body and "E boom" in comment.body


def test_failed_checks_move_to_a_state_when_one_is_named() -> None:
    state, settings = core.SchedulerState(), follow_settings(on_checks_failed="Rework")
    issue_id = published(state, settings)
    effects = read(state, issue_id, status(RED), settings)
    assert moved_to(effects, state, issue_id) == ("Rework", StageOutcome.CHECKS_FAILED)
    assert state.reviews[issue_id].kind == "checks"


def test_only_required_checks_count_unless_none_is_required() -> None:
    optional_red = Check("lint", CheckState.FAILED)
    assert (
        core.follow.verdict_of(
            core.follow.counted_checks((GREEN, optional_red), core.follow.ChecksScope.REQUIRED)
        )
        is core.follow.ChecksVerdict.GREEN
    )
    assert (
        core.follow.verdict_of(
            core.follow.counted_checks((optional_red,), core.follow.ChecksScope.REQUIRED)
        )
        is core.follow.ChecksVerdict.RED
    )
    assert (
        core.follow.verdict_of(
            core.follow.counted_checks((GREEN, optional_red), core.follow.ChecksScope.ALL)
        )
        is core.follow.ChecksVerdict.RED
    )
    assert (
        core.follow.verdict_of(
            core.follow.counted_checks((optional_red,), core.follow.ChecksScope.NONE)
        )
        is core.follow.ChecksVerdict.NONE
    )
    pending = Check("ci", CheckState.PENDING, required=True)
    assert core.follow.verdict_of((pending, RED)) is core.follow.ChecksVerdict.PENDING


def test_a_check_pending_past_the_timeout_is_one_comment() -> None:
    state, settings = core.SchedulerState(), follow_settings(pending_timeout_ms=60_000)
    issue_id = published(state, settings)
    pending = Check("ci", CheckState.PENDING, required=True)
    assert read(state, issue_id, status(pending), settings, now=10.0) == []
    assert read(state, issue_id, status(pending), settings, now=30.0) == []
    (comment,) = read(state, issue_id, status(pending), settings, now=71.0)
    assert isinstance(comment, core.PostComment) and comment.kind == "checks_pending"
    assert read(state, issue_id, status(pending), settings, now=200.0) == []


THREAD = ReviewThread(
    "T1", "calc.py", 12, "@@ -10,3 +10,4 @@", (ReviewComment("alice", "Handle zero here."),)
)


def test_a_review_with_open_threads_moves_to_rework_with_the_review_for_the_next_run() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    seen = status(
        GREEN, decision=ReviewDecision.CHANGES_REQUESTED, threads=(THREAD,),
        reviews=(Review("alice", "changes_requested", "Close, but not yet."),),
    )  # fmt: skip
    effects = read(state, issue_id, seen, settings)
    assert moved_to(effects, state, issue_id) == ("Rework", StageOutcome.CHANGES_REQUESTED)
    core.on_transition_written(state, issue_id, core.WriteResult.MOVED, None, settings, 11.0, WALL)
    asked = state.reviews[issue_id]
    assert asked.threads == ("T1",)
    assert "calc.py, line 12" in asked.text and "Handle zero here." in asked.text
    assert "Close, but not yet." in asked.text and "@@ -10,3" in asked.text
    # The Rework run gets it as {{ review }}, and its hand-off answers the thread.
    (start,) = core.select_dispatches(
        state, [make_issue("A-1", state="Rework")], settings, 12.0, WALL
    )
    assert isinstance(start, core.StartWorker) and start.review == asked.text
    core.on_worker_exit(state, issue_id, core.WorkerExit(True, report=DONE), settings, 20.0)
    intent = state.transitions[issue_id].plan.publish
    assert intent is not None and intent.replies == ("T1",)
    core.on_transition_written(state, issue_id, core.WriteResult.MOVED, None, settings, 21.0, WALL)
    assert issue_id not in state.reviews
    # The decision stays `changes requested` until the reviewer looks again: no second round,
    # and the daemon's own reply on the thread is not taken for new words.
    answered = dataclasses.replace(
        THREAD, comments=(*THREAD.comments, ReviewComment("bot", addressed_reply("b" * 40)))
    )
    assert read(state, issue_id, dataclasses.replace(seen, threads=(answered,)), settings) == []
    # The reviewer answers on the thread: a new round.
    again = dataclasses.replace(
        answered, comments=(*answered.comments, ReviewComment("alice", "Still wrong."))
    )
    effects = read(state, issue_id, dataclasses.replace(seen, threads=(again,)), settings)
    assert moved_to(effects, state, issue_id) == ("Rework", StageOutcome.CHANGES_REQUESTED)


def test_a_conflict_starts_a_fix_run_told_to_merge_the_base() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    (start,) = read(state, issue_id, status(GREEN, mergeable=False), settings)
    assert isinstance(start, core.StartWorker) and start.review is not None
    assert "merge it into the branch" in start.review
    assert state.reviews[issue_id].kind == "conflict"


def test_nothing_is_merged_without_a_policy() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    assert read(state, issue_id, status(GREEN, decision=ReviewDecision.APPROVED), settings) == []


@pytest.mark.parametrize(
    ("seen", "label"),
    [
        (status(GREEN), None),  # not approved
        (status(RED, decision=ReviewDecision.APPROVED), None),
        (
            status(
                Check("ci", CheckState.PENDING, required=True), decision=ReviewDecision.APPROVED
            ),
            None,
        ),
        (status(GREEN, decision=ReviewDecision.APPROVED, mergeable=None), None),
        (status(GREEN, decision=ReviewDecision.APPROVED, threads=(THREAD,)), None),
        (status(GREEN, decision=ReviewDecision.APPROVED), "automerge"),  # not labelled
    ],
)
def test_the_policy_refuses_what_is_not_green_approved_mergeable_and_labelled(
    seen: PullStatus, label: str | None
) -> None:
    state = core.SchedulerState()
    settings = with_merge(
        follow_settings(on_changes_requested=None, on_conflict="Rework"), require_label=label
    )
    issue_id = published(state, settings)
    effects = read(state, issue_id, seen, settings)
    assert not any(isinstance(e, core.MergePullRequest) for e in effects)


def test_green_and_approved_merges_at_the_head_read_and_moves_the_ticket() -> None:
    state, settings = (
        core.SchedulerState(),
        with_merge(follow_settings(), require_label="automerge"),
    )
    issue_id = published(state, settings)
    seen = status(
        GREEN, decision=ReviewDecision.APPROVED, labels=("automerge",),
        reviews=(Review("alice", "approved"),),
    )  # fmt: skip
    (merge,) = read(state, issue_id, seen, settings)
    assert isinstance(merge, core.MergePullRequest)
    assert (merge.number, merge.head_sha, merge.method) == (7, "a" * 40, "squash")
    assert "approved by alice" in merge.why and "1 passed" in merge.why
    assert read(state, issue_id, seen, settings) == []  # one merge call at a time
    effects = core.follow.on_merge_answered(
        state, issue_id, MergeAnswer.MERGED, merge.why, settings, 11.0, WALL
    )
    assert moved_to(effects, state, issue_id) == ("Done", StageOutcome.MERGED)
    (comment,) = state.transitions[issue_id].plan.comments
    assert "approved by alice" in comment.body


def test_merges_wait_for_each_other_on_one_base_and_a_refusal_is_said_once() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    first = published(state, settings)
    second_issue = make_issue("A-2", state="Ready")
    core.select_dispatches(state, [second_issue], settings, 0.0, WALL)
    core.on_worker_exit(state, second_issue.id, core.WorkerExit(True, report=DONE), settings, 1.0)
    core.follow.on_published(state, second_issue.id, pull(8), WALL)
    core.on_transition_written(
        state, second_issue.id, core.WriteResult.MOVED, None, settings, 2.0, WALL
    )
    ok = status(GREEN, decision=ReviewDecision.APPROVED)
    (merge,) = read(state, first, ok, settings)
    assert isinstance(merge, core.MergePullRequest)
    assert read(state, second_issue.id, ok, settings) == []  # the base is busy
    refused = core.follow.on_merge_answered(
        state, first, MergeAnswer.REFUSED, "Pull Request is not mergeable", settings, 12.0, WALL
    )
    (comment,) = refused
    assert isinstance(comment, core.PostComment) and "not mergeable" in comment.body
    assert state.pull_requests[second_issue.id].next_read_at == 0.0  # read again at once
    assert read(state, first, ok, settings) == []  # not again at this head
    (retry,) = read(
        state, first, status(GREEN, decision=ReviewDecision.APPROVED, sha="c" * 40), settings
    )
    assert isinstance(retry, core.MergePullRequest) and retry.head_sha == "c" * 40


def test_a_head_no_check_reported_on_is_pending_never_merged() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    approved = status(decision=ReviewDecision.APPROVED)
    for now in (10.0, 100.0, 10_000.0):  # however long nothing reports, nothing merges
        effects = read(state, issue_id, approved, settings, now=now)
        assert not any(isinstance(e, core.MergePullRequest) for e in effects)
    assert state.pull_requests[issue_id].checks.endswith("(waiting for any check to report)")


def test_a_new_head_waits_for_every_check_an_earlier_head_had() -> None:
    """A person pushes to an approved, green pull request: its required check has not been
    reported on the new head yet (CI starts seconds later), so the head is pending."""
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    lint = Check("lint", CheckState.PASSED)
    read(state, issue_id, status(GREEN, lint), settings)  # green, not approved yet
    pushed = status(lint, decision=ReviewDecision.APPROVED, sha="b" * 40)
    assert read(state, issue_id, pushed, settings, now=20.0) == []
    assert state.pull_requests[issue_id].checks == "1 passed (waiting for ci)"
    both = status(GREEN, lint, decision=ReviewDecision.APPROVED, sha="b" * 40)
    (merge,) = read(state, issue_id, both, settings, now=30.0)
    assert isinstance(merge, core.MergePullRequest) and merge.head_sha == "b" * 40


def test_nothing_merges_where_the_host_says_it_would_not() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    blocked = dataclasses.replace(
        status(GREEN, decision=ReviewDecision.APPROVED), merge_allowed=False, merge_state="blocked"
    )
    assert read(state, issue_id, blocked, settings) == []
    clean = dataclasses.replace(blocked, merge_allowed=True, merge_state="clean")
    (merge,) = read(state, issue_id, clean, settings, now=20.0)
    assert isinstance(merge, core.MergePullRequest)


def test_with_checks_none_an_approved_pull_request_merges_at_once() -> None:
    state = core.SchedulerState()
    settings = with_merge(follow_settings(checks=core.follow.ChecksScope.NONE))
    issue_id = published(state, settings)
    (merge,) = read(state, issue_id, status(RED, decision=ReviewDecision.APPROVED), settings)
    assert isinstance(merge, core.MergePullRequest)


def test_a_merge_that_failed_unclearly_is_judged_again_at_the_next_reading() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    ok = status(GREEN, decision=ReviewDecision.APPROVED)
    read(state, issue_id, ok, settings)
    assert (
        core.follow.on_merge_answered(
            state, issue_id, MergeAnswer.FAILED, "502", settings, 11.0, WALL
        )
        == []
    )
    (again,) = read(state, issue_id, ok, settings)
    assert isinstance(again, core.MergePullRequest)


def test_a_head_that_moved_under_the_merge_is_read_again_at_once_and_said_nowhere() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    ok = status(GREEN, decision=ReviewDecision.APPROVED)
    read(state, issue_id, ok, settings)
    moved = core.follow.on_merge_answered(
        state, issue_id, MergeAnswer.HEAD_MOVED, "Head branch was modified", settings, 11.0, WALL
    )
    assert moved == []
    assert issue_id in {e.issue_id for e in core.follow.due_reads(state, settings, 11.0)}
    newer = status(GREEN, decision=ReviewDecision.APPROVED, sha="c" * 40)
    (merge,) = read(state, issue_id, newer, settings)
    assert isinstance(merge, core.MergePullRequest) and merge.head_sha == "c" * 40


def test_no_decision_while_the_daemon_works_on_the_ticket() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    issue_id = published(state, settings)
    state.claimed.add(issue_id)
    assert read(state, issue_id, status(state=PullState.MERGED), settings) == []
    assert state.pull_requests[issue_id].state is PullState.OPEN


def test_a_persons_approval_on_the_review_page_lets_the_policy_merge_that_head_only() -> None:
    state, settings = core.SchedulerState(), with_merge(follow_settings())
    issue_id = published(state, settings)
    needs_approval = status(GREEN, approvals_required=1)
    assert read(state, issue_id, needs_approval, settings) == []  # nobody approved yet
    issue = make_issue("A-1", state="Human Review")
    said = core.review_actions.take(
        state, issue, core.review_actions.ReviewAction.APPROVE, settings, by="ada", now=11.0
    )
    assert isinstance(said, core.PostComment)
    assert said.body.startswith("ada approved pull request #7 at Human Review (head aaaaaaaaaaaa)")
    assert issue_id not in state.transitions  # no move: the merge moves it
    record = state.pull_requests[issue_id]
    assert record.next_read_at == 0.0  # read again now
    (merge,) = read(state, issue_id, needs_approval, settings, now=12.0)
    assert isinstance(merge, core.MergePullRequest)
    assert "approved by ada on the review page" in merge.why
    # A new head after the approval is not approved.
    record.merging = False
    assert read(state, issue_id, status(GREEN, approvals_required=1, sha="b" * 40), settings,
                now=13.0) == []  # fmt: skip


def test_without_a_merge_policy_approving_a_pull_request_moves_the_ticket_on() -> None:
    state, settings = core.SchedulerState(), follow_settings()
    published(state, settings)
    issue = make_issue("A-1", state="Human Review")
    effect = core.review_actions.take(
        state, issue, core.review_actions.ReviewAction.APPROVE, settings, by="ada", now=11.0
    )
    assert isinstance(effect, core.PerformTransition)

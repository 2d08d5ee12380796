"""A provider's limit pauses the agent kind, never the ticket (`core.limits`): the run that
met it gives its start back, its ticket continues its thread after the reset as the same
attempt, nothing starts on that agent meanwhile, and a reset the provider did not name is
probed by one run. Pure: an injected clock, no I/O."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from types import MappingProxyType

from symphony import core
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.config.claude import ClaudeSettings
from symphony.config.codex import CodexSettings
from symphony.config.notify import NoticeEvent
from symphony.config.stages import StageMachine
from symphony.core import notifications
from symphony.core.dispatch import explain_dispatch
from symphony.core.outcomes import LIMITED, RESUMED, summarize
from symphony.core.state import AgentPause, pause_from_json
from tests.factories import WALL, make_issue, make_settings, make_stage

RESET = WALL + timedelta(minutes=30)


def limited(limit: ProviderLimit) -> core.WorkerExit:
    return core.WorkerExit(
        False, core.Failure("turn 1", "usage limit", "turn_failed", core.FailureReason.AGENT_TURN,
                            limit=limit)
    )  # fmt: skip


def running(state: core.SchedulerState, settings: core.Settings, *ids: str) -> None:
    core.select_dispatches(state, [make_issue(i) for i in ids], settings, 0.0, WALL)
    for identifier in ids:
        state.running[f"id-{identifier}"].thread_id = f"thr-{identifier}"


def test_a_limit_pauses_the_agent_and_the_ticket_waits_in_its_thread_as_the_same_attempt() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1")
    ledger = state.ledgers["id-A-1"]
    assert len(ledger.starts) == 1
    effects = core.on_worker_exit(
        state, "id-A-1", limited(ProviderLimit(LimitKind.USAGE, RESET, "resets soon")), settings,
        5.0,
    )  # fmt: skip
    said, retry = effects
    assert isinstance(said, core.AgentLimited) and said.identifier == "A-1"
    assert said.pause.until == RESET and said.pause.named
    assert isinstance(retry, core.RetryScheduled)
    entry = retry.entry
    assert entry.kind is core.RetryKind.LIMITED and entry.attempt == 0
    assert entry.resume_thread_id == "thr-A-1"
    assert retry.delay_s == (RESET - WALL).total_seconds() - 5.0
    assert ledger.starts == []  # the run did nothing the provider let it do: no start counted
    assert "codex limited until" in entry.error and "usage limit: resets soon" in entry.error


def test_nothing_starts_on_a_limited_agent_until_its_named_reset_then_it_resumes() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1")
    core.on_worker_exit(
        state, "id-A-1", limited(ProviderLimit(LimitKind.RATE, RESET)), settings, 5.0
    )
    waiting = make_issue("B-1")
    plan = explain_dispatch(state, [waiting], settings, WALL + timedelta(minutes=1))
    (why,) = [w for i, w in plan if i.id == waiting.id]
    assert why is not None and why.startswith("waits: codex limited until")
    assert (
        core.select_dispatches(state, [waiting], settings, 60.0, WALL + timedelta(minutes=1)) == []
    )
    # A due retry meets the same pause: it waits again, as the same attempt.
    (retry,) = core.due_retries(state, 1e9)
    (requeued,) = core.on_retries_refreshed(
        state, [retry], [make_issue("A-1")], settings, 100.0, WALL + timedelta(minutes=1)
    )
    assert isinstance(requeued, core.RetryScheduled) and requeued.entry.attempt == 0
    assert requeued.delay_s == (RESET - WALL - timedelta(minutes=1)).total_seconds()
    assert core.limits.lift_due(state, RESET - timedelta(seconds=1)) == []
    (resumed,) = core.limits.lift_due(state, RESET)
    assert isinstance(resumed, core.AgentResumed) and resumed.agent_kind == "codex"
    assert resumed.paused_s == (RESET - WALL - timedelta(seconds=5)).total_seconds()
    started = core.select_dispatches(state, [waiting], settings, 2000.0, RESET)
    assert [e.issue.identifier for e in started if isinstance(e, core.StartWorker)] == ["B-1"]


def test_other_agents_are_not_paused() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1")
    core.on_worker_exit(
        state, "id-A-1", limited(ProviderLimit(LimitKind.USAGE, RESET)), settings, 5.0
    )
    assert core.limits.waits_for_limit(state, "codex", "id-B-1", WALL) is not None
    assert core.limits.waits_for_limit(state, "claude", "id-B-1", WALL) is None


def test_an_unnamed_reset_is_guessed_with_backoff_and_probed_by_one_run() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1")
    core.on_worker_exit(
        state, "id-A-1", limited(ProviderLimit(LimitKind.OVERLOADED)), settings, 5.0
    )
    pause = state.agent_pauses["codex"]
    assert not pause.named
    guess = core.limits.guess_s(1, LimitKind.OVERLOADED, f"codex|{pause.since.isoformat()}")
    assert pause.until == WALL + timedelta(seconds=5 + guess)  # from its end
    after = pause.until + timedelta(seconds=1)
    assert core.limits.lift_due(state, after) == []  # no named time: a probe answers instead
    # Past the guess, one run goes through; the next waits for its answer.
    started = core.select_dispatches(
        state, [make_issue("B-1"), make_issue("C-1")], settings, 200.0, after
    )
    assert [e.issue.identifier for e in started if isinstance(e, core.StartWorker)] == ["B-1"]
    assert pause.probe == "id-B-1"
    # The probe meets the limit again: the guess doubles.
    core.on_worker_exit(
        state, "id-B-1", limited(ProviderLimit(LimitKind.OVERLOADED)), settings, 210.0
    )
    again = state.agent_pauses["codex"]
    assert again.strikes == 2 and again.probe is None
    floor = 2 * core.limits.OUTAGE_BASE_S * (1 - core.limits.JITTER)
    assert again.until - again.since >= timedelta(seconds=floor)
    # The next probe ends well: the pause lifts.
    later = again.until + timedelta(seconds=1)
    (probe,) = [
        e
        for e in core.select_dispatches(state, [make_issue("C-1")], settings, 500.0, later)
        if isinstance(e, core.StartWorker)
    ]
    assert probe.issue.identifier == "C-1" and again.probe == "id-C-1"
    lifted = core.on_worker_exit(state, "id-C-1", core.WorkerExit(True), settings, 510.0)
    assert any(isinstance(e, core.AgentResumed) for e in lifted)
    assert "codex" not in state.agent_pauses


def test_a_stopped_run_is_no_limit_and_an_ordinary_failure_still_backs_off() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1")
    failed = core.on_worker_exit(
        state, "id-A-1", core.WorkerExit(False, core.Failure("turn 1", "boom")), settings, 5.0
    )
    (retry,) = failed
    assert isinstance(retry, core.RetryScheduled) and retry.entry.kind is core.RetryKind.FAILURE
    assert not state.agent_pauses


def test_a_pause_survives_the_store_as_json() -> None:
    pause = AgentPause("codex", LimitKind.USAGE, "resets at 14:00", WALL, RESET, True, 2)
    again = pause_from_json(pause.to_json())
    assert again == pause


def test_with_headroom_a_nearly_spent_window_pauses_new_runs_until_it_resets() -> None:
    state = core.SchedulerState()
    reset = int((WALL + timedelta(hours=1)).timestamp())
    report = {
        "primary": {"usedPercent": 96, "resetsAt": reset, "windowDurationMins": 300},
        "secondary": {"usedPercent": 40, "resetsAt": reset + 3600},
        "planType": "plus",
    }
    assert core.limits.near_the_wall(state, "codex", report, None, WALL) == []  # off by default
    assert core.limits.near_the_wall(state, "codex", report, 97, WALL) == []  # below it
    (said,) = core.limits.near_the_wall(state, "codex", report, 95, WALL)
    assert isinstance(said, core.AgentLimited)
    pause = state.agent_pauses["codex"]
    assert pause.named and pause.until.timestamp() == reset
    assert "96% used (agent.rate_limit_headroom: 95)" in pause.describe()
    # Said once: a later report while paused changes nothing.
    assert core.limits.near_the_wall(state, "codex", report, 95, WALL) == []
    # A window that already reset pauses nothing.
    assert core.limits.near_the_wall(core.SchedulerState(), "codex", report, 95,
                                     WALL + timedelta(hours=3)) == []  # fmt: skip


def test_a_pause_and_its_lifting_are_recorded_once_and_become_notices() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1")
    core.on_worker_exit(
        state, "id-A-1", limited(ProviderLimit(LimitKind.USAGE, RESET, "plan limit")), settings,
        5.0,
    )  # fmt: skip
    core.limits.lift_due(state, RESET)
    records = [r for r in state.new_outcomes if r.kind in (LIMITED, RESUMED)]
    assert [r.kind for r in records] == [LIMITED, RESUMED]
    said = notifications.from_outcomes(records)
    assert [n.event for n in said] == [NoticeEvent.LIMITED, NoticeEvent.RESUMED]
    assert said[0].title == "codex limited until 00:30 UTC (usage limit)"
    assert said[0].detail == "plan limit" and said[0].identifier == "A-1"
    assert said[1].title == "codex resumed after 30 min limited by its provider"
    assert summarize(records).limited_s == (RESET - WALL - timedelta(seconds=5)).total_seconds()


def test_runs_already_under_way_meeting_the_same_wall_do_not_lengthen_the_guess() -> None:
    state, settings = core.SchedulerState(), make_settings()
    running(state, settings, "A-1", "B-1", "C-1")
    for at, issue_id in ((5.0, "id-A-1"), (6.0, "id-B-1"), (7.0, "id-C-1")):
        core.on_worker_exit(
            state, issue_id, limited(ProviderLimit(LimitKind.OVERLOADED)), settings, at
        )
    pause = state.agent_pauses["codex"]
    assert pause.strikes == 1
    # The latest of the three guesses stands; no notice beyond the first.
    guess = core.limits.guess_s(1, LimitKind.OVERLOADED, f"codex|{pause.since.isoformat()}")
    assert pause.until == WALL + timedelta(seconds=7 + guess)
    assert [r.kind for r in state.new_outcomes if r.kind == LIMITED] == [LIMITED]
    assert sorted(state.retry_attempts) == ["id-A-1", "id-B-1", "id-C-1"]


def test_a_stage_runs_on_its_fallback_agent_only_while_its_own_is_limited() -> None:
    stage = make_stage("implement", ("Todo",), fallback_agent="claude")
    settings = dataclasses.replace(
        make_settings(active=("Todo",)),
        machine=StageMachine((stage,), "Needs Attention"),
        agents=MappingProxyType({"codex": CodexSettings(), "claude": ClaudeSettings()}),
    )
    state = core.SchedulerState()
    running(state, settings, "A-1")
    assert state.running["id-A-1"].agent_kind == "codex"  # its own, while it is not limited
    core.on_worker_exit(
        state, "id-A-1", limited(ProviderLimit(LimitKind.USAGE, RESET)), settings, 5.0
    )
    later = WALL + timedelta(minutes=1)
    (start,) = [
        e
        for e in core.select_dispatches(state, [make_issue("B-1")], settings, 60.0, later)
        if isinstance(e, core.StartWorker)
    ]
    entry = state.running["id-B-1"]
    assert start.agent_kind == entry.agent_kind == "claude"
    assert entry.label == "first run (on claude while codex is limited)"
    # The ticket that met the limit goes on too, on the fallback, in a thread of its own.
    (retry,) = core.due_retries(state, 1e9)
    (resumed,) = [
        e for e in core.on_retries_refreshed(
            state, [retry], [make_issue("A-1")], settings, 70.0, later
        ) if isinstance(e, core.StartWorker)
    ]  # fmt: skip
    assert resumed.agent_kind == "claude" and resumed.resume_thread_id is None
    # After the reset, new runs are the stage's own again.
    core.limits.lift_due(state, RESET)
    core.select_dispatches(state, [make_issue("C-1")], settings, 2000.0, RESET)
    assert state.running["id-C-1"].agent_kind == "codex"


def test_a_guessed_wait_doubles_to_its_cap_and_is_spread_so_daemons_do_not_return_in_step() -> None:
    guess = core.limits.guess_s
    low, high = 1 - core.limits.JITTER, 1 + core.limits.JITTER
    # An outage is guessed shorter than a usage limit, and each doubles per strike to the cap.
    for kind, base in ((LimitKind.OUTAGE, core.limits.OUTAGE_BASE_S),
                       (LimitKind.RATE, core.limits.PROBE_BASE_S)):  # fmt: skip
        for strikes in (1, 2, 3, 40):
            expected = min(base * 2 ** (strikes - 1), core.limits.PROBE_MAX_S)
            assert expected * low <= guess(strikes, kind, "codex|a") <= expected * high
    # The same pause guesses the same; pauses begun elsewhere or at another time spread out.
    assert guess(1, LimitKind.OUTAGE, "codex|a") == guess(1, LimitKind.OUTAGE, "codex|a")
    spread = {round(guess(1, LimitKind.OUTAGE, f"codex|{n}"), 3) for n in range(50)}
    assert len(spread) > 40
    assert max(spread) - min(spread) > core.limits.OUTAGE_BASE_S * core.limits.JITTER


def test_a_pause_met_on_the_same_account_elsewhere_is_taken_over_and_lifts_with_it() -> None:
    state = core.SchedulerState()
    later = WALL + timedelta(minutes=5)
    theirs = AgentPause("codex", LimitKind.OVERLOADED, "", WALL, later, named=False)
    (limited_effect,) = core.limits.adopt(state, [theirs], WALL)
    assert isinstance(limited_effect, core.AgentLimited)
    mine = state.agent_pauses["codex"]
    assert mine.shared and mine.until == later and "another workflow" in mine.describe()
    assert core.limits.adopt(state, [theirs], WALL) == []  # nothing new, nothing said
    # Past a guessed reset the workflow that met it probes; here every run still waits.
    assert core.limits.waits_for_limit(state, "codex", "id-A-1", later + timedelta(hours=1))
    # The other lifts it: so does this one, without a notice of its own.
    (resumed,) = core.limits.adopt(state, [], later)
    assert isinstance(resumed, core.AgentResumed) and "codex" not in state.agent_pauses
    assert state.new_outcomes == []
    # A pause met here governs itself; a named one past its reset is not taken over.
    own = AgentPause("codex", LimitKind.USAGE, "", WALL, WALL + timedelta(minutes=1), True)
    state.agent_pauses["codex"] = own
    assert core.limits.adopt(state, [theirs], WALL) == []
    assert state.agent_pauses["codex"] is own
    del state.agent_pauses["codex"]
    due = AgentPause("codex", LimitKind.USAGE, "", WALL, WALL, named=True)
    assert core.limits.adopt(state, [due], WALL + timedelta(seconds=1)) == []

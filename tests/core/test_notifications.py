"""What a person is told, where and when (`core.notifications`): pure, on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from symphony.config.notify import Channel, ChannelKind, NoticeEvent, NotifySettings
from symphony.config.stages import StageMachine
from symphony.core import notifications
from symphony.core.notifications import Delivery, Notice, Unhealthy
from symphony.core.outcomes import CLOSED, ESCALATED, HANDOFF, MERGED, OutcomeRecord
from tests.factories import make_stage

AT = datetime(2026, 12, 4, 10, 7, 30, tzinfo=UTC)


def channels(*specs: tuple[str, frozenset[NoticeEvent], int]) -> NotifySettings:
    return NotifySettings(
        tuple(Channel(name, ChannelKind.WEBHOOK, events, digest, url="http://127.0.0.1:9/")
              for name, events, digest in specs)
    )  # fmt: skip


def test_hand_offs_escalations_and_merges_become_notices_and_nothing_else_does() -> None:
    records = [
        OutcomeRecord(AT, HANDOFF, "id-1", "ABC-1", {"stage": "plan", "state": "Plan Review"}),
        OutcomeRecord(AT, HANDOFF, "id-2", "ABC-2",
                      {"stage": "implement", "state": "Human Review", "rework": True}),
        OutcomeRecord(AT, ESCALATED, "id-3", "ABC-3",
                      {"stage": "implement", "outcome": "verify_failed",
                       "state": "Needs Attention", "reason": "pytest failed 3 times"}),
        OutcomeRecord(AT, ESCALATED, "id-4", "ABC-4", {"outcome": "closed", "state": "Todo"}),
        OutcomeRecord(AT, MERGED, "id-5", "ABC-5", {"number": 12}),
        OutcomeRecord(AT, CLOSED, "id-6", "ABC-6", {}),
    ]  # fmt: skip
    machine = StageMachine(
        (make_stage("plan", ("Todo",), on_success="Plan Review"),
         make_stage("implement", ("Ready",), evidence=True)),
        "Needs Attention",
    )  # fmt: skip
    plan, diff, escalated, merged = notifications.from_outcomes(records, machine)
    assert plan.event is NoticeEvent.REVIEW_WAITING
    assert plan.title == "ABC-1: its plan waits for your review in Plan Review"
    assert plan.key == f"review_waiting:id-1:{AT.isoformat()}"
    assert diff.title == "ABC-2: its changes wait for your review in Human Review"
    assert "sent back" in diff.detail
    assert escalated.event is NoticeEvent.ESCALATED
    assert escalated.title == "ABC-3 needs a person: verify failed in stage implement"
    assert escalated.detail == "pytest failed 3 times" and escalated.state == "Needs Attention"
    assert merged.title == "ABC-5: pull request #12 merged" and merged.identifier == "ABC-5"
    # A notice survives its JSON round trip (the outbox keeps it so).
    assert Notice.from_json(escalated.to_json()) == escalated


def test_each_channel_gets_the_events_it_asked_for_and_a_digest_waits_for_its_window() -> None:
    (notice,) = notifications.from_outcomes(
        [OutcomeRecord(AT, HANDOFF, "id-1", "ABC-1", {"stage": "plan", "state": "Plan Review"})]
    )
    settings = channels(
        ("now", frozenset(NoticeEvent), 0),
        ("merges", frozenset({NoticeEvent.MERGED}), 0),
        ("digest", frozenset(NoticeEvent), 15),
    )
    now, digest = notifications.route([notice], settings)
    assert (now.channel, now.due_at) == ("now", AT)
    # 10:07:30 falls in the window 10:00-10:15: it leaves at 10:15 with everything of it.
    assert (digest.channel, digest.due_at) == ("digest", AT.replace(minute=15, second=0))
    assert notifications.digest_due(AT.replace(minute=14, second=59), 15) == digest.due_at
    assert notifications.digest_due(AT.replace(minute=15, second=0), 15) == AT.replace(
        minute=30, second=0
    )


def test_a_failed_delivery_backs_off_doubling_up_to_a_cap() -> None:
    delays = [(notifications.retry_at(AT, n) - AT).total_seconds() for n in range(1, 10)]
    assert delays[:4] == [10, 20, 40, 80]
    assert delays[-1] == notifications.RETRY_MAX_S and sorted(delays) == delays


def test_due_deliveries_become_one_message_each_or_one_digest_per_channel() -> None:
    settings = channels(("now", frozenset(NoticeEvent), 0), ("digest", frozenset(NoticeEvent), 5))
    notices = [
        Notice(f"k{n}", NoticeEvent.REVIEW_WAITING, AT + timedelta(seconds=n), f"t{n}")
        for n in (2, 1)
    ]
    due = [Delivery(c, n, AT) for n in notices for c in ("now", "digest", "removed")]
    messages = notifications.batches(due, settings)
    assert [(name, [d.notice.key for d in batch]) for name, batch in messages] == [
        ("now", ["k1"]), ("now", ["k2"]), ("digest", ["k1", "k2"]),
    ]  # fmt: skip


def test_unhealthy_is_said_once_per_episode_and_the_tracker_only_after_its_grace() -> None:
    watch = Unhealthy()
    after = {"tracker": timedelta(minutes=5)}
    failing = {"tracker": "connection refused", "store": None, "workflow": None}
    assert watch.observe(failing, AT, after=after) == []
    assert watch.observe(failing, AT + timedelta(minutes=4), after=after) == []
    (said,) = watch.observe(failing, AT + timedelta(minutes=5), after=after)
    assert said.event is NoticeEvent.UNHEALTHY and said.detail == "connection refused"
    assert said.key == f"unhealthy:tracker:{AT.isoformat()}"
    assert watch.observe(failing, AT + timedelta(minutes=9), after=after) == []
    # A rejected WORKFLOW.md is said at once; the tracker's recovery ends its episode.
    (rejected,) = watch.observe(
        {"tracker": None, "workflow": "line 3: bad"}, AT + timedelta(minutes=10), after=after
    )
    assert "WORKFLOW.md was rejected" in rejected.title
    later = AT + timedelta(minutes=20)
    assert watch.observe({"tracker": "timeout"}, later, after=after) == []
    (again,) = watch.observe({"tracker": "timeout"}, later + timedelta(minutes=5), after=after)
    assert again.key == f"unhealthy:tracker:{later.isoformat()}" != said.key

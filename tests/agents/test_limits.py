"""Which agent failures are a provider's limit, read from each protocol's words: codex's
`codexErrorInfo` and rate-limit windows, Claude Code's error results, ACP error messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from symphony.agents import acp, claude, codex
from symphony.agents.limits import reset_in_text
from symphony.base.limits import LimitKind

NOW = datetime(2026, 12, 6, 4, 0, tzinfo=UTC)
SOON = NOW + timedelta(hours=1)
LATER = NOW + timedelta(days=3)


def epoch(when: datetime) -> int:
    return int(when.timestamp())


@pytest.mark.parametrize(
    ("info", "kind"),
    [
        ("usageLimitExceeded", LimitKind.USAGE),
        ("rateLimitExceeded", LimitKind.RATE),
        ("serverOverloaded", LimitKind.OVERLOADED),
        ("flexUnavailable", LimitKind.OVERLOADED),
        ("policyCapacityUnavailable", LimitKind.OVERLOADED),
        ("internalServerError", LimitKind.OUTAGE),
        ({"responseTooManyFailedAttempts": {"httpStatusCode": 429}}, LimitKind.RATE),
        ({"httpConnectionFailed": {"httpStatusCode": 529}}, LimitKind.OVERLOADED),
        ({"httpConnectionFailed": {"httpStatusCode": 503}}, LimitKind.OUTAGE),
        ({"httpConnectionFailed": {"httpStatusCode": None}}, LimitKind.OUTAGE),
        ({"responseStreamConnectionFailed": {}}, LimitKind.OUTAGE),
        ({"responseStreamDisconnected": {"httpStatusCode": 502}}, LimitKind.OUTAGE),
        ({"responseStreamConnectionFailed": {"httpStatusCode": 429}}, LimitKind.RATE),
        # The work's or the setup's failures: no limit.
        ("contextWindowExceeded", None),
        ("sessionBudgetExceeded", None),
        ("badRequest", None),
        ("unauthorized", None),
        ("cyberPolicy", None),
        ("other", None),
        (None, None),
        ("somethingNew", None),
        ({"httpConnectionFailed": {"httpStatusCode": 401}}, None),
        ({"httpConnectionFailed": {"httpStatusCode": "500"}}, None),
        ({"activeTurnNotSteerable": {"turnKind": "review"}}, None),
        ([1, 2], None),
    ],
)
def test_codex_error_info_names_the_limit(info: Any, kind: LimitKind | None) -> None:
    limit = codex._limit_of(info, "the provider's words", {}, NOW)
    assert (limit.kind if limit else None) is kind
    if limit is not None:
        assert limit.detail == "the provider's words" and limit.resets_at is None


def window(used: int, resets: datetime | None) -> dict[str, Any]:
    return {"usedPercent": used, "windowDurationMins": 300, "resetsAt": resets and epoch(resets)}


@pytest.mark.parametrize(
    ("primary", "secondary", "expected"),
    [
        (window(100, SOON), window(40, LATER), SOON),  # the used-up window
        (window(60, SOON), window(100, LATER), LATER),
        (window(100, SOON), window(100, LATER), LATER),  # both spent: the later frees it
        (window(90, SOON), window(40, LATER), LATER),  # none spent: the latest named
        (window(100, None), window(40, SOON), SOON),
        (window(100, NOW - timedelta(minutes=1)), None, None),  # a reset already past
        (None, None, None),
    ],
)
def test_codex_usage_limit_resets_with_the_spent_window(
    primary: Any, secondary: Any, expected: datetime | None
) -> None:
    snapshot = {"limitId": "codex", "primary": primary, "secondary": secondary}
    usage = codex._limit_of("usageLimitExceeded", "", snapshot, NOW)
    rate = codex._limit_of("rateLimitExceeded", "", snapshot, NOW)
    overloaded = codex._limit_of("serverOverloaded", "", snapshot, NOW)
    assert usage is not None and usage.resets_at == expected
    assert rate is not None and rate.resets_at == expected
    assert overloaded is not None and overloaded.resets_at is None  # windows are not capacity


def test_a_reset_is_read_from_an_iso_time_or_an_epoch_near_now() -> None:
    assert reset_in_text("limit reached|" + str(epoch(SOON)), NOW) == SOON
    assert reset_in_text("resets at 2026-12-06T05:00:00Z", NOW) == SOON
    assert reset_in_text("resets at 2026-12-06 07:00:00+02:00", NOW) == SOON
    assert reset_in_text("resets at 2026-12-06T05:00", NOW) == SOON  # no offset: UTC
    # A number far from now is an id, not a time; a clock time without a date is not read.
    assert reset_in_text("request 1000000000 failed", NOW) is None
    assert reset_in_text("try again at 5:02 AM", NOW) is None
    assert reset_in_text("", NOW) is None


def retry(error: str, status: int | None = None, delay_ms: int = 600) -> claude._Retry:
    return claude._Retry(error, status, delay_ms)


@pytest.mark.parametrize(
    ("result", "last_retry", "kind"),
    [
        ({"api_error_status": 429, "result": "API Error: 429 rate limited"}, None, LimitKind.RATE),
        (
            {"api_error_status": 429, "result": "Claude AI usage limit reached|1800000000"},
            None,
            LimitKind.USAGE,
        ),
        ({"result": "Claude AI usage limit reached|1800000000"}, None, LimitKind.USAGE),
        ({"api_error_status": 529, "result": "API Error: 529 ..."}, None, LimitKind.OVERLOADED),
        (
            {"api_error_status": 500, "result": 'API Error: 500 {"type":"overloaded_error"}'},
            None,
            LimitKind.OVERLOADED,
        ),
        ({"api_error_status": 500, "result": "API Error: 500 fake"}, None, LimitKind.OUTAGE),
        ({"api_error_status": 503, "result": "upstream"}, None, LimitKind.OUTAGE),
        ({"result": "API Error: 502 Bad Gateway"}, None, LimitKind.OUTAGE),
        (
            {"terminal_reason": "api_error", "result": "the model failed"},
            retry("overloaded", 529),
            LimitKind.OVERLOADED,
        ),
        (
            {"terminal_reason": "api_error", "result": "the model failed"},
            retry("server_error", 500),
            LimitKind.OUTAGE,
        ),
        ({"result": "API Error: Connection refused"}, retry("unknown"), LimitKind.OUTAGE),
        # Ordinary failures: a bad request or key, or a turn that failed otherwise after a
        # retry that had succeeded.
        ({"api_error_status": 401, "result": "API Error: 401"}, retry("rate_limit"), None),
        ({"api_error_status": 400, "result": "API Error: 400 bad"}, None, None),
        ({"subtype": "error_max_turns", "result": "max turns"}, retry("overloaded"), None),
        ({"result": "API Error: 403 forbidden"}, retry("authentication_failed"), None),
    ],
)
def test_claude_error_results_name_the_limit(
    result: dict[str, Any], last_retry: claude._Retry | None, kind: LimitKind | None
) -> None:
    limit = claude._limit_of(result, result.get("result", ""), last_retry, NOW)
    assert (limit.kind if limit else None) is kind


def test_claude_usage_limit_resets_at_the_epoch_it_names() -> None:
    text = f"Claude AI usage limit reached|{epoch(SOON)}"
    limit = claude._limit_of({"api_error_status": 429, "result": text}, text, None, NOW)
    assert limit is not None and limit.resets_at == SOON


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("session/prompt failed: Internal error: API Error: 429 {} (code -32603)", LimitKind.RATE),
        (
            "session/prompt failed: Internal error: API Error: 429 usage limit reached|1800000000",
            LimitKind.USAGE,
        ),
        ("Internal error: API Error: 529 {...}", LimitKind.OVERLOADED),
        ("Internal error: Overloaded", LimitKind.OVERLOADED),
        ("Internal error: API Error: 500 {...}", LimitKind.OUTAGE),
        ("Internal error: API Error: got status: 503 Service Unavailable", LimitKind.OUTAGE),
        ("Internal error: API Error: 400 {...}", None),
        ("Internal error: boom", None),
    ],
)
def test_acp_error_messages_name_the_limit(message: str, kind: LimitKind | None) -> None:
    limit = acp._limit_of(message)
    assert (limit.kind if limit else None) is kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Claude Code's clock, rounded down to the minute: the window is open by its end.
        ("You've hit your 5-hour limit · resets 6:58am (UTC)", datetime(2026, 12, 6, 6, 59)),
        ("resets 5am (UTC)", datetime(2026, 12, 6, 5, 1)),
        ("resets 3am (UTC)", datetime(2026, 12, 7, 3, 1)),  # past today: tomorrow's
        # 04:00 UTC is 23:00 the day before in New York.
        ("resets 3:56am (America/New_York)", datetime(2026, 12, 6, 8, 57)),
        ("resets 11:30pm (America/New_York)", datetime(2026, 12, 6, 4, 31)),
        ("You've hit your weekly limit · resets Dec 9, 6:56am (UTC)", datetime(2026, 12, 9, 6, 57)),
        ("resets Jan 2, 1pm (UTC)", datetime(2027, 1, 2, 13, 1)),  # the next one named
        ("resets 6:58am (Mars/Olympus)", None),
        ("resets 13pm (UTC)", None),
        ("resets Foo 9, 6am (UTC)", None),
    ],
)
def test_claude_codes_reset_clock_is_read_in_its_zone(text: str, expected: datetime | None) -> None:
    assert reset_in_text(text, NOW) == (expected and expected.replace(tzinfo=UTC))


REFUSED_WINDOW = {"status": "rejected", "resetsAt": epoch(SOON), "rateLimitType": "five_hour"}
SPENT = "You've hit your 5-hour limit · resets 4:30am (UTC)"


def test_claude_spent_window_is_a_usage_limit_until_its_reset_epoch() -> None:
    """Claude Code 2.1.332 on a subscription's refused window: `api_error: usage_limit_reached`
    and the window's `resetsAt` in its `rate_limit_event`, the minute in its words."""
    result = {"api_error_status": 429, "api_error": "usage_limit_reached", "result": SPENT}
    with_epoch = claude._limit_of(result, SPENT, None, NOW, rejected=REFUSED_WINDOW)
    words_only = claude._limit_of(result, SPENT, retry("rate_limit"), NOW)
    assert with_epoch is not None and with_epoch.kind is LimitKind.USAGE
    assert with_epoch.resets_at == SOON and with_epoch.detail == SPENT
    assert words_only is not None and words_only.kind is LimitKind.USAGE
    assert words_only.resets_at == datetime(2026, 12, 6, 4, 31, tzinfo=UTC)
    # A refused window already past names no reset; the words still do.
    stale = {**REFUSED_WINDOW, "resetsAt": epoch(NOW - timedelta(hours=1))}
    late = claude._limit_of(result, SPENT, None, NOW, rejected=stale)
    assert late is not None and late.resets_at == words_only.resets_at


@pytest.mark.parametrize(
    ("result", "kind"),
    [
        # The words alone, as a text-only 429 of Claude Code 2.1.332 and older shapes say it.
        ({"result": "API Error: Request rejected (429) · rate limited"}, LimitKind.RATE),
        ({"api_error_status": 429, "result": SPENT}, LimitKind.USAGE),
        ({"result": SPENT}, LimitKind.USAGE),
        ({"result": "API Error: Request rejected (400) · bad"}, None),
    ],
)
def test_claude_words_name_the_status_and_a_spent_window(
    result: dict[str, Any], kind: LimitKind | None
) -> None:
    limit = claude._limit_of(result, result["result"], None, NOW)
    assert (limit.kind if limit else None) is kind


def test_acp_passes_on_claudes_spent_window_with_its_reset_clock() -> None:
    message = (
        "session/prompt failed: Internal error: You've hit your session limit · resets 7am (UTC)"
        " (code -32603)"
    )
    limit = acp._limit_of(message, NOW)
    assert limit is not None and limit.kind is LimitKind.USAGE
    assert limit.resets_at == datetime(2026, 12, 6, 7, 1, tzinfo=UTC)

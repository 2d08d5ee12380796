"""Reading a provider's limit out of what an agent said, for the protocols that say it in words.

Codex names its errors (`codexErrorInfo`) and reads them in `symphony.agents.codex`; Claude Code
and ACP agents pass on the model server's HTTP status and text (`API Error: 429 ...`), which are
read here, and a subscription's spent window in words (`You've hit your 5-hour limit · resets
6:58am (UTC)`, measured on Claude Code 2.1.332 and the Agent SDK 2.1.83 that claude-agent-acp
runs). The mapping is deliberately narrow: only a status that is the provider's, not the
work's, is a limit (429 rate, 529 overloaded, other 5xx an outage); 400 and 401 stay ordinary
failures, since pausing a whole agent kind for a bad request or a bad key would hide the fault.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from symphony.base.limits import LimitKind

_USAGE_WORDS = re.compile(
    r"usage[ _-]limit|quota|credits? (?:are |is )?(?:depleted|exhausted|used up)|out of credits"
    r"|hit your (?:[\w'-]+ ){0,3}limit",
    re.IGNORECASE,
)
_API_STATUS = (
    re.compile(r"API Error:?\s*(\d{3})\b", re.IGNORECASE),
    # Claude Code 2.1.332: `API Error: Request rejected (429) · <the server's message>`.
    re.compile(r"API Error:?\s*Request rejected \((\d{3})\)", re.IGNORECASE),
    # Gemini CLI's words for the same: `API Error: got status: 429 Too Many Requests`.
    re.compile(r"\bstatus(?: code)?:?\s*(\d{3})\b", re.IGNORECASE),
)
_OVERLOADED = re.compile(r"\boverloaded", re.IGNORECASE)
_ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
_EPOCH = re.compile(r"(?<![\d.])(\d{10})(?:\.\d+)?(?![\d])")
_CLOCK_RESET = re.compile(
    r"resets (?:(?P<month>[A-Z][a-z]{2}) (?P<day>\d{1,2}), )?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?(?P<half>am|pm) \((?P<zone>[\w/+-]+)\)",
    re.IGNORECASE,
)
"""Claude Code's words for when a subscription's window resets: `resets 7am (UTC)`, `resets
6:58am (America/New_York)`, `resets Dec 9, 6:56am (UTC)` (a later day), in the zone it ran in."""
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

_PAST_SLACK = timedelta(days=1)
_FUTURE_SPAN = timedelta(days=62)
"""A time read from free text counts only near now: a usage window resets within weeks, and a
ten-digit number far from now is an id, not a reset."""


def kind_of_status(status: int | None) -> LimitKind | None:
    """The limit an HTTP status from the model server means; None for any other status."""
    if status == 429:
        return LimitKind.RATE
    if status == 529:
        return LimitKind.OVERLOADED
    if status is not None and 500 <= status <= 599:
        return LimitKind.OUTAGE
    return None


def api_error_status(text: str) -> int | None:
    """The status of an `API Error: NNN ...` text (Claude Code's words, passed on by ACP)."""
    for pattern in _API_STATUS:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def names_usage_limit(text: str) -> bool:
    """Whether the provider's words say the account's quota is spent, not a momentary rate."""
    return bool(_USAGE_WORDS.search(text))


def names_overload(text: str) -> bool:
    return bool(_OVERLOADED.search(text))


def from_epoch(value: object) -> datetime | None:
    """A unix time in seconds as a UTC datetime; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def reset_in_text(text: str, now: datetime | None = None) -> datetime | None:
    """A reset time the provider wrote into its message: an ISO 8601 time (UTC when it names no
    offset), a unix epoch in seconds (`Claude AI usage limit reached|1767225600`, older Claude
    Code) or Claude Code's clock time (`resets 6:58am (UTC)`), if it lies near `now`; None when
    the text names none."""
    now = now or datetime.now(UTC)
    found: list[datetime] = []
    for clock in _CLOCK_RESET.finditer(text):
        when = _clock_reset(clock, now)
        if when is not None:
            found.append(when)
    for match in _ISO_TIME.finditer(text):
        try:
            when = datetime.fromisoformat(match.group(0).replace(" ", "T", 1))
        except ValueError:
            continue
        found.append(when if when.tzinfo is not None else when.replace(tzinfo=UTC))
    for match in _EPOCH.finditer(text):
        epoch = from_epoch(int(match.group(1)))
        if epoch is not None:
            found.append(epoch)
    for when in found:
        if now - _PAST_SLACK <= when <= now + _FUTURE_SPAN:
            return when.astimezone(UTC)
    return None


def _clock_reset(match: re.Match[str], now: datetime) -> datetime | None:
    """The next time after `now` a `resets 6:58am (UTC)` names. Claude shows the minute the
    reset falls in, rounded down (a reset at 6:58:42 reads `6:58am`), so the window is taken
    to reset when that minute ends: never before the provider lets a request through."""
    try:
        zone = ZoneInfo(match["zone"])
    except (ZoneInfoNotFoundError, ValueError):
        return None
    hour, minute = int(match["hour"]), int(match["minute"] or 0)
    if not 1 <= hour <= 12 or minute > 59:
        return None
    clock = time(hour % 12 + (12 if match["half"].lower() == "pm" else 0), minute)
    local = now.astimezone(zone)
    days: list[date] = []
    if match["month"] is None:
        days = [local.date(), local.date() + timedelta(days=1)]
    elif match["month"].lower() in _MONTHS:
        month = _MONTHS.index(match["month"].lower()) + 1
        for year in (local.year, local.year + 1):
            try:
                days.append(date(year, month, int(match["day"])))
            except ValueError:
                return None
    for day in days:
        ends = datetime.combine(day, clock, zone) + timedelta(minutes=1)
        if ends > now:
            return ends.astimezone(UTC)
    return None


def kind_of_api_error(text: str) -> LimitKind | None:
    """The limit an agent's `API Error: NNN ...` text names (ACP agents pass Claude's words
    on): 429 a rate limit or, when it says so, a usage limit; 529, or `overloaded` with a 5xx or
    no status, an overload; another 5xx an outage. Without a status, words that say the quota
    is spent (`You've hit your session limit · resets 7am (UTC)`) are a usage limit."""
    status = api_error_status(text)
    kind = kind_of_status(status)
    if kind is LimitKind.RATE and names_usage_limit(text):
        return LimitKind.USAGE
    if status is None and names_usage_limit(text):
        return LimitKind.USAGE
    if (kind is LimitKind.OUTAGE or status is None) and names_overload(text):
        return LimitKind.OVERLOADED
    return kind

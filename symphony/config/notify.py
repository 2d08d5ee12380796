"""`notify:`: the channels that tell a person when they are needed.

```yaml
notify:
  review_url: https://symphony.example.com   # where messages link (default: the server's)
  unhealthy_after_minutes: 5
  channels:
    - kind: slack            # a Slack or Mattermost incoming webhook
      url: $SLACK_WEBHOOK_URL
      events: [review_waiting, escalated]
      digest_minutes: 30
    - kind: webhook          # JSON, signed with HMAC-SHA256 in X-Symphony-Signature
      url: https://hooks.example.com/symphony
      secret: $NOTIFY_SECRET
    - kind: email            # SMTP, STARTTLS unless `starttls: false`
      smtp: {host: smtp.example.com, port: 587, username: bot, password: $SMTP_PASSWORD}
      from: symphony@example.com
      to: [team@example.com]
```

The model and its parser are here; `symphony.notify` sends, `symphony.core.notifications`
decides what is sent where and when.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from symphony.config.fields import (
    INVALID_CONFIG,
    ConfigError,
    env_reference,
    integer,
    resolve_path,
    resolve_secret,
)

NOTIFY_KEYS = ("channels", "review_url", "unhealthy_after_minutes")
CHANNEL_KEYS = (
    "kind", "name", "url", "secret", "events", "digest_minutes", "smtp", "from", "to",
)  # fmt: skip
SMTP_KEYS = ("host", "port", "username", "password", "starttls", "ca_file", "timeout_s")


class NoticeEvent(enum.StrEnum):
    REVIEW_WAITING = "review_waiting"
    """A plan or a diff was handed to a person."""
    ESCALATED = "escalated"
    """A ticket went to a person because the daemon could not go on (with the reason)."""
    MERGED = "merged"
    """A pull request the daemon followed was merged."""
    UNHEALTHY = "unhealthy"
    """The tracker unreachable for a while, the store failing, WORKFLOW.md rejected."""
    LIMITED = "limited"
    """An agent's provider refused it (a usage or rate limit): nothing starts on it until the
    reset."""
    RESUMED = "resumed"
    """A limited agent's pause lifted: its tickets go on."""


class ChannelKind(enum.StrEnum):
    SLACK = "slack"
    WEBHOOK = "webhook"
    EMAIL = "email"


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """How an email channel reaches its mail server (`smtp:`): address, login, TLS, timeout."""

    host: str
    port: int = 587
    username: str | None = None
    password: str | None = None
    starttls: bool = True
    ca_file: Path | None = None
    """Trust this certificate (a private mail relay) instead of the system's."""
    timeout_s: int = 30


@dataclass(frozen=True, slots=True)
class Channel:
    """One of `notify.channels`: where notices go (a Slack or Mattermost webhook, a signed JSON
    webhook, or email), which events it takes, and whether they wait for a digest."""

    name: str
    """Unique among the channels: how the store, the logs and the dashboard name it."""
    kind: ChannelKind
    events: frozenset[NoticeEvent] = frozenset(NoticeEvent)
    digest_minutes: int = 0
    url: str | None = None
    secret: str | None = None
    smtp: SmtpSettings | None = None
    sender: str | None = None
    recipients: tuple[str, ...] = ()

    def secrets(self) -> tuple[str, ...]:
        """What must never be logged or shown (a webhook URL is a credential)."""
        smtp = self.smtp
        values = (self.url if self.kind is ChannelKind.SLACK else None, self.secret,
                  smtp.password if smtp is not None else None)  # fmt: skip
        return tuple(v for v in values if v)

    def describe(self) -> str:
        """One line for `check` and the dashboard, with no secret in it."""
        if self.kind is ChannelKind.EMAIL:
            assert self.smtp is not None
            where = f"{self.smtp.host}:{self.smtp.port} to {', '.join(self.recipients)}"
        elif self.kind is ChannelKind.SLACK:
            where = "incoming webhook at " + (urlsplit(self.url or "").hostname or "?")
        else:
            where = self.url or "?"
        digest = f", digest every {self.digest_minutes} min" if self.digest_minutes else ""
        events = ", ".join(sorted(e.value for e in self.events))
        return f"{self.kind.value} {where} ({events}{digest})"


DEFAULT_UNHEALTHY_MINUTES = 5


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """`notify:`: the channels that tell a person when they are needed, and where messages link."""

    channels: tuple[Channel, ...] = ()
    review_url: str | None = None
    """The review page's address in messages; None: the server's own, when it has a port."""
    unhealthy_after_minutes: int = DEFAULT_UNHEALTHY_MINUTES
    """How long the tracker may stay unreachable before `unhealthy` is sent."""

    def channel(self, name: str) -> Channel | None:
        return next((c for c in self.channels if c.name == name), None)


def parse_notify(raw: object, environ: Mapping[str, str], base_dir: Path) -> NotifySettings:
    if raw is None:
        return NotifySettings()
    if not isinstance(raw, Mapping):
        raise ConfigError(INVALID_CONFIG, "notify must be a map with `channels:`")
    channels_raw = raw.get("channels") or []
    if not isinstance(channels_raw, list):
        raise ConfigError(INVALID_CONFIG, "notify.channels must be a list of channels")
    channels: list[Channel] = []
    for index, item in enumerate(channels_raw):
        channel = _channel(item, f"notify.channels[{index}]", environ, base_dir)
        if any(c.name == channel.name for c in channels):
            raise ConfigError(
                INVALID_CONFIG,
                f"notify.channels[{index}]: another channel is named {channel.name}; give "
                "each a `name:` of its own",
            )
        channels.append(channel)
    review_url = raw.get("review_url")
    if review_url is not None:
        review_url = _url(review_url, "notify.review_url", environ).rstrip("/")
    return NotifySettings(
        tuple(channels),
        review_url,
        integer(raw, "notify.unhealthy_after_minutes", DEFAULT_UNHEALTHY_MINUTES, 1),
    )


def _channel(item: object, where: str, environ: Mapping[str, str], base_dir: Path) -> Channel:
    if not isinstance(item, Mapping):
        raise ConfigError(INVALID_CONFIG, f"{where} must be a map with `kind:`")
    unknown = sorted(str(k) for k in item if k not in CHANNEL_KEYS)
    if unknown:
        raise ConfigError(
            INVALID_CONFIG, f"{where}: {', '.join(unknown)} is not a channel setting "
            f"(known: {', '.join(CHANNEL_KEYS)})",
        )  # fmt: skip
    try:
        kind = ChannelKind(str(item.get("kind", "")).strip())
    except ValueError:
        raise ConfigError(
            INVALID_CONFIG, f"{where}.kind must be one of {', '.join(k.value for k in ChannelKind)}"
        ) from None
    name = item.get("name", kind.value)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(INVALID_CONFIG, f"{where}.name must be a non-empty string")
    events = _events(item.get("events"), where)
    digest = integer(item, f"{where}.digest_minutes", 0, 0)
    if kind is ChannelKind.EMAIL:
        for key in ("url", "secret"):
            if key in item:
                raise ConfigError(INVALID_CONFIG, f"{where}.{key} is not used by email")
        return Channel(
            name.strip(), kind, events, digest,
            smtp=_smtp(item.get("smtp"), f"{where}.smtp", environ, base_dir),
            sender=_address(item.get("from"), f"{where}.from"),
            recipients=_recipients(item.get("to"), f"{where}.to"),
        )  # fmt: skip
    for key in ("smtp", "from", "to"):
        if key in item:
            raise ConfigError(INVALID_CONFIG, f"{where}.{key} is used by email only")
    url = _url(item.get("url"), f"{where}.url", environ)
    secret = None
    if kind is ChannelKind.WEBHOOK:
        value = item.get("secret")
        if value is not None:
            secret = resolve_secret(value, environ)
            if secret is None:
                raise ConfigError(
                    INVALID_CONFIG, f"{where}.secret refers to ${env_reference(value)}, which "
                    "is not set (leave `secret:` out to send unsigned)",
                )  # fmt: skip
    elif "secret" in item:
        raise ConfigError(INVALID_CONFIG, f"{where}.secret is used by webhook only")
    return Channel(name.strip(), kind, events, digest, url=url, secret=secret)


def _events(value: object, where: str) -> frozenset[NoticeEvent]:
    if value is None:
        return frozenset(NoticeEvent)
    if isinstance(value, str):
        value = [value]
    known = ", ".join(e.value for e in NoticeEvent)
    if not isinstance(value, list) or not value:
        raise ConfigError(INVALID_CONFIG, f"{where}.events must be a list of: {known}")
    events = set()
    for item in value:
        try:
            events.add(NoticeEvent(str(item).strip()))
        except ValueError:
            raise ConfigError(
                INVALID_CONFIG, f"{where}.events: {item!r} is not an event (known: {known})"
            ) from None
    return frozenset(events)


def _url(value: object, where: str, environ: Mapping[str, str]) -> str:
    reference = env_reference(value)
    text = resolve_secret(value, environ) if isinstance(value, str) else None
    if text is None:
        if reference is not None:
            raise ConfigError(INVALID_CONFIG, f"{where} refers to ${reference}, which is not set")
        raise ConfigError(INVALID_CONFIG, f"{where} must be an http(s) URL or $VARIABLE")
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The value may be a secret (a Slack URL): never echoed.
        raise ConfigError(INVALID_CONFIG, f"{where} must be an http(s) URL")
    return text.strip()


def _smtp(value: object, where: str, environ: Mapping[str, str], base: Path) -> SmtpSettings:
    if not isinstance(value, Mapping) or not isinstance(value.get("host"), str):
        raise ConfigError(INVALID_CONFIG, f"{where} must be a map with at least `host:`")
    unknown = sorted(str(k) for k in value if k not in SMTP_KEYS)
    if unknown:
        raise ConfigError(
            INVALID_CONFIG, f"{where}: {', '.join(unknown)} is not an smtp setting "
            f"(known: {', '.join(SMTP_KEYS)})",
        )  # fmt: skip
    port = integer(value, f"{where}.port", 587, 1)
    if port > 65535:
        raise ConfigError(INVALID_CONFIG, f"{where}.port must be at most 65535")
    starttls = value.get("starttls", True)
    if not isinstance(starttls, bool):
        raise ConfigError(INVALID_CONFIG, f"{where}.starttls must be true or false")
    username = value.get("username")
    if username is not None and not isinstance(username, str):
        raise ConfigError(INVALID_CONFIG, f"{where}.username must be a string")
    password = None
    if value.get("password") is not None:
        password = resolve_secret(value.get("password"), environ)
        if password is None:
            raise ConfigError(INVALID_CONFIG, f"{where}.password refers to a variable not set")
    if password is not None and not starttls:
        raise ConfigError(
            INVALID_CONFIG, f"{where}: a password is never sent without STARTTLS "
            "(set `starttls: true` or leave the password out)",
        )  # fmt: skip
    ca = value.get("ca_file")
    if ca is not None and not isinstance(ca, str):
        raise ConfigError(INVALID_CONFIG, f"{where}.ca_file must be a path")
    return SmtpSettings(
        value["host"].strip(), port, username or None, password, starttls,
        resolve_path(ca, base, environ, f"{where}.ca_file") if ca else None,
        integer(value, f"{where}.timeout_s", 30, 1),
    )  # fmt: skip


def _address(value: object, where: str) -> str:
    if not isinstance(value, str) or "@" not in value:
        raise ConfigError(INVALID_CONFIG, f"{where} must be a mail address")
    return value.strip()


def _recipients(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(INVALID_CONFIG, f"{where} must list at least one mail address")
    return tuple(_address(item, where) for item in value)


def describe_all(settings: NotifySettings) -> list[dict[str, Any]]:
    """The channels as JSON for the API (no secret)."""
    return [
        {"name": c.name, "kind": c.kind.value, "describe": c.describe()} for c in settings.channels
    ]

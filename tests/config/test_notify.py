"""`notify:` as WORKFLOW.md declares it: channels, their events, digests and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.notify import ChannelKind, NoticeEvent, NotifySettings, parse_notify

ENV = {"SLACK_WEBHOOK_URL": "https://hooks.slack.test/services/T0/B0/s3cr3t",
       "NOTIFY_SECRET": "hmac-key", "SMTP_PASSWORD": "mail-pass"}  # fmt: skip


def parse(raw: Any, environ: dict[str, str] | None = None) -> NotifySettings:
    return parse_notify(raw, ENV if environ is None else environ, Path("/work"))


def test_the_three_channels_of_the_documented_example() -> None:
    notify = parse({
        "review_url": "https://symphony.example.com/",
        "channels": [
            {"kind": "slack", "url": "$SLACK_WEBHOOK_URL",
             "events": ["review_waiting", "escalated"], "digest_minutes": 30},
            {"kind": "webhook", "url": "https://hooks.example.com/symphony",
             "secret": "$NOTIFY_SECRET"},
            {"kind": "email", "name": "team-mail",
             "smtp": {"host": "smtp.example.com", "port": 587, "username": "bot",
                      "password": "$SMTP_PASSWORD"},
             "from": "symphony@example.com", "to": "team@example.com"},
        ],
    })  # fmt: skip
    slack, webhook, mail = notify.channels
    assert notify.review_url == "https://symphony.example.com"
    assert notify.unhealthy_after_minutes == 5
    assert slack.kind is ChannelKind.SLACK and slack.name == "slack"
    assert slack.url == ENV["SLACK_WEBHOOK_URL"] and slack.digest_minutes == 30
    assert slack.events == {NoticeEvent.REVIEW_WAITING, NoticeEvent.ESCALATED}
    assert webhook.secret == "hmac-key" and webhook.events == set(NoticeEvent)
    assert mail.name == "team-mail" and mail.recipients == ("team@example.com",)
    assert mail.smtp is not None and mail.smtp.password == "mail-pass" and mail.smtp.starttls
    # What may never be shown: the Slack URL, the signing key, the mail password.
    assert set(slack.secrets() + webhook.secrets() + mail.secrets()) == {
        ENV["SLACK_WEBHOOK_URL"], "hmac-key", "mail-pass",
    }  # fmt: skip
    assert "s3cr3t" not in slack.describe() and "hooks.slack.test" in slack.describe()
    assert notify.channel("team-mail") is mail and notify.channel("nope") is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("slack", "notify must be a map"),
        ({"channels": {"kind": "slack"}}, "notify.channels must be a list"),
        ({"channels": [{"kind": "pager"}]}, "notify.channels[0].kind must be one of"),
        ({"channels": [{"kind": "slack", "url": "$UNSET_HOOK"}]},
         "notify.channels[0].url refers to $UNSET_HOOK, which is not set"),
        ({"channels": [{"kind": "slack", "url": "ftp://x"}]}, "must be an http(s) URL"),
        ({"channels": [{"kind": "slack", "url": "https://a", "events": ["paged"]}]},
         "'paged' is not an event"),
        ({"channels": [{"kind": "slack", "url": "https://a", "secret": "x"}]},
         "secret is used by webhook only"),
        ({"channels": [{"kind": "webhook", "url": "https://a", "secret": "$NOPE"}]},
         "secret refers to $NOPE"),
        ({"channels": [{"kind": "slack", "url": "https://a"},
                       {"kind": "slack", "url": "https://b"}]}, "another channel is named slack"),
        ({"channels": [{"kind": "email", "smtp": {"host": "m"}, "from": "a@b", "to": []}]},
         "to must list at least one mail address"),
        ({"channels": [{"kind": "email", "smtp": {"host": "m", "password": "p",
                                                  "starttls": False},
                        "from": "a@b", "to": ["c@d"]}]}, "never sent without STARTTLS"),
        ({"channels": [{"kind": "email", "smtp": {"host": "m", "tls": True},
                        "from": "a@b", "to": ["c@d"]}]}, "tls is not an smtp setting"),
        ({"channels": [{"kind": "slack", "url": "https://a", "digest_minutes": -1}]},
         "digest_minutes must be at least 0"),
    ],
)  # fmt: skip
def test_a_bad_channel_is_refused_with_the_key_and_what_to_write(raw: Any, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    assert words in caught.value.message


def test_a_secret_url_that_is_malformed_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse({"channels": [{"kind": "slack", "url": "$HOOK"}]}, {"HOOK": "not-a-url-s3cr3t"})
    assert "s3cr3t" not in caught.value.message


def test_workflow_md_carries_notify_and_unknown_keys_warn(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    front = {
        "tracker": {"kind": "local", "provider": {"path": "board"}},
        "notify": {"channels": [{"kind": "webhook", "url": "http://127.0.0.1:9/hook"}],
                   "unhealthy_after_minutes": 2, "digest": 3},
    }  # fmt: skip
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"---\n{yaml.safe_dump(front)}---\nDo it.\n")
    settings = load_settings(path, {})
    assert settings.notify.unhealthy_after_minutes == 2
    assert [c.kind for c in settings.notify.channels] == [ChannelKind.WEBHOOK]
    assert any("notify.digest is not a setting" in w for w in settings.warnings)

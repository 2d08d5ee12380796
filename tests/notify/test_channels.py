"""Each channel kind against a real receiver on 127.0.0.1: the Slack body, the webhook's
signature, and mail through a real SMTP server that requires STARTTLS and a login."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from email import message_from_bytes
from pathlib import Path

import httpx
import pytest

from symphony.config.notify import Channel, ChannelKind, NoticeEvent, SmtpSettings
from symphony.core.notifications import Delivery, Notice
from symphony.notify import NotifyError
from symphony.notify.channels import send
from symphony.notify.message import compose
from tests.fakes.receivers import hook_receiver, mail_server

AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
WAITING = Notice(
    "review_waiting:id-4:x", NoticeEvent.REVIEW_WAITING, AT,
    "DEMO-4: its changes wait for your review in Human Review", "", "DEMO-4", "Human Review",
)  # fmt: skip
MERGED = Notice("merged:id-5:y", NoticeEvent.MERGED, AT, "DEMO-5: pull request #3 merged")


def one(notice: Notice, channel: str = "c") -> list[Delivery]:
    return [Delivery(channel, notice, AT)]


async def test_slack_gets_text_with_the_review_link() -> None:
    with hook_receiver() as receiver:
        channel = Channel("slack", ChannelKind.SLACK, url=receiver.url)
        message = compose("slack", one(WAITING), "http://127.0.0.1:8080")
        async with httpx.AsyncClient() as client:
            await send(channel, message, client)
        (got,) = receiver.taken()
    assert got.json() == {
        "text": "DEMO-4: its changes wait for your review in Human Review\n"
        "  http://127.0.0.1:8080/review#DEMO-4"
    }


async def test_a_webhook_is_signed_over_its_exact_body_and_says_which_delivery() -> None:
    with hook_receiver() as receiver:
        channel = Channel("hook", ChannelKind.WEBHOOK, url=receiver.url, secret="hmac-key")
        message = compose("hook", [*one(WAITING, "hook"), *one(MERGED, "hook")], None)
        async with httpx.AsyncClient() as client:
            await send(channel, message, client)
        (got,) = receiver.taken()
    expected = hmac.new(b"hmac-key", got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-symphony-signature"] == f"sha256={expected}"
    assert got.headers["x-symphony-delivery"] == message.id
    assert got.headers["x-symphony-event"] == "digest"
    body = got.json()
    assert body["digest"] is True and body["id"] == message.id
    assert [n["event"] for n in body["notices"]] == ["review_waiting", "merged"]
    assert body["notices"][0]["identifier"] == "DEMO-4" and body["notices"][0]["url"] is None
    # The same deliveries make the same message id: a receiver can drop a repeat.
    assert compose("hook", [*one(WAITING, "hook"), *one(MERGED, "hook")], None).id == message.id


async def test_a_refusing_or_missing_receiver_is_an_error_naming_the_host_only() -> None:
    with hook_receiver(fail=1) as receiver:
        channel = Channel("slack", ChannelKind.SLACK, url=receiver.url + "/T0/B0/s3cr3t")
        async with httpx.AsyncClient() as client:
            with pytest.raises(NotifyError) as refused:
                await send(channel, compose("slack", one(WAITING), None), client)
    assert "answered 500: receiver down for maintenance" in refused.value.message
    assert "s3cr3t" not in refused.value.message
    gone = Channel("slack", ChannelKind.SLACK, url=receiver.url + "/T0/B0/s3cr3t")
    async with httpx.AsyncClient() as client:
        with pytest.raises(NotifyError) as unreachable:
            await send(gone, compose("slack", one(WAITING), None), client)
    assert "127.0.0.1 cannot be reached" in unreachable.value.message
    assert "s3cr3t" not in unreachable.value.message


def mail_channel(box_port: int, ca: Path | None, password: str = "mail-pass") -> Channel:
    return Channel(
        "mail", ChannelKind.EMAIL,
        smtp=SmtpSettings("127.0.0.1", box_port, "bot", password, True, ca, 10),
        sender="symphony@example.com", recipients=("team@example.com", "lead@example.com"),
    )  # fmt: skip


async def test_mail_goes_over_starttls_with_a_login_to_every_recipient(tmp_path: Path) -> None:
    with mail_server(tmp_path) as box:
        message = compose("mail", one(WAITING, "mail"), "https://symphony.example.com")
        async with httpx.AsyncClient() as client:
            await send(mail_channel(box.port, box.ca_file), message, client)
        (envelope,) = box.messages
    assert box.tls_sessions == 1 and box.logins == ["bot"]
    assert envelope.rcpt_tos == ["team@example.com", "lead@example.com"]
    assert envelope.content is not None
    mail = message_from_bytes(envelope.content if isinstance(envelope.content, bytes)
                              else envelope.content.encode())  # fmt: skip
    assert mail["Subject"] == WAITING.title
    assert mail["Message-ID"] == f"<{message.id}@symphony>"
    assert "https://symphony.example.com/review#DEMO-4" in mail.get_payload()


async def test_mail_refuses_an_untrusted_certificate_and_a_wrong_password(tmp_path: Path) -> None:
    with mail_server(tmp_path) as box:
        message = compose("mail", one(WAITING, "mail"), None)
        async with httpx.AsyncClient() as client:
            with pytest.raises(NotifyError) as untrusted:
                await send(mail_channel(box.port, None), message, client)
            with pytest.raises(NotifyError) as wrong:
                await send(mail_channel(box.port, box.ca_file, "guess"), message, client)
        assert box.messages == []
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.value.message
    assert "answered 535" in wrong.value.message
    assert "guess" not in wrong.value.message

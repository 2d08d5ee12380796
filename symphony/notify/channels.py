"""One sender per channel kind. Each takes a composed `Message` and either returns (the
receiver took it) or raises `NotifyError` with words a person can act on; it never retries
itself (the outbox does, with backoff).

- slack: a Slack or Mattermost incoming webhook, `{"text": ...}`; any 2xx is taken.
- webhook: the message's JSON body, `X-Symphony-Signature: sha256=<HMAC-SHA256 of the body
  with the channel's secret>`, `X-Symphony-Delivery` (the message id, the same on a repeat)
  and `X-Symphony-Event`.
- email: SMTP, STARTTLS before any credential (verified against the system's certificates or
  `ca_file`), one plain-text mail to every recipient, `Message-ID` from the message id.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate
from typing import TYPE_CHECKING

import structlog

from symphony.base.errors import ErrorCategory
from symphony.config.notify import Channel, ChannelKind, SmtpSettings
from symphony.notify import NotifyError
from symphony.notify.message import Message

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger("symphony.notify")

HTTP_TIMEOUT_S = 10.0
SIGNATURE_HEADER = "X-Symphony-Signature"


def signature(secret: str, body: bytes) -> str:
    """The value of X-Symphony-Signature for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def send(channel: Channel, message: Message, client: httpx.AsyncClient) -> None:
    """Hand `message` to `channel`; raises NotifyError."""
    if channel.kind is ChannelKind.EMAIL:
        await asyncio.to_thread(_send_mail, channel, message)
        return
    import httpx

    assert channel.url is not None
    headers = {"Content-Type": "application/json", "User-Agent": "symphony"}
    if channel.kind is ChannelKind.SLACK:
        body = json.dumps({"text": message.text}).encode()
    else:
        body = json.dumps(message.body, sort_keys=True).encode()
        headers["X-Symphony-Delivery"] = message.id
        headers["X-Symphony-Event"] = (
            "digest" if message.body["digest"] else message.body["notices"][0]["event"]
        )
        if channel.secret is not None:
            headers[SIGNATURE_HEADER] = signature(channel.secret, body)
    try:
        response = await client.post(
            channel.url, content=body, headers=headers, timeout=HTTP_TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        # The URL may be a credential (a Slack webhook): name the host only.
        host = httpx.URL(channel.url).host
        raise NotifyError(
            ErrorCategory.NOTIFY_UNREACHABLE, f"{host} cannot be reached: {_why(exc)}"
        ) from None
    if not response.is_success:
        raise NotifyError(
            ErrorCategory.NOTIFY_REFUSED,
            f"{response.request.url.host} answered {response.status_code}: "
            f"{response.text.strip()[:200]}",
        )


def _why(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _send_mail(channel: Channel, message: Message) -> None:
    smtp = channel.smtp
    assert smtp is not None and channel.sender is not None
    mail = EmailMessage()
    mail["Subject"] = message.subject
    mail["From"] = channel.sender
    mail["To"] = ", ".join(channel.recipients)
    mail["Date"] = formatdate(localtime=False)
    mail["Message-ID"] = f"<{message.id}@symphony>"
    mail.set_content(message.text + "\n")
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_s) as client:
            client.ehlo()
            if smtp.starttls:
                client.starttls(context=_tls(smtp))
                client.ehlo()
            if smtp.username is not None and smtp.password is not None:
                client.login(smtp.username, smtp.password)
            refused = client.send_message(mail)
    except smtplib.SMTPResponseException as exc:
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else ""
        raise NotifyError(
            ErrorCategory.NOTIFY_REFUSED,
            f"{smtp.host}:{smtp.port} answered {exc.smtp_code}: {text}",
        ) from None
    except (OSError, smtplib.SMTPException, ssl.SSLError) as exc:
        raise NotifyError(
            ErrorCategory.NOTIFY_UNREACHABLE, f"mail to {smtp.host}:{smtp.port} failed: {_why(exc)}"
        ) from None
    if refused:
        # The others have it: sending again would repeat it to them.
        log.warning("mail relay refused some recipients", channel=channel.name,
                    refused=sorted(refused))  # fmt: skip


def _tls(smtp: SmtpSettings) -> ssl.SSLContext:
    if smtp.ca_file is not None:
        return ssl.create_default_context(cafile=str(smtp.ca_file))
    return ssl.create_default_context()

"""The `tracker.provider` block of a Kaiten workflow, validated into a frozen `KaitenConfig`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symphony.tracker.contract import INVALID_TRACKER_CONFIG, TrackerError

from .._support.provider import Secret, provider_secret, provider_str

DEFAULT_TOKEN_ENV = "KAITEN_TOKEN"
API_PATH = "/api/latest"
# A DNS label: Kaiten's cloud addresses a company as <domain>.kaiten.ru.
_DOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class KaitenConfig:
    """The validated `tracker.provider` of a Kaiten workflow: one board, or one lane of it."""

    api_url: str
    """The API root, e.g. `https://acme.kaiten.ru/api/latest`."""
    web_url: str
    """Scheme and host of the web app, for card links."""
    token: Secret
    board_id: int
    space_id: int | None
    """Optional: narrows the card listing and gives card links their `/space/<id>` form."""
    lane_id: int | None
    """Optional: only cards in this lane (swimlane) are in scope."""

    @property
    def scope(self) -> str:
        lane = f" lane {self.lane_id}" if self.lane_id is not None else ""
        return f"board {self.board_id}{lane}"


def parse_config(provider: Mapping[str, Any], environ: Mapping[str, str]) -> KaitenConfig:
    """Validate `tracker.provider`; raises `TrackerError` naming the offending key."""
    domain = provider_str(provider, "domain")
    base_url = provider_str(provider, "base_url")
    if (domain is None) == (base_url is None):
        raise _invalid(
            "tracker.provider needs exactly one of `domain` (the <domain> of "
            "https://<domain>.kaiten.ru) or `base_url` (the API root of an on-premise Kaiten, "
            "e.g. https://kaiten.example.com/api/latest)"
        )
    if domain is not None:
        domain = domain.lower()
        if domain.endswith(".kaiten.ru"):
            domain = domain[: -len(".kaiten.ru")]  # tolerate the full host name
        if not _DOMAIN.match(domain):
            raise _invalid(
                "tracker.provider.domain must be the company's subdomain, e.g. `acme` for "
                "https://acme.kaiten.ru"
            )
        web_url = f"https://{domain}.kaiten.ru"
        api_url = web_url + API_PATH
    else:
        assert base_url is not None
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise _invalid(
                "tracker.provider.base_url must be an http(s) URL such as "
                "https://kaiten.example.com/api/latest"
            )
        api_url = base_url.rstrip("/")
        web_url = f"{parts.scheme}://{parts.netloc}"
    board_id = _positive_id(provider, "board_id", required=True)
    assert board_id is not None
    space_id = _positive_id(provider, "space_id")
    lane_id = _positive_id(provider, "lane_id")
    # The token is read last: a config with a broken scope is reported as such even when the
    # variable is also missing, and the check never needs the secret itself.
    token = provider_secret(provider, "token", DEFAULT_TOKEN_ENV, environ)
    return KaitenConfig(
        api_url=api_url,
        web_url=web_url,
        token=token,
        board_id=board_id,
        space_id=space_id,
        lane_id=lane_id,
    )


def _positive_id(provider: Mapping[str, Any], key: str, *, required: bool = False) -> int | None:
    text = provider_str(provider, key, required=required)
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise _invalid(f"tracker.provider.{key} must be a positive integer (a Kaiten id)")
    return int(text)


def _invalid(message: str) -> TrackerError:
    return TrackerError(INVALID_TRACKER_CONFIG, message)

"""The one place a session's requests meet their replies, for JSON-RPC and Claude alike."""

from __future__ import annotations

import asyncio

import pytest

from symphony.agents import PORT_EXIT, RESPONSE_ERROR, RESPONSE_TIMEOUT, AgentError
from symphony.agents.session import Replies


async def test_a_reply_reaches_its_request_and_a_late_one_finds_nobody() -> None:
    replies: Replies[str, str] = Replies(lambda n: f"symphony-{n}")
    sent: list[str] = []

    async def send(request_id: str) -> None:
        sent.append(request_id)
        asyncio.get_running_loop().call_soon(replies.resolve, request_id, f"answer {request_id}")

    assert await replies.exchange(send, timeout_s=1, timeout_message="late") == "answer symphony-1"
    assert sent == ["symphony-1"] and not replies.awaits("symphony-1")
    replies.resolve("symphony-1", "again")  # forgotten: nothing to hand it to


async def test_a_refusal_a_timeout_and_a_lost_connection_are_raised_to_who_asked() -> None:
    replies: Replies[int, str] = Replies(int)

    async def refused(request_id: int) -> None:
        replies.resolve(request_id, AgentError(RESPONSE_ERROR, "no"))

    with pytest.raises(AgentError) as raised:
        await replies.exchange(refused, timeout_s=1, timeout_message="late")
    assert raised.value.category == RESPONSE_ERROR

    async def silent(request_id: int) -> None:
        return None

    with pytest.raises(AgentError) as raised:
        await replies.exchange(silent, timeout_s=0.01, timeout_message="no reply in 10 ms")
    assert (raised.value.category, raised.value.message) == (RESPONSE_TIMEOUT, "no reply in 10 ms")

    waiting = asyncio.ensure_future(replies.exchange(silent, timeout_s=1, timeout_message=""))
    await asyncio.sleep(0)
    replies.fail(AgentError(PORT_EXIT, "gone"))
    with pytest.raises(AgentError) as raised:
        await waiting
    assert raised.value.category == PORT_EXIT

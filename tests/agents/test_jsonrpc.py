"""The JSON-RPC peer's own rules, with its write and its agent's end played by the test."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from symphony.agents import CODEX_NOT_FOUND, PORT_EXIT, AgentError
from symphony.agents.jsonrpc import JsonRpcPeer


class _Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def peer(write: Any) -> JsonRpcPeer:
    async def answer(method: str, params: Any) -> Any:
        return {"result": {}}

    return JsonRpcPeer(
        write,
        on_request=answer,
        on_notification=lambda method, params: None,
        on_other=lambda kind, line: None,
        logger=_Quiet(),
    )


async def refused(data: bytes) -> None:
    raise AgentError(PORT_EXIT, "the agent stopped reading its stdin (Broken pipe)")


async def test_a_refused_write_reports_why_the_agent_ended_once_that_is_known() -> None:
    """An agent that exited at once (a missing command) refuses the first write before its
    exit is read: the write waits for the exit's reason instead of a broken pipe."""
    rpc = peer(refused)
    sending = asyncio.create_task(rpc.send({"method": "initialize"}))
    await asyncio.sleep(0.01)
    assert not sending.done()  # waiting for the agent's end
    rpc.fail(AgentError(CODEX_NOT_FOUND, "bash: no-such-agent: command not found"))
    with pytest.raises(AgentError) as caught:
        await sending
    assert caught.value.category == CODEX_NOT_FOUND


async def test_a_refused_write_of_an_agent_that_never_ends_says_so_in_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("symphony.agents.jsonrpc.EXIT_WAIT_S", 0.01)
    with pytest.raises(AgentError) as caught:
        await peer(refused).send({"method": "initialize"})
    assert caught.value.category == PORT_EXIT and "Broken pipe" in caught.value.message

"""The fake Responses API on its own (no codex): steps, tool choice, failures, stalls, stop."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

from tests.e2e.fake_model import CallTool, Fail, FakeModel, Say, Shell, Stall, Step

EXEC_COMMAND = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {}, "login": {}, "yield_time_ms": {}}},
}
SHELL_COMMAND = {
    "type": "function",
    "name": "shell_command",
    "parameters": {"type": "object", "properties": {"command": {}, "workdir": {}}},
}


def body(*items: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"model": "fake-model", "stream": True, "input": list(items), "tools": tools or []}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def post(model: FakeModel, payload: dict[str, Any]) -> tuple[int, list[tuple[str, Any]]]:
    """POST /v1/responses; the status and the SSE events (type, data) of the reply."""
    connection = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    try:
        connection.request("POST", "/v1/responses", json.dumps(payload))
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return response.status, events


def items_done(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [data["item"] for kind, data in events if kind == "response.output_item.done"]


def test_step_is_the_number_of_tool_outputs_after_the_last_user_message() -> None:
    script: list[Step] = [Shell("true"), CallTool("local_move_issue", {"state": "Done"}), Say("ok")]
    with FakeModel(script) as model:
        first = post(model, body(user("Work on ABC-1"), tools=[EXEC_COMMAND]))
        second = post(model, body(output("a"), user("Work on ABC-1"), output("b")))
        third = post(model, body(user("Work on ABC-1"), output("a"), output("b")))
        beyond = post(model, body(user("x"), output("a"), output("b"), output("c")))

    assert [r.step for r in model.requests] == [0, 1, 2, 3]
    assert model.requests[0].prompt == "Work on ABC-1"
    assert items_done(first[1])[0]["name"] == "exec_command"
    move = items_done(second[1])[0]
    assert move["name"] == "local_move_issue" and json.loads(move["arguments"]) == {"state": "Done"}
    assert items_done(third[1])[0]["content"][0]["text"] == "ok"
    assert items_done(beyond[1])[0]["content"][0]["text"] == "done"
    assert all(events[-1][0] == "response.completed" for _, events in (first, second, third))


def test_shell_step_uses_the_shell_tool_the_request_offers() -> None:
    with FakeModel([Shell("echo hi > a.txt")]) as model:
        _, unified = post(model, body(user("go"), tools=[EXEC_COMMAND, SHELL_COMMAND]))
        _, plain = post(model, body(user("go"), tools=[SHELL_COMMAND]))
        status, _ = post(model, body(user("go"), tools=[]))

    call = items_done(unified)[0]
    assert call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {
        "cmd": "echo hi > a.txt",
        "login": False,
        "yield_time_ms": 10_000,
    }
    call = items_done(plain)[0]
    assert call["name"] == "shell_command"
    assert json.loads(call["arguments"]) == {"command": "echo hi > a.txt"}
    assert status == 400 and len(model.script_errors) == 1


def test_reported_tokens_add_up_the_usage_of_every_completed_response() -> None:
    with FakeModel([Shell("true"), Say("ok")]) as model:
        replies = [
            post(model, body(user("go"), tools=[EXEC_COMMAND])),
            post(model, body(user("go"), output("a"))),
        ]

    usage = [events[-1][1]["response"]["usage"]["total_tokens"] for _, events in replies]
    assert model.reported_total_tokens == sum(usage) > 0


def test_fail_step_answers_with_an_http_error() -> None:
    with FakeModel([Fail(500)]) as model:
        status, events = post(model, body(user("go")))
    assert status == 500 and events == []
    assert model.reported_total_tokens == 0


def test_stalled_stream_does_not_hold_up_stopping_the_server() -> None:
    model = FakeModel([Stall(keepalive_s=0.05)]).start()
    connection = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    connection.request("POST", "/v1/responses", json.dumps(body(user("go"))))
    response = connection.getresponse()
    first = response.fp.readline()
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(response.read()))
    reader.start()

    started = time.monotonic()
    model.stop()
    reader.join(timeout=5)
    connection.close()

    assert time.monotonic() - started < 2
    assert first == b"event: response.created\n"
    assert not reader.is_alive()  # the stream ended once the server stopped
    assert b"response.completed" not in b"".join(received)

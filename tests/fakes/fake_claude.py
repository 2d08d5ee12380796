"""A scripted stand-in for the `claude` CLI in stream-json mode (stdlib only), for the turns a
fake model server cannot make Claude Code produce quickly: the error results it prints once its
own retries of a failing model are spent (measured on 2.1.197: minutes of retries).

Run as `python3 fake_claude.py <claude's flags>`. It answers the `initialize` control request,
and each user line runs one turn of `FAKE_CLAUDE_TURN` (comma-separated, one per turn, the last
repeating): `ok` (a reply), `usage_limit` (a 429 whose words name the account's usage limit
and its reset, `FAKE_CLAUDE_RESET` epoch seconds), `rate_limited` (429 after retries that
waited `retry-after`), `overloaded` (529 after retries), `outage` (500 after retries),
`refused` (connection refused), `unauthorized` (401).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

SESSION = "fake-claude-session"


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def retries(error: str, status: int | None, delay_ms: int = 600) -> None:
    for attempt in (1, 2):
        say(
            {
                "type": "system",
                "subtype": "api_retry",
                "attempt": attempt,
                "max_retries": 2,
                "retry_delay_ms": delay_ms,
                "error_status": status,
                "error": error,
                "session_id": SESSION,
            }
        )


def failed(text: str, status: int | None) -> None:
    say(
        {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "api_error_status": status,
            "terminal_reason": "api_error",
            "result": text,
            "session_id": SESSION,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
    )


def turn(kind: str) -> None:
    say({"type": "system", "subtype": "init", "session_id": SESSION, "model": "claude-fake"})
    if kind == "ok":
        say({"type": "assistant", "message": {"content": [{"type": "text", "text": "done"}]}})
        say({"type": "result", "subtype": "success", "is_error": False, "result": "done"})
    elif kind == "usage_limit":
        reset = os.environ.get("FAKE_CLAUDE_RESET", str(int(time.time()) + 3600))
        failed(f"Claude AI usage limit reached|{reset}", 429)
    elif kind == "rate_limited":
        retries("rate_limit", 429, delay_ms=2000)
        failed('API Error: 429 {"type":"error","error":{"type":"rate_limit_error"}}', 429)
    elif kind == "overloaded":
        retries("overloaded", 529)
        failed('API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}', 529)
    elif kind == "outage":
        retries("server_error", 500)
        failed("API Error: 500 fake 500. Try again later.", 500)
    elif kind == "refused":
        retries("unknown", None)
        failed("API Error: Connection refused. Is the server running?", None)
    elif kind == "unauthorized":
        failed('API Error: 401 {"type":"error","error":{"type":"authentication_error"}}', 401)


def main() -> None:
    turns = [t for t in os.environ.get("FAKE_CLAUDE_TURN", "ok").split(",") if t] or ["ok"]
    count = 0
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("type") == "control_request":
            say(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "success",
                        "request_id": message.get("request_id"),
                        "response": {},
                    },
                }
            )
        elif message.get("type") == "user":
            count += 1
            turn(turns[min(count, len(turns)) - 1])


if __name__ == "__main__":
    main()

"""Model gateway benchmark: what carrying an agent's model calls through the daemon costs.

A fake provider runs in a process of its own (an asyncio HTTP server answering every POST with
a stream of server-sent events ending in `response.completed` with its usage). The gateway
(`symphony.gateway.server.ModelGateway`, as the daemon runs it, with a decision that admits
every call) runs in this process.

1. Per-request overhead. One client, 1,000 sequential calls with a 2 KB body and a short
   streamed answer, first straight to the provider, then through the gateway. The difference of
   the medians is what the gateway adds to a call. Target: under 1 ms.
2. 50 concurrent streaming sessions. A client process opens 50 streams at once; the provider
   writes each 5 events every 50 ms (100 events/s, about 160 bytes each) for 6 s. This
   process's CPU time over the window, divided by the wall time, is the gateway's share of one
   core (with the direct run, this process does nothing at all). Target: under 5% of one core.

Run from the repository root: `python bench/gateway.py` (about 30 seconds).
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from symphony.gateway.server import ModelGateway, WireReport

CALLS = 1_000
SESSIONS = 50
STREAM_S = 6.0

PROVIDER = textwrap.dedent(
    r"""
    import asyncio, json, sys
    EVENT = {"type": "response.output_text.delta", "item_id": "m", "delta": "x" * 60}
    DELTA = ("event: response.output_text.delta\ndata: " + json.dumps(EVENT) + "\n\n").encode()
    DONE = ("event: response.completed\ndata: " + json.dumps({"type": "response.completed",
        "response": {"id": "r", "model": "gpt-5", "usage": {"input_tokens": 100,
        "output_tokens": 20, "total_tokens": 120}}}) + "\n\n").encode()
    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                paced = b"x-pace: 1" in head.lower() or b"x-pace:1" in head.lower()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                def chunk(data):
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                if paced:
                    for _ in range(int(float(sys.argv[1]) / 0.05)):
                        chunk(DELTA * 5)
                        await writer.drain()
                        await asyncio.sleep(0.05)
                else:
                    chunk(DELTA * 3)
                chunk(DONE)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()
    asyncio.run(main())
    """
)

CLIENTS = textwrap.dedent(
    r"""
    import asyncio, sys, httpx
    async def one(client, url, token):
        async with client.stream("POST", url, headers={"authorization": "Bearer " + token,
                                 "x-pace": "1"}, content=b"{}") as answer:
            async for _ in answer.aiter_raw():
                pass
    async def main():
        url, token, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            await asyncio.gather(*(one(client, url, token) for _ in range(count)))
    asyncio.run(main())
    """
)


async def sequential(url: str, token: str) -> list[float]:
    body = b'{"model":"gpt-5","input":"' + b"y" * 2000 + b'"}'
    took = []
    async with httpx.AsyncClient() as client:
        for _ in range(CALLS):
            started = time.perf_counter()
            answer = await client.post(
                url, headers={"authorization": f"Bearer {token}"}, content=body
            )
            await answer.aread()
            took.append(time.perf_counter() - started)
    return took[50:]  # after warm-up


async def streamed(url: str, token: str) -> tuple[float, float, float]:
    """This process's CPU (user, system) and the wall time while a client process streams 50
    sessions."""
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    clients = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENTS, url, token, str(SESSIONS)
    )
    await clients.wait()
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return user, system, time.perf_counter() - wall


async def main() -> None:
    provider = subprocess.Popen(
        [sys.executable, "-c", PROVIDER, str(STREAM_S)], stdout=subprocess.PIPE, text=True
    )
    assert provider.stdout is not None
    direct = f"http://127.0.0.1:{provider.stdout.readline().strip()}/v1"
    reports: list[WireReport] = []
    gateway = ModelGateway(lambda issue_id, kind: None, reports.append)
    try:
        grant = await gateway.grant(
            "1", "codex", {"OPENAI_API_KEY": "sk", "OPENAI_BASE_URL": direct}
        )
        assert grant is not None
        through = grant.env["OPENAI_BASE_URL"]
        plain = await sequential(f"{direct}/responses", "sk")
        carried = await sequential(f"{through}/responses", grant.token)
        added_ms = (statistics.median(carried) - statistics.median(plain)) * 1000
        print(f"per request: direct median {statistics.median(plain) * 1000:.3f} ms, "
              f"through the gateway {statistics.median(carried) * 1000:.3f} ms: "
              f"the gateway adds {added_ms:.3f} ms (target < 1 ms)")  # fmt: skip
        calls = len(reports)
        *_, direct_wall = await streamed(f"{direct}/responses", "sk")
        user, system, wall = await streamed(f"{through}/responses", grant.token)
        share = (user + system) / wall * 100
        print(f"{SESSIONS} streams of {STREAM_S:.0f} s at 100 events/s: "
              f"direct {direct_wall:.2f} s, "
              f"through the gateway {wall:.2f} s, gateway CPU {user:.3f} s user + {system:.3f} s "
              f"system = {share:.2f}% of one core (target < 5%; the system part is the kernel "
              "carrying each chunk over loopback twice)")  # fmt: skip
        measured = [r for r in reports[calls:] if r.usage is not None]
        print(f"usage measured at the wire: {len(measured)} of {SESSIONS} streams")
    finally:
        await gateway.close()
        provider.kill()


if __name__ == "__main__":
    asyncio.run(main())

"""Overload: ten times the lane count of concurrent clients against `--max-lanes 1`.

Starts `superfluid serve` on the demo model with one lane (and the given `--max-queue`), sends
CLIENTS streamed chat requests at once, and reports per status how many came back and how soon
their first byte (the response head) arrived, then checks that one more request is served
normally. The promise: every request gets its reply or a 429/503 at once (first byte within
100 ms), no other 5xx, nothing hangs.

    .venv/bin/python -m bench.overload [--max-queue 2] [--clients 10] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx

from bench.http_servers import ServerSpec, running, superfluid_spec
from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.entrypoints.container import superfluid_home

FAST = 0.100  # seconds: the first byte of a refusal arrives within this


async def one(client: httpx.AsyncClient, i: int, tokens: int) -> tuple[int, float, float, str]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"Write a short story number {i}."}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }
    started = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        first = time.perf_counter() - started
        text = (await response.aread()).decode(errors="replace")
    done = time.perf_counter() - started
    ending = "done" if "[DONE]" in text else text[:80]
    return response.status_code, first, done, ending


async def storm(base: str, clients: int, tokens: int) -> list[tuple[int, float, float, str]]:
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        return await asyncio.gather(*(one(client, i, tokens) for i in range(clients)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-queue", type=int, default=None, help="default: the server's")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    model = demo_model_path(superfluid_home(os.environ))
    spec = superfluid_spec("superfluid", model, "auto", max_lanes=1, ctx_size=2048)
    argv = [*spec.argv, "--served-model-name", "m"]
    if args.max_queue is not None:
        argv += ["--max-queue", str(args.max_queue)]
    spec = ServerSpec(spec.system, tuple(argv), "m")
    with tempfile.TemporaryDirectory() as tmp, running(spec, Path(tmp) / "server.log") as base:
        results = asyncio.run(storm(base, args.clients, args.tokens))
        after = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
            timeout=120,
        )
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
    queue = "server default" if args.max_queue is None else str(args.max_queue)
    print(f"{args.clients} clients, --max-lanes 1, --max-queue {queue}, {args.tokens} tokens each")
    for status in sorted({r[0] for r in results}):
        group = [r for r in results if r[0] == status]
        firsts = [r[1] for r in group]
        print(
            f"  {status}: {len(group):2}  first byte max {max(firsts) * 1000:7.1f} ms"
            f"  min {min(firsts) * 1000:7.1f} ms  whole reply max {max(r[2] for r in group):6.2f} s"
        )
    refused = [r for r in results if r[0] in (429, 503)]
    others = [r for r in results if r[0] not in (200, 429, 503)]
    unfinished = [r for r in results if r[0] == 200 and r[3] != "done"]
    slow = [r for r in refused if r[1] > FAST]
    print(
        f"  refusals slower than {FAST * 1000:.0f} ms: {len(slow)}; other statuses: {len(others)};"
        f" streams without [DONE]: {len(unfinished)}"
    )
    print(f"  afterwards: {after.status_code}")
    for line in metrics.splitlines():
        if line.startswith(("superfluid_requests_rejected_total", "superfluid_queue_")):
            print(f"  {line}")


if __name__ == "__main__":
    main()

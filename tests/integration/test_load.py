"""Load with walk-aways: nothing leaks, the server keeps answering, completed output is exact.

200 streaming requests from 24 concurrent clients, a third of them disconnecting at a random
point, against a real uvicorn server on loopback serving a batch-invariant fake model with
prompt-lookup on. Every completed greedy reply must equal the reply the same prompt gets alone.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from superfluid.adapters.metrics import PrometheusMetrics
from superfluid.application.service import GenerationService
from superfluid.entrypoints.http.app import create_app
from tests.fakes import FakeModel, FakeRuntime
from tests.integration.http_harness import BackgroundServer, speculating_host, wait_for_idle

REQUESTS = 200
CLIENTS = 24
PROMPTS = [
    f"{word} {word} and {word} again, {i}"
    for i, word in enumerate(["alpha", "beta", "gamma", "delta", "eps"] * 2)
]


@pytest.fixture(scope="module")
def served():
    runtime = FakeRuntime(FakeModel(order=1, eos=False, peak=5.0), context_size=512)
    host = speculating_host("fake-model", runtime)
    metrics = PrometheusMetrics([host])
    service = GenerationService([host], observer=metrics)
    server = BackgroundServer(create_app(service, metrics=metrics))
    service.start()
    server.start()
    yield server, host, runtime
    server.stop()
    service.stop()


def body(prompt: str) -> dict:
    return {
        "model": "fake-model",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
    }


async def stream(client: httpx.AsyncClient, prompt: str, walk_away_after: int | None):
    """The streamed text, or None for a client that walked away."""
    text, chunks = [], 0
    async with client.stream("POST", "/v1/chat/completions", json=body(prompt)) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return "".join(text)
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            for choice in chunk["choices"]:
                text.append(choice["delta"].get("content") or "")
            chunks += 1
            if walk_away_after is not None and chunks >= walk_away_after:
                return None  # leaving the block closes the connection mid-stream
    raise AssertionError("the stream ended without [DONE]")


def test_two_hundred_streams_with_walk_aways_leak_nothing_and_stay_exact(served):
    server, host, runtime = served
    rng = random.Random(7)
    plan = [
        (rng.choice(PROMPTS), rng.randint(1, 6) if i % 3 == 0 else None) for i in range(REQUESTS)
    ]

    async def main():
        limits = httpx.Limits(max_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
            alone = {p: await stream(client, p, None) for p in PROMPTS}
            gate = asyncio.Semaphore(CLIENTS)

            async def one(prompt, walk):
                async with gate:
                    return await stream(client, prompt, walk)

            results = await asyncio.gather(*(one(p, w) for p, w in plan))
            return alone, results

    started = time.monotonic()
    alone, results = asyncio.run(main())
    completed = [(p, r) for (p, _), r in zip(plan, results, strict=True) if r is not None]
    walked = sum(1 for r in results if r is None)
    print(
        f"{REQUESTS} requests: {len(completed)} completed, {walked} walked away, {time.monotonic() - started:.1f} s"
    )
    assert walked == sum(1 for _, w in plan if w is not None)
    assert all(text == alone[prompt] for prompt, text in completed), "a reply under load differs"
    assert wait_for_idle(host, 10) == 0
    assert runtime.kv == host.executor.parked(), "a sequence leaked"
    page = httpx.get(f"{server.url}/metrics", timeout=10).text
    active = {
        s.labels["model"]: s.value
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if s.name == "superfluid_active_lanes"
    }
    assert active == {"fake-model": 0.0}
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200

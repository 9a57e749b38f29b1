"""Overload, as a client meets it: a model's lanes and queue are full, the next request is
refused at once with 429, `Retry-After` and an OpenAI error body; nothing accepted is dropped;
a client that walks away while queued gives its place back; `/metrics` counts it all.

The server is the in-process harness (tests/integration/http_harness.py) serving one slow fake
model with one lane and a queue of one, and the real Prometheus metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from superfluid.adapters.metrics import PrometheusMetrics
from superfluid.application.admission import Admission
from superfluid.application.service import GenerationService, ModelHost
from superfluid.entrypoints.http.app import create_app
from tests.integration.http_harness import BackgroundServer, SlowRuntime, speculating_host

pytestmark = pytest.mark.timeout(60)

USER = [{"role": "user", "content": "the cat sat on the mat, " * 4}]


class OneLane:
    def __init__(self) -> None:
        self.host: ModelHost = speculating_host("slow-model", SlowRuntime(seconds_per_step=0.01))
        self.host.executor._max_lanes = 1  # one lane, as `--max-lanes 1`
        self.host.admission = Admission(lanes=1, queue=1)
        self.service = GenerationService([self.host])
        self.metrics = PrometheusMetrics([self.host])
        self.server = BackgroundServer(create_app(self.service, metrics=self.metrics))

    def __enter__(self) -> OneLane:
        self.service.start()
        self.server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop()
        self.service.stop()

    def metric(self, name: str) -> float:
        body, _ = self.metrics.exposition()
        for line in body.decode().splitlines():
            if line.startswith(f'{name}{{model="slow-model"}}'):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} is not on /metrics")


@pytest.fixture
def served() -> Iterator[OneLane]:
    with OneLane() as one:
        yield one


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_past_lanes_and_queue_a_request_gets_429_with_retry_after_at_once(
    served: OneLane,
) -> None:
    client = openai.OpenAI(base_url=f"{served.server.url}/v1", api_key="x", max_retries=0)
    body = {"model": "slow-model", "messages": USER, "max_tokens": 100_000}
    with httpx.Client(base_url=served.server.url, timeout=30) as http, ThreadPoolExecutor() as pool:
        decoding = http.stream("POST", "/v1/chat/completions", json={**body, "stream": True})
        decoding.__enter__()
        assert wait_until(lambda: served.host.executor.active_lanes == 1)
        # The queue's one place: a request that waits for the lane, on its own thread.
        waiting = pool.submit(http.post, "/v1/chat/completions", json={**body, "max_tokens": 4})
        assert wait_until(lambda: served.host.places.held == 2)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="slow-model", messages=USER, max_tokens=4)  # type: ignore[arg-type]
        error = refused.value
        assert error.status_code == 429
        assert error.response.headers["retry-after"] == "1"
        assert error.body["type"] == "server_overloaded" and error.body["code"] == "queue_full"
        assert "slow-model is at capacity" in error.body["message"]
        assert served.metric("superfluid_requests_rejected_total") == 1
        assert served.metric("superfluid_queue_depth") == 1
        assert served.metric("superfluid_queue_capacity") == 2
        decoding.__exit__(None, None, None)  # the decoding client leaves: the queued one runs
        reply = waiting.result(timeout=30)
    # Nothing accepted was dropped: the queued request got its whole reply.
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
    assert wait_until(lambda: served.host.places.held == 0)
    assert served.metric("superfluid_queue_depth") == 0
    # And the model serves normally afterwards.
    after = client.chat.completions.create(model="slow-model", messages=USER, max_tokens=4)  # type: ignore[arg-type]
    assert after.choices[0].finish_reason == "length"


def test_a_client_that_walks_away_while_queued_frees_its_place(served: OneLane) -> None:
    body = {"model": "slow-model", "messages": USER, "max_tokens": 100_000, "stream": True}
    with (
        httpx.Client(base_url=served.server.url, timeout=30) as http,
        http.stream("POST", "/v1/chat/completions", json=body),
    ):
        assert wait_until(lambda: served.host.executor.active_lanes == 1)
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/chat/completions", json=body, timeout=0.5)  # queued, then gone
        # Its place comes back while the lane is still busy: another client may queue.
        assert wait_until(lambda: served.host.places.held == 1)
        assert served.host.executor.active_lanes == 1
        assert served.host.executor.waiting == 0
        # So the next client queues again (it waits for the lane) instead of getting 429.
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/chat/completions", json=body, timeout=0.5)
    assert wait_until(lambda: served.host.places.held == 0)
    assert served.metric("superfluid_requests_rejected_total") == 0

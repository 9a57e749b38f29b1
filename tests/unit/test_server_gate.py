"""The server's phases as a balancer sees them (`ServerGate`), through a real ASGI client."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from superfluid.entrypoints.http.lifecycle import Phase, ServerGate

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Inner:
    """The API app stand-in: answers `{"path": ...}`; a path under /slow waits for `release`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"].startswith("/slow"):
            self.entered.set()
            await self.release.wait()
        await JSONResponse({"path": scope["path"]})(scope, receive, send)


def client(gate: ServerGate) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://gate")


async def test_while_loading_health_and_the_api_answer_503_at_once_and_livez_200() -> None:
    gate = ServerGate(["a.gguf", "b.gguf"])
    async with client(gate) as http:
        health = await http.get("/health")
        assert health.status_code == 503
        assert health.json() == {"status": "loading", "ready": [], "loading": ["a.gguf", "b.gguf"]}
        gate.loaded("a.gguf")
        assert (await http.get("/health")).json()["ready"] == ["a.gguf"]
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
            refused = await http.request(method, path, json={})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "model_loading"
            assert "b.gguf" in refused.json()["error"]["message"]
        assert (await http.get("/metrics")).status_code == 503
        live = await http.get("/livez")
        assert live.status_code == 200 and live.json() == {"status": "alive", "phase": "loading"}


async def test_once_open_every_request_reaches_the_app() -> None:
    gate = ServerGate(["a.gguf"])
    gate.loaded("a.gguf")
    gate.open(Inner())
    assert gate.phase is Phase.READY
    async with client(gate) as http:
        for path in ("/health", "/v1/models", "/metrics"):
            answer = await http.get(path)
            assert answer.status_code == 200 and answer.json() == {"path": path}
        assert (await http.get("/livez")).json()["phase"] == "ready"


async def test_a_drain_turns_health_and_new_requests_away_but_keeps_metrics() -> None:
    gate = ServerGate(["a.gguf"])
    gate.open(Inner())
    gate.drain()
    async with client(gate) as http:
        health = await http.get("/health")
        assert health.status_code == 503 and health.json() == {"status": "draining"}
        refused = await http.post("/v1/chat/completions", json={})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        assert refused.json()["error"]["code"] == "shutting_down"
        assert (await http.get("/metrics")).json() == {"path": "/metrics"}
        assert (await http.get("/livez")).json() == {"status": "alive", "phase": "draining"}


async def test_the_gate_counts_requests_in_the_app_and_says_when_it_is_idle() -> None:
    inner = Inner()
    gate = ServerGate(["a.gguf"])
    gate.open(inner)
    assert await gate.idle(0.01)
    async with client(gate) as http:
        pending = asyncio.ensure_future(http.get("/slow"))
        await asyncio.wait_for(inner.entered.wait(), 5)
        assert gate.in_flight == 1
        gate.drain()
        assert not await gate.idle(0.05)  # still running: a drain waits for it
        waiting = asyncio.ensure_future(gate.idle(5))
        inner.release.set()
        assert await waiting
        assert (await pending).status_code == 200  # a request in flight is never cut
        assert gate.in_flight == 0


@pytest.mark.parametrize("path", ["/health", "/v1/models"])
async def test_a_drain_that_follows_loading_refuses_as_shutting_down(path: str) -> None:
    gate = ServerGate(["a.gguf"])
    gate.drain()
    async with client(gate) as http:
        answer = await http.get(path)
        assert answer.status_code == 503
        assert "draining" in answer.text or "shutting_down" in answer.text

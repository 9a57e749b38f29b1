"""`superfluid serve` as an orchestrator and a load balancer see it: loading, ready, draining.

Loading is held open by the hub catalog: a `.base` target under `--speculate auto` fetches it
while it loads, and the catalog server here answers only when the test lets it, so the test
sees the loading phase for as long as it needs. Draining runs on the real instruct model
(SmolLM2 on llama.cpp) with real streams, as an operator's SIGTERM meets them.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from superfluid.adapters.fixtures.basert import make_fixtures
from tests.integration.hubs import StalledHub
from tests.integration.serving import Server, listening, started, startup

pytestmark = pytest.mark.slow


@pytest.fixture
def hub() -> Iterator[StalledHub]:
    stalled = StalledHub()
    yield stalled
    stalled.close()


def url(server: Server, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def test_while_models_load_health_and_requests_get_503_at_once_then_200(
    tmp_path: Path, hub: StalledHub
) -> None:
    target = make_fixtures(tmp_path / "fixtures")["target"]
    env = {
        "HOME": str(tmp_path),
        "SUPERFLUID_HOME": str(tmp_path / "sf"),
        "SUPERFLUID_CATALOG_URL": hub.url,
        "PATH": "/usr/bin:/bin",
    }
    with listening([str(target), "--speculate", "auto", "--ctx-size", "512"], env) as server:
        assert hub.asked.wait(30), "the server never fetched the catalog while loading"
        health = httpx.get(url(server, "/health"), timeout=5)
        assert health.status_code == 503
        assert health.json() == {"status": "loading", "ready": [], "loading": [target.name]}
        started_at = time.monotonic()
        chat = httpx.post(
            url(server, "/v1/chat/completions"),
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=5,
        )
        assert time.monotonic() - started_at < 2  # answered at once, not held until loaded
        assert chat.status_code == 503 and chat.headers["retry-after"] == "1"
        assert chat.json()["error"]["code"] == "model_loading"
        assert httpx.get(url(server, "/v1/models"), timeout=5).status_code == 503
        live = httpx.get(url(server, "/livez"), timeout=5)
        assert live.status_code == 200 and live.json()["phase"] == "loading"

        hub.release.set()
        deadline = time.monotonic() + 60
        while httpx.get(url(server, "/health"), timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "\n".join(server.lines)
            time.sleep(0.1)
        assert httpx.get(url(server, "/v1/models"), timeout=5).status_code == 200
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0


# -- draining, on the real instruct model ---------------------------------------------------------

#: `<|endoftext|>` and `<|im_end|>` in SmolLM2's vocabulary.
SMOLLM2_END_TOKENS = (0, 2)


class Stream:
    """One streamed reply read on a thread: its SSE payloads, in order. A `long` one is a
    completion that cannot end early (SmolLM2's end tokens are biased out), so it runs until
    the drain ends it."""

    def __init__(self, server: Server, max_tokens: int, temperature: float, long: bool = False):
        self.events: list[str] = []
        self.status: int | None = None
        self.first = threading.Event()
        self.done = threading.Event()
        if long:
            path = "/v1/completions"
            body: dict[str, object] = {
                "prompt": "The lighthouse keeper's log, day one:",
                "logit_bias": {str(token): -100 for token in SMOLLM2_END_TOKENS},
            }
        else:
            path = "/v1/chat/completions"
            body = {
                "messages": [{"role": "user", "content": "Tell me a story about a lighthouse."}]
            }
        body.update(max_tokens=max_tokens, temperature=temperature, seed=7, stream=True)
        self._thread = threading.Thread(target=self._read, args=(server, path, body), daemon=True)
        self._thread.start()

    def _read(self, server: Server, path: str, body: dict[str, object]) -> None:
        try:
            with httpx.stream("POST", url(server, path), json=body, timeout=120) as reply:
                self.status = reply.status_code
                for line in reply.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line[len("data: ") :])
                        self.first.set()
        finally:
            self.first.set()
            self.done.set()

    @property
    def error(self) -> dict[str, object] | None:
        for event in self.events:
            if event != "[DONE]" and "error" in json.loads(event):
                error: dict[str, object] = json.loads(event)["error"]
                return error
        return None

    @property
    def finish(self) -> str | None:
        for event in self.events:
            if event != "[DONE]":
                for choice in json.loads(event).get("choices", []):
                    if choice.get("finish_reason"):
                        return str(choice["finish_reason"])
        return None


def test_sigterm_lets_running_streams_finish_refuses_new_work_and_exits_0(
    instruct_gguf: Path,
) -> None:
    args = [str(instruct_gguf), "--speculate", "auto", "--shutdown-timeout", "120"]
    with started(args, {"PATH": "/usr/bin:/bin"}) as server:
        streams = [Stream(server, max_tokens=300, temperature=0.0) for _ in range(2)]
        for stream in streams:
            assert stream.first.wait(60) and stream.status == 200
        server.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while httpx.get(url(server, "/health"), timeout=5).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        health = httpx.get(url(server, "/health"), timeout=5)
        assert health.status_code == 503 and health.json() == {"status": "draining"}
        refused = httpx.post(
            url(server, "/v1/chat/completions"),
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=5,
        )
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "shutting_down"
        assert httpx.get(url(server, "/livez"), timeout=5).json()["phase"] == "draining"
        for stream in streams:
            assert stream.done.wait(120)
            assert stream.error is None and stream.finish in ("stop", "length")
            assert stream.events[-1] == "[DONE]"
        assert server.process.wait(30) == 0
    assert any("superfluid: draining: " in line for line in server.lines)
    assert any("drained: every request finished; exiting" in line for line in server.lines)


def test_what_outlasts_the_shutdown_timeout_ends_with_an_error_event_and_exit_0(
    instruct_gguf: Path,
) -> None:
    args = [str(instruct_gguf), "--shutdown-timeout", "1"]
    with started(args, {"PATH": "/usr/bin:/bin"}) as server:
        stream = Stream(server, max_tokens=4000, temperature=1.0, long=True)
        assert stream.first.wait(60) and stream.status == 200
        server.process.send_signal(signal.SIGTERM)
        assert stream.done.wait(30)
        assert stream.error is not None and stream.error["code"] == "shutting_down"
        assert stream.events[-1] == "[DONE]"
        assert server.process.wait(30) == 0
    assert any("1 request ended unfinished" in line for line in server.lines)


def test_a_second_signal_ends_the_drain_at_once_the_same_clean_way(instruct_gguf: Path) -> None:
    args = [str(instruct_gguf), "--shutdown-timeout", "600", "--max-lanes", "1"]
    with started(args, {"PATH": "/usr/bin:/bin"}) as server:
        running = Stream(server, max_tokens=4000, temperature=1.0, long=True)
        assert running.first.wait(60)
        waiting: dict[str, object] = {}

        def ask() -> None:
            answer = httpx.post(
                url(server, "/v1/chat/completions"),
                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
                timeout=60,
            )
            waiting.update(status=answer.status_code, headers=answer.headers, body=answer.json())

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        deadline = time.monotonic() + 10
        while (
            server.metrics().get(("superfluid_queue_depth", (("model", instruct_gguf.name),))) != 1
        ):
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.05)
        server.process.send_signal(signal.SIGINT)
        asker.join(10)
        # The queued request never started: handed back at once, for a router to send elsewhere.
        assert waiting["status"] == 503
        assert waiting["headers"]["retry-after"] == "1"  # type: ignore[index]
        assert not running.done.is_set()  # the running one goes on
        server.process.send_signal(signal.SIGINT)
        assert running.done.wait(15)
        assert running.error is not None and running.error["code"] == "shutting_down"
        assert server.process.wait(15) == 0


def test_a_missing_second_model_is_refused_before_the_first_loads(
    instruct_gguf: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "not-there.gguf"
    status, lines = startup(
        [str(instruct_gguf), "--model", str(missing), "--speculate", "auto"],
        {"PATH": "/usr/bin:/bin"},
    )
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("superfluid: ") and str(missing) in lines[0]

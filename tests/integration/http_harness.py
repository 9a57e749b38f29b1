"""A real uvicorn server in a background thread, serving fake models, for the HTTP API tests.

Models served (all speculate with prompt-lookup, gates tuned so drafting never switches off):
- `fake-model`: FakeModel of order 1 without EOS: a repetitive prompt gives accepted drafts;
- `utf8-model`: every character takes two tokens (a lead byte, then a continuation byte);
- `slow-model`: each step sleeps, so a reply lasts long enough to walk away from.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence

import uvicorn

from superfluid.application.executor import Executor
from superfluid.application.ports import Feed, Logits
from superfluid.application.registration import Registration
from superfluid.application.service import GenerationService, ModelHost
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.spec_settings import SpecSettings
from superfluid.domain.strategies import Strategy
from superfluid.entrypoints.http.app import create_app
from tests.fakes import EOS, FakeModel, FakeRuntime

API_KEY = "test-key"
MAX_BODY_BYTES = 256 * 1024


class AlternatingModel(FakeModel):
    """Odd tokens open a two-byte character and even ones close it, so the model alternates."""

    def logits(self, context: Sequence[int]) -> Logits:
        row = super().logits(context).copy()
        opened = context[-1] % 2 == 1
        # After an opening byte only closing ones may follow, and after a closing one an opening.
        row[slice(1, None, 2) if opened else slice(0, None, 2)] = -1e9
        row[EOS] = -1e9
        return row


class SplitCharacterRuntime(FakeRuntime):
    """A detokenizer whose every character is split across two tokens."""

    def __init__(self) -> None:
        super().__init__(AlternatingModel(order=1, eos=False), context_size=1024)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return bytes(0xC3 + (t // 2) % 3 if t % 2 else 0x80 + (t // 2) % 64 for t in tokens)


class SlowRuntime(FakeRuntime):
    def __init__(self, seconds_per_step: float) -> None:
        super().__init__(FakeModel(order=1, eos=False), context_size=1 << 20)
        self._delay = seconds_per_step

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        time.sleep(self._delay)
        return super().step(feeds)


class RecordingMetrics:
    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []

    def exposition(self) -> tuple[bytes, str]:
        return b"superfluid_spec_proposed_total 0\n", "text/plain; version=0.0.4; charset=utf-8"

    def http_request(self, route: str, status: int) -> None:
        self.requests.append((route, status))


def speculating_host(name: str, runtime: FakeRuntime) -> ModelHost:
    caps = runtime.capabilities
    # No yield floor and no throughput gate: the tests need drafting to stay on, whatever the
    # timing of a fake model says.
    settings = SpecSettings(min_yield=0.0, throughput_gate=False, adaptive=False)
    policy = SpecPolicy(settings, default_depth=4, depth_cap=caps.max_verify_rows - 1)
    drafter = PromptLookupDrafter()
    executor = Executor(
        runtime, max_lanes=8, clock=time.perf_counter, drafter=drafter, policy=policy
    )
    registration = Registration(Strategy.PROMPT_LOOKUP, drafter, ())
    return ModelHost(name, runtime, registration, policy, executor)


class BackgroundServer:
    """uvicorn on 127.0.0.1, on a port the OS picked, in a daemon thread."""

    def __init__(self, app: object) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")  # type: ignore[arg-type]
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


class ServedModels:
    """The service, its hosts, the app's metrics stand-in and the server, started together."""

    def __init__(self) -> None:
        self.fake = speculating_host(
            "fake-model", FakeRuntime(FakeModel(order=1, eos=False), context_size=512)
        )
        self.utf8 = speculating_host("utf8-model", SplitCharacterRuntime())
        self.slow = speculating_host("slow-model", SlowRuntime(seconds_per_step=0.005))
        self.service = GenerationService([self.fake, self.utf8, self.slow])
        self.metrics = RecordingMetrics()
        app = create_app(
            self.service,
            metrics=self.metrics,
            api_key=API_KEY,
            max_body_bytes=MAX_BODY_BYTES,
        )
        self.server = BackgroundServer(app)

    def __enter__(self) -> ServedModels:
        self.service.start()
        self.server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop()
        self.service.stop()


def wait_for_idle(host: ModelHost, seconds: float = 5.0) -> int:
    """The host's active lanes once they reach 0, or what is left when time runs out."""
    deadline = time.monotonic() + seconds
    while host.executor.active_lanes and time.monotonic() < deadline:
        time.sleep(0.01)
    return host.executor.active_lanes

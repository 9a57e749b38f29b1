"""Two superfluid replicas behind real routers: HAProxy (`deploy/haproxy.cfg`) and smg
(`deploy/smg.sh`, session affinity on X-Session-ID), run as checked in, on loopback.

Each test starts its own replicas (SmolLM2 on llama.cpp, `--speculate auto`) and router:
- a session's turns land on one replica, and its second turn reuses the first turn's KV there;
- greedy replies through the router equal a single server's;
- a replica that is still loading gets no traffic, and gets it once it is ready;
- a rolling restart under load loses no request and lets no 5xx reach a client;
- a replica killed with SIGKILL fails only what was in flight on it.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from bench.replicas import (
    HAProxy,
    Replica,
    Router,
    Smg,
    chat,
    free_ports,
    router_missing,
)

from superfluid.adapters.fixtures.basert import make_fixtures
from tests.integration.hubs import StalledHub

pytestmark = pytest.mark.slow

ROUTERS = {"haproxy": HAProxy, "smg": Smg}


@pytest.fixture(params=sorted(ROUTERS))
def router_kind(request: pytest.FixtureRequest) -> type[Router]:
    missing = router_missing(request.param)
    if missing is not None:
        pytest.skip(missing)
    return ROUTERS[request.param]


@dataclass
class Pair:
    replicas: list[Replica]
    router: Router


@pytest.fixture
def pair(router_kind: type[Router], instruct_gguf: Path) -> Iterator[Pair]:
    replicas = [Replica(instruct_gguf, port).start() for port in free_ports(2)]
    router = router_kind(replicas)
    try:
        for replica in replicas:
            replica.wait_ready()
        router.start().wait_routable()
        yield Pair(replicas, router)
    finally:
        router.stop()
        for replica in replicas:
            replica.stop(signal.SIGKILL)
    for replica in replicas:
        assert "Traceback" not in replica.log(), replica.log()


def serving_replica(replicas: list[Replica], before: list[float]) -> int | None:
    """The one replica whose finished count moved since `before` (None: not exactly one)."""
    moved = [i for i, r in enumerate(replicas) if r.finished() != before[i]]
    return moved[0] if len(moved) == 1 else None


def content(reply: httpx.Response) -> str:
    assert reply.status_code == 200, reply.text
    text: str = reply.json()["choices"][0]["message"]["content"]
    return text


SYSTEM = (
    "You are a patient assistant for a lighthouse museum. Visitors ask about the keepers, the "
    "lamps and the ships; answer in a sentence or two, plainly, and say when you do not know."
)


def test_a_sessions_turns_land_on_one_replica_and_the_second_reuses_the_first(
    pair: Pair,
) -> None:
    replicas, router = pair.replicas, pair.router
    sessions = 8
    kept = 0
    served: set[int] = set()
    for index in range(sessions):
        key = f"visitor-{index}-{uuid.uuid4().hex[:8]}"
        turn = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Who kept the lamp in year {1850 + index}?"},
        ]
        before = [r.finished() for r in replicas]
        first = content(chat(router, turn, session=key, max_tokens=24))
        first_on = serving_replica(replicas, before)
        turn += [
            {"role": "assistant", "content": first},
            {"role": "user", "content": "And what fuel did the lamp burn?"},
        ]
        before = [r.finished() for r in replicas]
        reused = [r.reused() for r in replicas]
        content(chat(router, turn, session=key, max_tokens=24))
        second_on = serving_replica(replicas, before)
        grew = [r.reused() - reused[i] for i, r in enumerate(replicas)]
        if first_on is not None and second_on == first_on:
            other = 1 - first_on
            if grew[first_on] > 0 and grew[other] == 0:
                kept += 1
                served.add(first_on)
    assert kept / sessions >= 0.95, f"{kept} of {sessions} sessions kept their replica and KV"


def test_haproxy_routes_a_session_by_the_body_user_without_the_header(
    router_kind: type[Router], instruct_gguf: Path
) -> None:
    if router_kind is not HAProxy:
        pytest.skip("smg routes sessions by a header only")
    replicas = [Replica(instruct_gguf, port).start() for port in free_ports(2)]
    router = HAProxy(replicas)
    try:
        for replica in replicas:
            replica.wait_ready()
        router.start().wait_routable()
        for index in range(4):
            user = f"user-{index}-{uuid.uuid4().hex[:8]}"
            landed = set()
            for question in ("Name a lighthouse.", "Name another one.", "And a third?"):
                before = [r.finished() for r in replicas]
                reply = chat(router, question, user=user, max_tokens=4)
                assert reply.status_code == 200
                assert reply.headers["x-served-by"] in ("replica1", "replica2")
                landed.add(serving_replica(replicas, before))
            assert len(landed) == 1 and None not in landed, landed
    finally:
        router.stop()
        for replica in replicas:
            replica.stop(signal.SIGKILL)


def test_greedy_replies_through_the_router_equal_a_single_servers(pair: Pair) -> None:
    direct = pair.replicas[0]
    for index, question in enumerate(
        ["What is a lighthouse?", "Write a haiku about fog.", "Count from one to ten."]
    ):
        alone = content(chat(direct, question, max_tokens=48))
        routed = content(chat(pair.router, question, session=f"equal-{index}", max_tokens=48))
        assert routed == alone
        streamed = chat(
            pair.router, question, session=f"stream-{index}", max_tokens=48, stream=True
        )
        assert streamed.status_code == 200
        pieces = []
        for line in streamed.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[len("data: ") :])["choices"][0]["delta"]
                pieces.append(delta.get("content") or "")
        assert "".join(pieces) == alone


def test_a_replica_gets_no_traffic_until_it_is_ready(
    router_kind: type[Router], instruct_gguf: Path, tmp_path: Path
) -> None:
    """The second replica also serves a `.base` model whose loading the hub catalog holds, so
    it sits in its loading phase (port open, /health 503) for as long as the test needs."""
    hub = StalledHub()
    target = make_fixtures(tmp_path / "fixtures")["target"]
    ready = Replica(instruct_gguf, free_ports(1)[0]).start()
    loading = Replica(
        instruct_gguf,
        free_ports(1)[0],
        args=["--model", str(target)],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "SUPERFLUID_HOME": str(tmp_path / "sf"),
            "SUPERFLUID_CATALOG_URL": hub.url,
        },
    )
    router = router_kind([ready, loading])
    try:
        ready.wait_ready()
        router.start().wait_routable()
        loading.start()
        assert hub.asked.wait(60), "the second replica never reached its catalog fetch"
        replies = [chat(router, "Say yes.", session=f"early-{i}", max_tokens=2) for i in range(12)]
        assert [r.status_code for r in replies] == [200] * 12
        assert httpx.get(f"{loading.url}/health", timeout=5).status_code == 503  # still loading
        hub.release.set()
        loading.wait_ready()
        assert loading.finished() == 0  # nothing reached it while it loaded
        deadline = time.monotonic() + 30
        index = 0
        while loading.finished() == 0:  # once its checks pass, its share of sessions arrives
            assert time.monotonic() < deadline, "the ready replica never got traffic"
            assert (
                chat(router, "Say yes.", session=f"late-{index}", max_tokens=2).status_code == 200
            )
            index += 1
    finally:
        hub.close()
        router.stop()
        for replica in (ready, loading):
            replica.stop(signal.SIGKILL)


@dataclass
class Load:
    """A bounded client loop: `clients` threads sending short greedy requests (every other one
    streamed) through the router until stopped; each outcome is recorded."""

    router: Router
    clients: int = 3
    outcomes: list[tuple[int, str]] = field(default_factory=list)  # (status, what went wrong)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for client in range(self.clients):
            thread = threading.Thread(target=self._run, args=(client,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, client: int) -> None:
        sent = 0
        while not self._stop.is_set():
            stream = sent % 2 == 1
            key = f"load-{client}-{sent}"
            try:
                reply = chat(
                    self.router, f"Say the word {sent}.", session=key, max_tokens=8, stream=stream
                )
                self.outcomes.append((reply.status_code, _problem(reply, stream)))
            except httpx.HTTPError as error:
                self.outcomes.append((0, f"{type(error).__name__}: {error}"))
            sent += 1

    def stop(self) -> list[tuple[int, str]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(180)
        return self.outcomes


def _problem(reply: httpx.Response, stream: bool) -> str:
    """What is wrong with a reply ("" when it is a whole, good one)."""
    if reply.status_code != 200:
        return reply.text[:200]
    if not stream:
        return "" if reply.json()["choices"][0]["finish_reason"] else "no finish reason"
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "the stream was cut"
    if any('"error"' in event for event in events):
        return "an error event"
    return ""


def test_a_rolling_restart_under_load_loses_no_request(pair: Pair) -> None:
    load = Load(pair.router).start()
    time.sleep(2)
    for replica in pair.replicas:
        assert replica.stop(signal.SIGTERM) == 0  # drained, then exited cleanly
        replica.start().wait_ready()
        time.sleep(2.5)  # the router's checks see it back (rise 2 × 0.5 s; smg every 1 s)
    outcomes = load.stop()
    bad = [outcome for outcome in outcomes if outcome != (200, "")]
    assert len(outcomes) >= 20 and not bad, f"{len(bad)} of {len(outcomes)}: {bad[:5]}"
    for replica in pair.replicas:
        assert any("drained: " in line for line in replica.lines), replica.log()


def test_a_killed_replica_fails_only_its_requests_in_flight_and_leaves_the_rotation(
    pair: Pair,
) -> None:
    load = Load(pair.router).start()
    time.sleep(2)
    before = len(load.outcomes)
    pair.replicas[0].stop(signal.SIGKILL)
    killed_at = len(load.outcomes)
    time.sleep(4)  # several check intervals
    settled_at = len(load.outcomes)
    time.sleep(3)
    outcomes = load.stop()
    assert all(outcome == (200, "") for outcome in outcomes[:before]), outcomes[:before]
    # Whatever failed was in flight on the killed replica: at most one request per client,
    # finishing between the kill and the router's next check.
    failed = [o for o in outcomes[killed_at:settled_at] if o != (200, "")]
    assert len(failed) <= load.clients, failed
    after = outcomes[settled_at:]
    assert len(after) >= 5 and all(outcome == (200, "") for outcome in after), after[:5]

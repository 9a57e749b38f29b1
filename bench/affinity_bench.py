"""Does session affinity pay? Two superfluid replicas behind HAProxy and smg, multi-turn sessions
routed with and without a session key.

    .venv/bin/python -m bench.affinity_bench [--quick] [--sessions 8] [--turns 4] [--clients 2]
                                             [--rounds 2] [--configs NAME,...] [--out DIR]

A session is a growing chat: a system prompt, then a user turn holding a ledger of a few hundred
tokens generated from the session's seed (no two sessions share one, and every run's seeds are
new, so no server is sent a prompt twice) and a question about it; every later turn appends the
previous reply and a new question. Requests are greedy, streamed, `max_tokens` 48. `--clients`
clients work through the sessions at once, each its own sessions, turn after turn.

Configurations (each on two fresh replicas of SmolLM2, so no KV carries over):
  haproxy-affinity     deploy/haproxy.cfg, requests carry X-Session-ID
  haproxy-round-robin  deploy/haproxy.cfg, no key (HAProxy falls back to round robin)
  smg-affinity         deploy/smg.sh, SMG_POLICY=consistent_hashing, X-Session-ID
  smg-cache-aware      deploy/smg.sh, SMG_POLICY=cache_aware, X-Session-ID
  smg-round-robin      deploy/smg.sh, SMG_POLICY=round_robin
A router that is not installed is skipped (noted in the report). The configurations run in
rounds, the order reversed every other round, so drift in the machine's speed falls on all.

Each replica is pinned to a core of its own (`--no-pin` leaves them to share every core): two
llama.cpp processes whose threads share two cores stall each other at every step (measured on
the 2-core machine: a request on each replica at once took 18-34 s unpinned, 1 s pinned).

Writes `README.md` and `affinity_bench.raw.json` into `--out` (default
`docs/benchmarks/router-affinity-smollm2-2-replicas/`; `/tmp/superfluid-affinity-bench/quick`
with `--quick`); `--from-raw RAW` rewrites the report from a saved run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import random
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.http_bench import cpu_model, loadavg, log, nproc, wait_for_quiet
from bench.replicas import (
    MODEL,
    HAProxy,
    Replica,
    Router,
    Smg,
    chat,
    free_ports,
    router_missing,
)


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    router: str  # haproxy | smg
    policy: str | None  # smg's SMG_POLICY
    keyed: bool  # requests carry X-Session-ID
    affinity: bool  # the configuration routes a session's turns together

    @property
    def shown(self) -> str:
        if self.router == "haproxy":
            return "HAProxy, hash on X-Session-ID" if self.keyed else "HAProxy, no key"
        return f"smg, {self.policy}"


CONFIGS = (
    Config("haproxy-affinity", "haproxy", None, keyed=True, affinity=True),
    Config("haproxy-round-robin", "haproxy", None, keyed=False, affinity=False),
    Config("smg-affinity", "smg", "consistent_hashing", keyed=True, affinity=True),
    Config("smg-cache-aware", "smg", "cache_aware", keyed=True, affinity=True),
    Config("smg-round-robin", "smg", "round_robin", keyed=False, affinity=False),
)
BY_NAME = {c.name: c for c in CONFIGS}
QUICK_CONFIGS = ("haproxy-affinity", "smg-affinity")
RAW = "affinity_bench.raw.json"

# -- the workload ----------------------------------------------------------------------------

SYSTEM = (
    "You are a careful clerk. The user gives you a ledger and asks about it; answer in one or "
    "two sentences, quoting the ledger's words."
)
FIRST = (
    "Ada", "Bram", "Cora", "Dmitri", "Edda", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kaia",
    "Lorenz", "Mirela", "Nils", "Odile", "Pavel", "Quinn", "Rosa", "Soren", "Talia", "Ulrich",
    "Vera", "Wendel", "Xenia", "Yusuf", "Zora",
)  # fmt: skip
LAST = (
    "Abbott", "Brandt", "Castell", "Dunmore", "Ellery", "Fairweather", "Gallo", "Harrow",
    "Iverson", "Jasper", "Kessler", "Lindqvist", "Marlow", "Novak", "Oakes", "Pell", "Quarrie",
    "Rook", "Sandoval", "Thorne", "Underhill", "Vance", "Whitlock", "Yates",
)  # fmt: skip
PLACES = (
    "the north quay", "the salt store", "the east gate", "the ropewalk", "the lower wharf",
    "the chandlery", "the tide mill", "the customs shed", "the signal tower", "the dry dock",
    "the fish market", "the bonded warehouse", "the pilot station", "the coal yard",
)  # fmt: skip
GOODS = (
    "barrels of tar", "crates of lamp oil", "bales of wool", "sacks of barley", "coils of rope",
    "casks of cider", "chests of tea", "bundles of oak staves", "boxes of candles",
    "rolls of sailcloth", "tins of biscuit", "jars of pitch", "bolts of linen", "kegs of nails",
)  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
REMARKS = (
    "two of them were found damp", "the count was checked twice", "the cart lost a wheel",
    "the harbour master signed for them", "a gull stole the receipt", "the rain held off",
    "the seals were broken", "the tally was short by one", "the night watch helped",
    "the weight matched the bill", "a second porter was hired", "the lamp went out twice",
)  # fmt: skip
ENTRIES = 12


@dataclass(frozen=True, slots=True)
class Entry:
    number: int
    day: str
    person: str
    count: int
    goods: str
    source: str
    target: str
    remark: str

    def line(self) -> str:
        return (
            f"Entry {self.number}: on {self.day} {self.person} moved {self.count} {self.goods} "
            f"from {self.source} to {self.target}; {self.remark}."
        )


@dataclass(frozen=True, slots=True)
class SessionPlan:
    seed: int
    document: str
    questions: tuple[str, ...]


def session_plan(seed: int, turns: int) -> SessionPlan:
    """The session's ledger and its `turns` questions, all from `seed`."""
    rng = random.Random(seed)
    entries = []
    for number in range(1, ENTRIES + 1):
        source, target = rng.sample(PLACES, 2)
        entries.append(
            Entry(
                number=number,
                day=rng.choice(DAYS),
                person=f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                count=rng.randint(2, 480),
                goods=rng.choice(GOODS),
                source=source,
                target=target,
                remark=rng.choice(REMARKS),
            )
        )
    keeper = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    header = f"Ledger {seed:08x} of the harbour depot, kept by {keeper}."
    document = "\n".join([header, *(entry.line() for entry in entries)])
    asked = rng.sample(entries, min(turns, len(entries)))
    while len(asked) < turns:
        asked.append(rng.choice(entries))
    forms = (
        lambda e: f"Who moved the {e.goods} in entry {e.number}, and on which day?",
        lambda e: f"Where did the {e.goods} of entry {e.number} go, and what was noted?",
        lambda e: f"How many {e.goods} did {e.person} move, and from where?",
        lambda e: f"What happened in entry {e.number}? Quote it.",
    )
    questions = tuple(forms[(index + seed) % len(forms)](e) for index, e in enumerate(asked))
    return SessionPlan(seed, document, questions)


def first_messages(plan: SessionPlan) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{plan.document}\n\n{plan.questions[0]}"},
    ]


def session_seed(round_: int, config_index: int, session: int) -> int:
    """Distinct for every round, configuration and session: no prompt is sent twice."""
    return 1_000_003 * (round_ + 1) + 10_007 * (config_index + 1) + session


# -- records ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Turn:
    session: int
    turn: int  # 1-based
    sent: float  # seconds since the run began
    ttft: float | None = None  # to the first chunk with text
    seconds: float | None = None  # to the end of the stream
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    replica: int | None = None  # 0 or 1, from the router's header
    error: str | None = None


@dataclass(slots=True)
class SessionRecord:
    index: int
    seed: int
    key: str
    client: int
    seconds: float | None = None  # wall time, first request sent to last reply's end
    turns: list[Turn] = field(default_factory=list)


@dataclass(slots=True)
class Run:
    config: str
    round: int
    position: int  # place in the round's order
    load_before: str
    seconds: float = 0.0
    sessions: list[SessionRecord] = field(default_factory=list)
    counters_before: list[dict[str, float]] = field(default_factory=list)
    counters_after: list[dict[str, float]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # errors outside requests


COUNTERS = {
    "requests": "superfluid_requests_total",
    "reused": "superfluid_prefix_reused_tokens_total",
    "prefill": "superfluid_prefill_tokens_total",
}


def counters(replica: Replica) -> dict[str, float]:
    totals = replica.metrics()
    return {short: totals.get(name, 0.0) for short, name in COUNTERS.items()}


# -- one turn, one session, one run ----------------------------------------------------------


def served_by(response: httpx.Response, replicas: Sequence[Replica]) -> int | None:
    """The replica that answered: HAProxy's X-Served-By (replica1, replica2), smg's
    X-Smg-Routed-Worker-Id (the worker's URL)."""
    name = response.headers.get("x-served-by")
    if name in ("replica1", "replica2"):
        return int(name[-1]) - 1
    worker = response.headers.get("x-smg-routed-worker-id")
    for index, replica in enumerate(replicas):
        if worker is not None and worker.rstrip("/") == replica.url:
            return index
    return None


def stream_turn(
    client: httpx.Client,
    router: Router,
    replicas: Sequence[Replica],
    messages: list[dict[str, str]],
    key: str | None,
    max_tokens: int,
    turn: Turn,
    origin: float,
) -> str:
    """Send one streamed greedy turn; fills `turn` and returns the reply's text."""
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"X-Session-ID": key} if key else {}
    pieces: list[str] = []
    began = time.monotonic()
    turn.sent = began - origin
    try:
        with client.stream(
            "POST", f"{router.url}/v1/chat/completions", json=body, headers=headers
        ) as response:
            turn.replica = served_by(response, replicas)
            if response.status_code != 200:
                turn.error = f"HTTP {response.status_code}: {response.read()[:200]!r}"
                return ""
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: ") :])
                if "error" in chunk:
                    turn.error = f"stream error: {chunk['error']}"
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        if turn.ttft is None:
                            turn.ttft = time.monotonic() - began
                        pieces.append(text)
                usage = chunk.get("usage")
                if usage:
                    turn.prompt_tokens = usage.get("prompt_tokens")
                    turn.completion_tokens = usage.get("completion_tokens")
    except httpx.HTTPError as error:
        turn.error = f"{type(error).__name__}: {error}"
    turn.seconds = time.monotonic() - began
    if turn.error is None and (turn.ttft is None or turn.prompt_tokens is None):
        turn.error = "no text" if turn.ttft is None else "no usage"
    return "".join(pieces)


def run_session(
    client: httpx.Client,
    router: Router,
    replicas: Sequence[Replica],
    record: SessionRecord,
    plan: SessionPlan,
    keyed: bool,
    max_tokens: int,
    origin: float,
) -> None:
    messages = first_messages(plan)
    began = time.monotonic()
    for number, question in enumerate(plan.questions, start=1):
        if number > 1:
            messages.append({"role": "user", "content": question})
        turn = Turn(record.index, number, 0.0)
        record.turns.append(turn)
        key = record.key if keyed else None
        reply = stream_turn(client, router, replicas, messages, key, max_tokens, turn, origin)
        if turn.error is not None:
            return  # a session cannot go on without its reply
        messages.append({"role": "assistant", "content": reply})
    record.seconds = time.monotonic() - began


def router_for(config: Config, replicas: Sequence[Replica]) -> Router:
    if config.router == "haproxy":
        return HAProxy(replicas)
    assert config.policy is not None
    return Smg(replicas, policy=config.policy)


@contextlib.contextmanager
def pinned_to(cpu: int | None) -> Iterator[None]:
    """Processes started inside run on `cpu` alone (a child inherits its parent's affinity)."""
    if cpu is None:
        yield
        return
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mask)


def replica_cpus(pin: bool) -> list[int | None]:
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return [None, None]
    return [cpus[0], cpus[1]]


def stop_replica(replica: Replica) -> None:
    try:
        replica.stop(signal.SIGTERM, timeout=30)
    except subprocess.TimeoutExpired:
        replica.stop(signal.SIGKILL)


def measure_run(
    args: argparse.Namespace, config: Config, round_: int, position: int, model: Path
) -> Run:
    config_index = CONFIGS.index(config)
    run = Run(config.name, round_, position, load_before=loadavg())
    replicas: list[Replica] = []
    router: Router | None = None
    try:
        for port, cpu in zip(free_ports(2), replica_cpus(args.pin), strict=True):
            with pinned_to(cpu):
                replicas.append(Replica(model, port).start())
        for replica in replicas:
            replica.wait_ready()
            chat(replica, "ping", max_tokens=1)  # each replica's first request, untimed
        router = router_for(config, replicas).start()
        router.wait_routable()
        run.counters_before = [counters(r) for r in replicas]
        plans = [
            session_plan(session_seed(round_, config_index, s), args.turns)
            for s in range(args.sessions)
        ]
        run.sessions = [
            SessionRecord(
                s, plan.seed, f"{config.name}-r{round_}-s{s}-{plan.seed:08x}", s % args.clients
            )
            for s, plan in enumerate(plans)
        ]
        origin = time.monotonic()
        live_router = router

        def work(client_index: int) -> None:
            with httpx.Client(timeout=600) as client:
                for record in run.sessions:
                    if record.client == client_index:
                        run_session(
                            client,
                            live_router,
                            replicas,
                            record,
                            plans[record.index],
                            config.keyed,
                            args.max_tokens,
                            origin,
                        )

        threads = [threading.Thread(target=work, args=(c,)) for c in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        run.seconds = time.monotonic() - origin
        run.counters_after = [counters(r) for r in replicas]
    finally:
        if router is not None:
            router.stop()
        for replica in replicas:
            stop_replica(replica)
    for index, replica in enumerate(replicas):
        if "Traceback" in replica.log():
            run.problems.append(f"replica {index + 1} logged a traceback")
    return run


# -- figures ---------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _p90(values: Sequence[float]) -> float | None:
    """Nearest rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def shared_time(turns: Sequence[dict[str, Any]]) -> float | None:
    """The share of request time during which another request ran on the same replica (a
    replica is one core: two requests on it at once each go at about half speed)."""
    spans = [
        (t["replica"], t["sent"], t["sent"] + t["seconds"])
        for t in turns
        if t["seconds"] is not None and t["replica"] is not None
    ]
    total = sum(end - start for _, start, end in spans)
    if not total:
        return None
    overlap = 0.0
    for index, (replica, start, end) in enumerate(spans):
        shared: list[tuple[float, float]] = []
        for other, (where, begin, finish) in enumerate(spans):
            if other != index and where == replica and begin < end and finish > start:
                shared.append((max(start, begin), min(end, finish)))
        covered, reach = 0.0, start
        for begin, finish in sorted(shared):  # the union: three at once count once
            if finish > reach:
                covered += finish - max(begin, reach)
                reach = finish
        overlap += covered
    return overlap / total


def run_figures(run: dict[str, Any]) -> dict[str, Any]:
    """One run's figures, from its raw record (as saved)."""
    sessions = run["sessions"]
    turns = [t for s in sessions for t in s["turns"]]
    good = [t for t in turns if t["error"] is None]
    later = [t for t in good if t["turn"] > 1]
    errors = sum(1 for t in turns if t["error"] is not None) + len(run["problems"])
    errors += sum(
        1 for s in sessions if s["seconds"] is None and not any(t["error"] for t in s["turns"])
    )
    before, after = run["counters_before"], run["counters_after"]
    delta = (
        [{k: a[k] - b[k] for k in COUNTERS} for a, b in zip(after, before, strict=True)]
        if after
        else []
    )
    reused = sum(d["reused"] for d in delta) if delta else None
    later_prompt = sum(t["prompt_tokens"] for t in later)
    all_prompt = sum(t["prompt_tokens"] for t in good)
    by_header = [sum(1 for t in turns if t["replica"] == i) for i in range(2)]
    by_counter = [int(d["requests"]) for d in delta]
    whole = [s for s in sessions if s["seconds"] is not None]
    one_replica = sum(
        1
        for s in whole
        if len({t["replica"] for t in s["turns"]}) == 1 and s["turns"][0]["replica"] is not None
    )
    fed = sum(d["prefill"] for d in delta) if delta else None
    return {
        "session_s": _median([s["seconds"] for s in whole]),
        "ttft_first": _median([t["ttft"] for t in good if t["turn"] == 1]),
        "ttft_later": _median([t["ttft"] for t in later]),
        "ttft_later_p90": _p90([t["ttft"] for t in later]),
        "reused": reused,
        "later_prompt_tokens": later_prompt,
        "prompt_tokens": all_prompt,
        "fed": fed,
        "shared": shared_time(turns),
        "reused_share": reused / later_prompt if reused is not None and later_prompt else None,
        "one_replica": one_replica / len(whole) if whole else None,
        "per_replica": by_header,
        "per_replica_counters": by_counter,
        "counters_agree": by_counter == by_header,
        "errors": errors,
        "requests": len(turns),
    }


def summary(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per configuration: the median over rounds of each figure; errors summed."""
    out: dict[str, dict[str, Any]] = {}
    for name in raw["settings"]["configs"]:
        runs = [r for r in raw["runs"] if r["config"] == name]
        if not runs:
            continue
        figures = [run_figures(r) for r in runs]

        def over_rounds(key: str, figures: list[dict[str, Any]] = figures) -> float | None:
            return _median([f[key] for f in figures if f[key] is not None])

        out[name] = {
            "rounds": len(runs),
            **{
                key: over_rounds(key)
                for key in (
                    "session_s",
                    "ttft_first",
                    "ttft_later",
                    "ttft_later_p90",
                    "reused",
                    "reused_share",
                    "one_replica",
                    "shared",
                )
            },
            "per_replica": [f["per_replica"] for f in figures],
            "counters_agree": all(f["counters_agree"] for f in figures),
            "errors": sum(f["errors"] for f in figures),
            "requests": sum(f["requests"] for f in figures),
        }
    return out


def paired(raw: dict[str, Any], config: str, baseline: str, key: str) -> float | None:
    """Median over rounds of config's figure over the baseline's in the same round."""
    ratios = []
    for round_ in range(raw["settings"]["rounds"]):
        top = [r for r in raw["runs"] if r["config"] == config and r["round"] == round_]
        bottom = [r for r in raw["runs"] if r["config"] == baseline and r["round"] == round_]
        if top and bottom:
            a, b = run_figures(top[0])[key], run_figures(bottom[0])[key]
            if a is not None and b:
                ratios.append(a / b)
    return _median(ratios)


# -- the report ------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def _int(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _rows(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def baseline_of(name: str) -> str | None:
    config = BY_NAME[name]
    if not config.affinity:
        return None
    return f"{config.router}-round-robin"


def main_table(raw: dict[str, Any], figures: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for name, f in figures.items():
        config = BY_NAME[name]
        spread = ", ".join("/".join(map(str, counts)) for counts in f["per_replica"])
        rows.append(
            [
                f"**{name}**",
                config.shown,
                _s(f["session_s"]),
                f"{_ms(f['ttft_later'])} / {_ms(f['ttft_later_p90'])}",
                _ms(f["ttft_first"]),
                _int(f["reused"]),
                _pct(f["reused_share"]),
                _pct(f["one_replica"]),
                _pct(f["shared"]),
                spread,
                str(f["errors"]),
            ]
        )
    return _rows(
        (
            "configuration",
            "router, routing",
            "session s",
            "later-turn TTFT ms (median / p90)",
            "first-turn TTFT ms",
            "prefix tokens reused",
            "reused / later-turn prompt tokens",
            "sessions on one replica",
            "replica shared",
            "requests per replica (each round)",
            "errors",
        ),
        rows,
    )


def change_table(raw: dict[str, Any], figures: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for name in figures:
        baseline = baseline_of(name)
        if baseline is None or baseline not in figures:
            continue
        rows.append(
            [
                f"**{name}** vs {baseline}",
                _x(paired(raw, name, baseline, "ttft_later")),
                _x(paired(raw, name, baseline, "ttft_later_p90")),
                _x(paired(raw, name, baseline, "ttft_first")),
                _x(paired(raw, name, baseline, "session_s")),
            ]
        )
    if not rows:
        return []
    return [
        "What affinity changes against the same router's round robin (median over rounds of "
        "the ratio within a round; below 1 is faster):",
        "",
        *_rows(
            (
                "configuration",
                "later-turn TTFT (median)",
                "later-turn TTFT (p90)",
                "first-turn TTFT",
                "session time",
            ),
            rows,
        ),
    ]


def rounds_table(raw: dict[str, Any]) -> list[str]:
    rows = []
    for run in sorted(raw["runs"], key=lambda r: (r["round"], r["position"])):
        f = run_figures(run)
        rows.append(
            [
                str(run["round"] + 1),
                run["config"],
                f"`{' '.join(run['load_before'].split()[:3])}`",
                f"{run['seconds']:.1f}",
                _s(f["session_s"]),
                _ms(f["ttft_later"]),
                _ms(f["ttft_first"]),
                _int(f["reused"]),
                _pct(f["reused_share"]),
                _pct(f["one_replica"]),
                _pct(f["shared"]),
                "/".join(map(str, f["per_replica"])),
                str(f["errors"]),
            ]
        )
    return _rows(
        (
            "round",
            "configuration (in order)",
            "load at start",
            "run s",
            "session s",
            "later-turn TTFT ms",
            "first-turn TTFT ms",
            "reused",
            "reused share",
            "one replica",
            "replica shared",
            "per replica",
            "errors",
        ),
        rows,
    )


def findings(raw: dict[str, Any], figures: dict[str, dict[str, Any]]) -> list[str]:
    """Sentences read off the figures: each affinity configuration against its router's round
    robin."""
    lines = []
    for name, f in figures.items():
        baseline = baseline_of(name)
        if baseline is None or baseline not in figures:
            continue
        b = figures[baseline]
        lines.append(
            f"- **{name}** kept {_pct(f['one_replica'])} of sessions on one replica "
            f"({baseline}: {_pct(b['one_replica'])}) and reused "
            f"{_pct(f['reused_share'])} of later turns' prompt tokens "
            f"({baseline}: {_pct(b['reused_share'])}). Later-turn TTFT was "
            f"{_ms(f['ttft_later'])} ms against {_ms(b['ttft_later'])} ms "
            f"({_x(paired(raw, name, baseline, 'ttft_later'))} paired by round), first-turn "
            f"TTFT {_ms(f['ttft_first'])} against {_ms(b['ttft_first'])} ms, session time "
            f"{_s(f['session_s'])} s against {_s(b['session_s'])} s "
            f"({_x(paired(raw, name, baseline, 'session_s'))}); requests shared their replica "
            f"{_pct(f['shared'])} of the time ({baseline}: {_pct(b['shared'])})."
        )
    return lines or ["- No round-robin configuration was measured beside an affinity one."]


def markdown(raw: dict[str, Any]) -> str:
    s, m = raw["settings"], raw["machine"]
    figures = summary(raw)
    pinning = (
        "each replica pinned to a core of its own (`sched_setaffinity`; llama.cpp then runs "
        "one thread per replica)"
        if s["pin"]
        else "replicas unpinned, sharing every core"
    )
    lines = [
        "# Router affinity: does session affinity pay?",
        "",
        "Generated by `bench/affinity_bench.py`; do not edit by hand (run it again).",
        "",
        "Two `superfluid serve` replicas of SmolLM2-135M-Instruct (`--speculate auto`, their "
        "defaults otherwise) behind the project's routers as checked in (`deploy/haproxy.cfg`, "
        "`deploy/smg.sh`), on loopback. Multi-turn sessions go through the router with a "
        "session key (affinity) and without one (round robin); the question is what routing a "
        "conversation's turns to one replica changes: prefix reuse (a replica keeps a finished "
        "request's KV and prefills only what is new, ADR 0009) and with it a later turn's time "
        "to first token.",
        "",
        "## Machine and run",
        "",
        f"- CPU: {m['cpu']}, `nproc` = {m['nproc']}; {pinning}",
        f"- date: {raw['date']}; the whole run took {raw['minutes']:.1f} minutes",
        f"- `/proc/loadavg` when measuring began: `{m['load_before']}`; at the end: "
        f"`{m['load_after']}`",
        f"- Python {m['python']}; model `{s['model']}`; routers: {', '.join(m['routers'])}",
        f"- {s['sessions']} sessions of {s['turns']} turns per run, {s['clients']} clients, "
        f"`max_tokens` {s['max_tokens']}, greedy, streamed; {s['rounds']} round(s), each "
        "configuration once per round on two fresh replicas, the order reversed every other "
        "round",
        "",
        "```sh",
        raw["command"],
        "```",
        "",
    ]
    if raw["notes"]:
        lines += ["Notes:", "", *(f"- {note}" for note in raw["notes"]), ""]
    lines += [
        "## Results",
        "",
        "Medians over rounds of each run's figure (a run's session time and TTFTs are "
        "medians, or the 90th percentile, over its sessions' turns); errors are summed.",
        "",
        *main_table(raw, figures),
        *change_table(raw, figures),
        "## What the numbers show",
        "",
        *findings(raw, figures),
        "",
        "Session time depends on more than reuse here. A replica is one core, and two "
        "requests on one replica at once each go at about half speed; *replica shared* is the "
        "share of request time during which the other client's request ran on the same "
        "replica. Hashing places a session without regard to load, so where the two clients' "
        "current sessions land together varies from run to run (placed at random it would be "
        "about two thirds of the time, since shared requests last longer); a router that "
        "places a new session by load can keep it near zero. Between configurations that "
        "reuse alike, this is what is left to set their session times apart.",
        "",
        "What they do not show: both replicas run on one 2-core machine, a core each, and the "
        "routers and the clients share those cores, so absolute times are this machine's, and "
        "a replica's prefill speed (which sets what reuse saves) is one core's. The model is "
        "135M parameters: on a larger model a later turn's prefill costs more and reuse saves "
        "more, in proportion. Two replicas and two clients are the smallest case; with more "
        "replicas round robin sends a session's next turn to the replica that holds its KV "
        "less often.",
        "",
        "## Each run",
        "",
        *rounds_table(raw),
        "## Method",
        "",
        "- **Sessions.** A system prompt (shared by all sessions; shorter than a quarter of any "
        "first prompt, so by ADR 0009's rule no first turn reuses another session's KV), then a "
        f"user turn with a ledger of {ENTRIES} entries generated from the session's seed "
        "(names, goods, places, numbers; a few hundred tokens) and a question; each later turn "
        "appends the reply and a new question about another entry. Seeds differ for every "
        "round, configuration and session, so no prompt reaches a server twice.",
        "- **Clients.** Client *c* runs sessions *c*, *c* + clients, ... one after another, "
        "each turn after the previous reply; the clients run at once. A failed turn ends its "
        "session (counted in errors).",
        "- **TTFT** is the time from sending a request to the first stream chunk with text, "
        "through the router. *Later-turn* is turns 2 and on. *Session time* is a session's wall "
        "time, from its first request to its last reply.",
        "- **Reuse.** `superfluid_prefix_reused_tokens_total`, summed over both replicas, its "
        "change over the measured sessions (the replicas' untimed first requests and the "
        "router's readiness pings come before). The share divides it by the prompt tokens "
        "(`usage.prompt_tokens`) of turns 2 and on.",
        "- **Sessions on one replica.** Every reply names its replica: HAProxy's `X-Served-By`, "
        "smg's `X-Smg-Routed-Worker-Id`. The per-replica counts are checked against each "
        "replica's `superfluid_requests_total` change"
        + (
            ""
            if all(f["counters_agree"] for f in figures.values())
            else " (they disagreed in a run: see the raw JSON)"
        )
        + ".",
        "- **Configurations.** HAProxy hashes X-Session-ID (consistent hashing); without a key "
        "it goes round robin. smg's `consistent_hashing` hashes X-Session-ID; `cache_aware` "
        "routes by the longest prompt prefix it sent each replica, with X-Session-ID as an "
        "override key (`deploy/smg.sh`); `round_robin` ignores keys. Fresh replicas for every "
        "run: no KV, and no learned speculation gate, carries from one run to the next.",
        "- **Pinning.** llama.cpp's threads spin at a barrier between operations; two replicas "
        "whose threads share two cores stall each other (a request on each replica at once: "
        "18-34 s unpinned against 1 s pinned, measured on this machine). Each replica is "
        "started with its affinity set to one core (`--no-pin` turns this off), as a replica "
        "on a machine of its own would not compete.",
        f"- Raw per-turn records and counters: `{RAW}` beside this page (ignored by git).",
    ]
    return "\n".join(lines).rstrip() + "\n"


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 sessions of 2 turns, 1 round, one affinity configuration per router",
    )
    parser.add_argument("--sessions", type=int, help="sessions per run (default 8; quick 2)")
    parser.add_argument("--turns", type=int, help="turns per session (default 4; quick 2)")
    parser.add_argument("--clients", type=int, default=2, help="concurrent clients (default 2)")
    parser.add_argument("--rounds", type=int, help="rounds of every configuration (default 2)")
    parser.add_argument("--max-tokens", type=int, default=48, help="per reply (default 48)")
    parser.add_argument(
        "--configs",
        help=f"comma-separated, of: {', '.join(c.name for c in CONFIGS)} (default all; quick "
        f"{','.join(QUICK_CONFIGS)})",
    )
    parser.add_argument("--model", type=Path, help="GGUF (default: the instruct SmolLM2)")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="leave replicas on every core"
    )
    parser.add_argument("--out", type=Path, help="where README.md and the raw JSON go")
    parser.add_argument("--wait-load", type=float, help="1-minute load to wait for (default 0.7)")
    parser.add_argument("--wait-max", type=float, default=600.0, help="seconds to wait at most")
    parser.add_argument("--from-raw", type=Path, help="only write the report from a saved raw JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    args.sessions = args.sessions or (2 if quick else 8)
    args.turns = args.turns or (2 if quick else 4)
    args.rounds = args.rounds or (1 if quick else 2)
    names = (
        args.configs.split(",")
        if args.configs
        else (list(QUICK_CONFIGS) if quick else [c.name for c in CONFIGS])
    )
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")
    args.configs = names
    if args.clients < 1 or args.sessions < 1 or args.turns < 1 or args.rounds < 1:
        parser.error("--clients, --sessions, --turns and --rounds must be at least 1")
    args.wait_load = (0.0 if quick else 0.7) if args.wait_load is None else args.wait_load
    args.out = args.out or (
        Path("/tmp/superfluid-affinity-bench/quick")
        if quick
        else Path("docs/benchmarks/router-affinity-smollm2-2-replicas")
    )
    return args


def default_model() -> Path:
    from superfluid.adapters.llamacpp.demo_model import instruct_model_path

    return Path(instruct_model_path())


def _stop_on_sigterm() -> Any:
    """SIGTERM exits through the cleanup, so no replica or router is left running."""

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def write_report(raw: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(markdown(raw))
    log(f"wrote {out / 'README.md'}")


def measure(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    model = args.model or default_model()
    notes: list[str] = []
    configs = []
    for name in args.configs:
        config = BY_NAME[name]
        missing = router_missing(config.router)
        if missing is not None:
            notes.append(f"{name} skipped: {missing}")
            log(f"{name} skipped: {missing}")
            continue
        configs.append(config)
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        notes.append("fewer than 2 cores: the replicas are not pinned")
    wait_for_quiet(args.wait_load, args.wait_max)
    began, load_before = time.monotonic(), loadavg()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if float(load_before.split()[0]) >= args.wait_load > 0:
        notes.append(
            f"measuring began with a 1-minute load of {load_before.split()[0]} "
            f"(≥ {args.wait_load}): figures are noisier"
        )
    runs: list[Run] = []
    for round_ in range(args.rounds):
        order = configs if round_ % 2 == 0 else configs[::-1]
        for position, config in enumerate(order):
            log(f"round {round_ + 1}: {config.name}")
            run = measure_run(args, config, round_, position, model)
            f = run_figures(asdict(run))
            log(
                f"  {run.seconds:.1f} s; session {_s(f['session_s'])} s; later-turn TTFT "
                f"{_ms(f['ttft_later'])} ms; first {_ms(f['ttft_first'])} ms; reused "
                f"{_int(f['reused'])} ({_pct(f['reused_share'])}); one replica "
                f"{_pct(f['one_replica'])}; per replica {f['per_replica']}; errors {f['errors']}"
            )
            runs.append(run)
    shown_argv = argv if argv is not None else sys.argv[1:]
    raw: dict[str, Any] = {
        "command": f".venv/bin/python -m bench.affinity_bench {shlex.join(shown_argv)}".rstrip(),
        "date": date,
        "minutes": (time.monotonic() - began) / 60.0,
        "machine": {
            "cpu": cpu_model(),
            "nproc": str(nproc()),
            "load_before": load_before,
            "load_after": loadavg(),
            "python": platform.python_version(),
            "routers": sorted({c.router for c in configs}) or ["none"],
        },
        "settings": {
            "sessions": args.sessions,
            "turns": args.turns,
            "clients": args.clients,
            "rounds": args.rounds,
            "max_tokens": args.max_tokens,
            "configs": [c.name for c in configs],
            "pin": args.pin,
            "model": model.name,
            "quick": args.quick,
        },
        "notes": notes,
        "runs": [asdict(run) for run in runs],
    }
    raw["summary"] = summary(raw)
    return raw


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    before = _stop_on_sigterm()
    try:
        if args.from_raw is not None:
            raw = json.loads(args.from_raw.read_text())
        else:
            raw = measure(args, argv)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / RAW).write_text(json.dumps(raw, indent=1) + "\n")
        write_report(raw, args.out)
    finally:
        signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    main()

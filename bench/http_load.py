"""Clients and metrics: one round of N concurrent requests, and `/metrics` before and after.

A round starts N requests at once with the official `openai` client (AsyncOpenAI), streaming
off, and waits for all of them. Tokens come from `usage.completion_tokens`; each request's
latency is measured around its own call, so a client's rate includes prefill, queueing and
HTTP, as a user sees it. A round's aggregate rate is all its tokens over the time from its
first request to its last reply.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from bench.http_workloads import Workload


@dataclass(frozen=True, slots=True)
class Reply:
    variant: str
    tokens: int
    seconds: float
    finish: str
    proposed: int = 0  # from the reply's `superfluid.spec`, when it has one
    accepted: int = 0


@dataclass(frozen=True, slots=True)
class Round:
    replies: tuple[Reply, ...]
    wall: float

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.replies)

    @property
    def aggregate(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else 0.0

    @property
    def per_client(self) -> float:
        rates = [r.tokens / r.seconds for r in self.replies if r.seconds > 0]
        return statistics.fmean(rates) if rates else 0.0


@dataclass(frozen=True, slots=True)
class Request:
    """What every request of a cell shares."""

    model: str
    temperature: float
    max_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)  # system-specific body fields


def client_for(base: str, clients: int) -> openai.AsyncOpenAI:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    return openai.AsyncOpenAI(
        base_url=f"{base}/v1",
        api_key="unused",
        max_retries=0,
        timeout=900.0,
        http_client=httpx.AsyncClient(limits=limits, timeout=900.0),
    )


async def _one(
    client: openai.AsyncOpenAI, workload: Workload, request: Request, index: int, run: int
) -> Reply:
    variant = workload.variant(index, run)
    common: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "seed": 1000 * run + index,
    }
    if request.extra:
        common["extra_body"] = dict(request.extra)
        if "top_p" in request.extra:
            common["top_p"] = common["extra_body"].pop("top_p")
    began = time.perf_counter()
    if workload.chat:
        chat = await client.chat.completions.create(
            messages=[{"role": "user", "content": variant.text}], **common
        )
        usage, finish, extension = chat.usage, chat.choices[0].finish_reason, chat.model_extra
    else:
        text = await client.completions.create(prompt=variant.text, **common)
        usage, finish, extension = text.usage, text.choices[0].finish_reason, text.model_extra
    seconds = time.perf_counter() - began
    spec = ((extension or {}).get("superfluid") or {}).get("spec") or {}
    return Reply(
        variant.name,
        usage.completion_tokens if usage is not None else 0,
        seconds,
        str(finish),
        int(spec.get("proposed", 0)),
        int(spec.get("accepted", 0)),
    )


async def one_round(
    client: openai.AsyncOpenAI, workload: Workload, request: Request, clients: int, run: int
) -> Round:
    began = time.perf_counter()
    replies = await asyncio.gather(
        *(_one(client, workload, request, i, run) for i in range(clients))
    )
    return Round(tuple(replies), time.perf_counter() - began)


# -- /metrics ---------------------------------------------------------------------------------

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str) -> Samples:
    """Every sample of `/metrics`, keyed by name and sorted labels (the `model` label dropped:
    one model is served)."""
    text = httpx.get(f"{base}/metrics", timeout=30.0).text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model"))
            samples[(sample.name, labels)] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@dataclass(frozen=True, slots=True)
class SpecCounts:
    """What `/metrics` counted over the measured runs of a cell (differences of counters)."""

    proposed: int
    accepted: int
    generated: int
    accepted_at: tuple[int, ...]  # [i]: rounds whose draft token at position i + 1 was accepted

    @property
    def steps(self) -> int:
        """Lane-steps that committed tokens: each commits exactly one token that is not an
        accepted draft token (the correction or bonus token, or the plain step's token)."""
        return self.generated - self.accepted

    @property
    def accepted_per_step(self) -> float | None:
        """Accepted draft tokens per lane-step, drafted or not: a lower bound on the mean accepted
        per drafted round (plain steps count as rounds that accepted nothing)."""
        return self.accepted / self.steps if self.steps > 0 else None

    @property
    def accepted_per_hit(self) -> float | None:
        """Accepted draft tokens per round that accepted at least one: an upper bound on the mean
        accepted per drafted round (rounds that accepted nothing are not counted)."""
        hits = self.accepted_at[0] if self.accepted_at else 0
        return self.accepted / hits if hits > 0 else None


def spec_counts(before: Samples, after: Samples) -> SpecCounts:
    def delta(name: str, **labels: str) -> int:
        return round(value(after, name, **labels) - value(before, name, **labels))

    positions = tuple(
        delta("superfluid_spec_accepted_position_total", position=str(p)) for p in range(1, 16)
    )
    return SpecCounts(
        delta("superfluid_spec_proposed_total"),
        delta("superfluid_spec_accepted_total"),
        delta("superfluid_generated_tokens_total"),
        positions,
    )


@dataclass(frozen=True, slots=True)
class GateState:
    """The gates at one lane count, as `/metrics` shows them after a cell."""

    lanes: int
    depth: int
    speculating: bool | None  # None: the throughput gate is off
    phase: str | None


def gate_states(samples: Samples) -> tuple[tuple[GateState, ...], bool]:
    """(state per lane count, whether the yield floor abandoned the strategy)."""
    lanes: set[int] = set()
    for name, labels in samples:
        if name == "superfluid_spec_depth":
            lanes.update(int(v) for k, v in labels if k == "lanes")
    states = []
    for count in sorted(lanes):
        key = ("superfluid_spec_gate_speculating", (("lanes", str(count)),))
        speculating = bool(samples[key]) if key in samples else None
        phase = next(
            (
                dict(labels)["phase"]
                for (name, labels), v in samples.items()
                if name == "superfluid_spec_gate_phase"
                and dict(labels).get("lanes") == str(count)
                and v == 1.0
            ),
            None,
        )
        depth = int(value(samples, "superfluid_spec_depth", lanes=str(count)))
        states.append(GateState(count, depth, speculating, phase))
    abandoned = value(samples, "superfluid_spec_strategy_abandoned") == 1.0
    return tuple(states), abandoned

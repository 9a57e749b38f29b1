"""Clients and metrics: one round of N concurrent requests, and `/metrics` before and after.

A round starts N requests at once with the official `openai` client (AsyncOpenAI) and waits for
all of them. Tokens come from `usage.completion_tokens`; each request's latency is measured
around its own call, so a client's end-to-end rate includes prefill, queueing and HTTP, as a
user sees it. A round's aggregate rate is all its tokens over the time from its first request
to its last reply.

Requests that stream (superfluid's) ask for usage on every chunk (`stream_options`:
`include_usage`, and `continuous_usage_stats`, the vLLM extension superfluid implements), so
each content chunk says how many tokens have been committed by the time it arrives. From that
come the time to the first content chunk (TTFT) and the decode-only rates: a reply's tokens
after its first content chunk over the time from that chunk to its last one; a round's tokens
committed after every client has had its first content chunk (so every prompt is prefilled)
over the time from then to the last client's last chunk. Requests that do not stream
(llama-cpp-python's server sends no usage in a stream) have neither. llama.cpp's own
`llama-server` has no per-chunk usage either, but with `timings_per_token` every chunk carries
`timings.predicted_n` (tokens generated so far) and `draft_n` / `draft_n_accepted`, which stand
in for the usage count and for `superfluid.spec`.

A multi-turn workload runs a session per client instead of one request: its turns one after
another, each sending the conversation so far (prompt, reply, new user line); the round's
replies are every turn of every session, each with its client and turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import statistics
import time
from collections.abc import Sequence
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
    ttft: float | None = None  # request sent → first content chunk; None: not streamed
    decode_tokens: int | None = None  # tokens after the first content chunk
    decode_seconds: float | None = None  # first content chunk → last chunk
    prompt_tokens: int | None = None  # usage.prompt_tokens, when the server sent it
    client: int | None = None  # multi-turn: whose session, and which turn (1-based)
    turn: int | None = None
    #: A digest of the reply's text: replies of two servers to one prompt compare by it.
    digest: str | None = None

    @property
    def decode_rate(self) -> float | None:
        if self.decode_tokens is None or not self.decode_seconds or self.decode_seconds <= 0:
            return None
        return self.decode_tokens / self.decode_seconds


@dataclass(frozen=True, slots=True)
class Round:
    replies: tuple[Reply, ...]
    wall: float
    decode_tokens: int | None = None  # committed after every client's first content chunk
    decode_wall: float | None = None  # from then to the last client's last chunk

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

    @property
    def decode_aggregate(self) -> float | None:
        if self.decode_tokens is None or not self.decode_wall or self.decode_wall <= 0:
            return None
        return self.decode_tokens / self.decode_wall

    @property
    def decode_per_client(self) -> float | None:
        """The mean decode-only rate of the replies that had a decode phase (more than one
        content chunk); None when none had one or the round was not streamed."""
        rates = [r.decode_rate for r in self.replies if r.decode_rate is not None]
        return statistics.fmean(rates) if rates else None


@dataclass(frozen=True, slots=True)
class Request:
    """What every request of a cell shares."""

    model: str
    temperature: float
    max_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)  # system-specific body fields
    stream: bool = True  # False for a server that sends no usage in a stream
    stream_options: dict[str, Any] | None = None  # None: STREAM_OPTIONS


def client_for(base: str, clients: int, *, keepalive: bool = True) -> openai.AsyncOpenAI:
    """`keepalive=False` opens a connection per request. For llama-server (cpp-httplib): twice in
    quick runs a request failed with "Server disconnected without sending a response" while the
    server stayed up and served on, each time right after a streamed reply; a kept-alive
    connection closed by the server as the next request went out is the likely race. On
    loopback a fresh connection costs well under a millisecond."""
    keep = clients + 4 if keepalive else 0
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=keep)
    return openai.AsyncOpenAI(
        base_url=f"{base}/v1",
        api_key="unused",
        max_retries=0,
        timeout=900.0,
        http_client=httpx.AsyncClient(limits=limits, timeout=900.0),
    )


# Usage on every chunk, not only the last: each content chunk then says how many tokens are
# committed by the time it arrives (an accepted draft leaves as one chunk of several tokens).
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


@dataclass(slots=True)
class Timeline:
    """When a streamed reply's chunks arrived (`time.perf_counter()`) and what they counted."""

    first: float | None = None  # the first chunk with text
    last: float | None = None  # the last chunk with a choice (the closing one)
    committed: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens so far)
    counted: bool = True  # whether every content chunk carried usage

    def content(self, arrival: float, usage: Any) -> None:
        if self.first is None:
            self.first = arrival
        if usage is None:
            self.counted = False
        else:
            self.committed.append((arrival, int(usage.completion_tokens)))

    def tokens_by(self, moment: float) -> int:
        return max((tokens for arrival, tokens in self.committed if arrival <= moment), default=0)

    def figures(self, began: float, tokens: int) -> dict[str, Any]:
        """The Reply fields timed from the stream: TTFT and the decode-only tokens and time."""
        if self.first is None or self.last is None:
            return {}
        # Without per-chunk usage, the first chunk is taken to carry one token.
        in_first = self.committed[0][1] if self.counted and self.committed else 1
        return {
            "ttft": self.first - began,
            "decode_tokens": tokens - in_first,
            "decode_seconds": self.last - self.first,
        }


def _body(request: Request, index: int, run: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "seed": 1000 * run + index,
    }
    if request.extra:
        body["extra_body"] = dict(request.extra)
        if "top_p" in request.extra:
            body["top_p"] = body["extra_body"].pop("top_p")
    if request.stream:
        body["stream"] = True
        body["stream_options"] = request.stream_options or STREAM_OPTIONS
    return body


Messages = list[dict[str, str]]


async def _create(
    client: openai.AsyncOpenAI, workload: Workload, text: str | Messages, body: dict[str, Any]
) -> Any:
    if workload.chat:
        messages = text if isinstance(text, list) else [{"role": "user", "content": text}]
        return await client.chat.completions.create(messages=messages, **body)
    assert isinstance(text, str)
    return await client.completions.create(prompt=text, **body)


def _spec(extension: dict[str, Any] | None) -> tuple[int, int]:
    """(proposed, accepted) from a reply's or chunk's `superfluid.spec`; (0, 0) without one."""
    spec = ((extension or {}).get("superfluid") or {}).get("spec") or {}
    return int(spec.get("proposed", 0)), int(spec.get("accepted", 0))


@dataclass(frozen=True, slots=True)
class _Count:
    """A usage stand-in: tokens generated so far (llama-server's `timings.predicted_n`)."""

    completion_tokens: int


def _timings(extension: dict[str, Any] | None) -> dict[str, Any] | None:
    timings = (extension or {}).get("timings")
    return timings if isinstance(timings, dict) and "predicted_n" in timings else None


def _text(choice: Any) -> str:
    delta = getattr(choice, "delta", None)  # a chat chunk's; a completion chunk has `text`
    return (delta.content if delta is not None else choice.text) or ""


async def _whole(
    client: openai.AsyncOpenAI, workload: Workload, request: Request, index: int, run: int
) -> tuple[Reply, Timeline | None]:
    variant = workload.variant(index, run)
    body = _body(request, index, run)
    began = time.perf_counter()
    reply = await _create(client, workload, variant.text, body)
    seconds = time.perf_counter() - began
    usage = reply.usage
    return Reply(
        variant.name,
        usage.completion_tokens if usage is not None else 0,
        seconds,
        str(reply.choices[0].finish_reason),
        *_spec(reply.model_extra),
        prompt_tokens=usage.prompt_tokens if usage is not None else None,
    ), None


async def _streamed(
    client: openai.AsyncOpenAI, workload: Workload, request: Request, index: int, run: int
) -> tuple[Reply, Timeline | None]:
    variant = workload.variant(index, run)
    reply, timeline, _ = await _stream_one(
        client, workload, request, workload.first_line(variant, run, index), index, run
    )
    return dataclasses.replace(reply, variant=variant.name), timeline


async def _stream_one(
    client: openai.AsyncOpenAI,
    workload: Workload,
    request: Request,
    prompt: str | Messages,
    index: int,
    run: int,
) -> tuple[Reply, Timeline, str]:
    """One streamed request: its Reply (variant unnamed), its timeline and its text."""
    body = _body(request, index, run)
    timeline = Timeline()
    tokens, finish, spec, prompt_tokens = 0, "None", (0, 0), None
    text: list[str] = []
    began = time.perf_counter()
    async for chunk in await _create(client, workload, prompt, body):
        arrival = time.perf_counter()
        usage = chunk.usage
        if usage is not None:
            tokens = usage.completion_tokens
            prompt_tokens = usage.prompt_tokens
        timings = _timings(chunk.model_extra)
        if timings is not None:  # llama-server: counts and drafts in every chunk's timings
            if usage is None:
                usage = _Count(int(timings["predicted_n"]))
                tokens = max(tokens, usage.completion_tokens)
            spec = (int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)))
        if chunk.model_extra and "superfluid" in chunk.model_extra:
            spec = _spec(chunk.model_extra)  # superfluid puts it on the closing chunk
        if not chunk.choices:
            continue  # the usage-only chunk after the closing one
        choice = chunk.choices[0]
        timeline.last = arrival
        if choice.finish_reason is not None:
            finish = str(choice.finish_reason)
        piece = _text(choice)
        if piece:
            text.append(piece)
            timeline.content(arrival, usage)
    seconds = time.perf_counter() - began
    figures = timeline.figures(began, tokens)
    whole = "".join(text)
    reply = Reply(
        "",
        tokens,
        seconds,
        finish,
        *spec,
        **figures,
        prompt_tokens=prompt_tokens,
        digest=digest(whole),
    )
    return reply, timeline, whole


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


async def session(
    client: openai.AsyncOpenAI, workload: Workload, request: Request, index: int, run: int
) -> list[tuple[Reply, Timeline | None]]:
    """One client's multi-turn session: turn t + 1 sends turn t's messages, its reply and the
    next user line. Greedy replies make the conversation the same on every server."""
    variant = workload.variant(index, run)
    messages: Messages = [{"role": "user", "content": workload.first_line(variant, run, index)}]
    turns: list[tuple[Reply, Timeline | None]] = []
    for turn, line in enumerate((None, *variant.follow_ups), start=1):
        if line is not None:
            messages = [*messages, {"role": "user", "content": line}]
        reply, timeline, text = await _stream_one(
            client, workload, request, list(messages), index, run
        )
        reply = dataclasses.replace(reply, variant=variant.name, client=index, turn=turn)
        turns.append((reply, timeline))
        messages = [*messages, {"role": "assistant", "content": text}]
    return turns


def decode_window(
    replies: Sequence[tuple[Reply, Timeline | None]],
) -> tuple[int | None, float | None]:
    """A round's decode-only tokens and time: from the moment every client has had its first
    content chunk (no prompt is left to prefill) to the last client's last chunk. Tokens a
    client committed before that moment are not counted. (None, None) without timelines."""
    streamed = [(reply, t) for reply, t in replies if t is not None and t.first is not None]
    if not streamed or any(not timeline.counted for _, timeline in streamed):
        return None, None
    # A reply without a content chunk (an immediate stop) has no decode phase to wait for.
    start = max(timeline.first for _, timeline in streamed if timeline.first is not None)
    end = max(timeline.last for _, timeline in streamed if timeline.last is not None)
    tokens = sum(reply.tokens - timeline.tokens_by(start) for reply, timeline in streamed)
    return tokens, end - start


async def one_round(
    client: openai.AsyncOpenAI, workload: Workload, request: Request, clients: int, run: int
) -> Round:
    began = time.perf_counter()
    if workload.multi_turn:
        sessions = await asyncio.gather(
            *(session(client, workload, request, i, run) for i in range(clients))
        )
        wall = time.perf_counter() - began
        replies = [turn for turns in sessions for turn in turns]
        # Turns of one session do not overlap: there is no round-wide decode-only window.
        return Round(tuple(reply for reply, _ in replies), wall)
    one = _streamed if request.stream else _whole
    replies = await asyncio.gather(
        *(one(client, workload, request, i, run) for i in range(clients))
    )
    wall = time.perf_counter() - began
    decode_tokens, decode_wall = decode_window(replies)
    return Round(tuple(reply for reply, _ in replies), wall, decode_tokens, decode_wall)


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
class TickTime:
    """Ticks at one lane count of one kind (speculative, plain, prefill) over a cell's measured
    runs, from `superfluid_tick*_total` differences: where a server's decode time went."""

    lanes: int
    kind: str
    ticks: int
    seconds: float
    tokens: int


#: The counters `tick_times` reads, in TickTime's order.
TICK_SERIES = (
    "superfluid_ticks_total",
    "superfluid_tick_seconds_total",
    "superfluid_tick_tokens_total",
)


def tick_times(before: Samples, after: Samples) -> tuple[TickTime, ...]:
    """Every (lanes, kind) that ticked between the two scrapes, by lanes then kind."""
    times = []
    for name, labels in after:
        if name != "superfluid_ticks_total":
            continue
        named = dict(labels)
        ticks, seconds, tokens = (
            value(after, series, **named) - value(before, series, **named) for series in TICK_SERIES
        )
        if ticks > 0:
            times.append(
                TickTime(int(named["lanes"]), named["kind"], round(ticks), seconds, round(tokens))
            )
    return tuple(sorted(times, key=lambda t: (t.lanes, t.kind)))


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

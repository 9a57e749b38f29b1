"""Prometheus metrics for `/metrics` (docs/contract.md §9), fed as a service `Observer`.

Every series carries a `model` label, even when only one model is served: the contract asks for
the label "when several are served", and a label that appears or vanishes with the number of
models would break dashboards and queries written against a one-model server.

Two kinds of data:
- what ticks and finished requests report (counters, the active-lanes gauge) is pushed in from the
  worker threads as it happens, so a streaming request moves the counters while it runs;
- the gates' state (depth, throughput-gate phase, abandonment) and the decode rate are read at
  scrape time by a custom collector, so a scrape always shows the policy as it stands now.

The metrics live in a registry of their own: several servers (or tests) in one process must not
collide in prometheus_client's global registry.

Series:
    superfluid_spec_proposed_total{model}             draft tokens proposed (counted per tick)
    superfluid_spec_accepted_total{model}             draft tokens accepted (counted per tick)
    superfluid_spec_accepted_position_total{model,position}
                                                      accepted draft tokens at draft position
                                                      1..64 (1 = the first drafted token)
    superfluid_spec_depth{model,lanes}                the depth a speculating tick uses at that
                                                      lane count
    superfluid_spec_gate_speculating{model,lanes}     1 while the throughput gate speculates
    superfluid_spec_gate_phase{model,lanes,phase}     1 for the gate's current phase, 0 for others
    superfluid_spec_strategy_abandoned{model}         1 once the yield floor gave the strategy up
    superfluid_requests_total{model,finish}           finished requests by finish reason
    superfluid_generated_tokens_total{model}          tokens committed by decoding
    superfluid_prefill_tokens_total{model}            prompt tokens fed
    superfluid_prefix_reused_tokens_total{model}      prompt tokens found in a finished
                                                      request's KV (not fed again)
    superfluid_active_lanes{model}                    lanes in use after the latest tick
    superfluid_ticks_total{model,lanes,kind}          ticks by the lanes decoding in them and
                                                      their kind: speculative (drafted),
                                                      plain, or prefill (a prompt shared it)
    superfluid_tick_seconds_total{model,lanes,kind}   seconds those ticks took
    superfluid_tick_tokens_total{model,lanes,kind}    tokens those ticks committed
    superfluid_decode_tokens_per_second{model}        committed tokens per tick-second, recent
    superfluid_http_requests_total{route,status}      HTTP requests answered
    superfluid_queue_depth{model}                     requests waiting for a lane
    superfluid_queue_capacity{model}                  lanes + queue: requests held at most
    superfluid_requests_rejected_total{model}         requests refused at once (429) because
                                                      every lane and queue place was taken
    superfluid_kv_cache_usage_ratio{model}            share of the lanes' KV cells running
                                                      requests hold, 0..1

What LLM-aware routers read, under the names vLLM exports (the Kubernetes Gateway API Inference
Extension's endpoint picker, vllm-router and others score replicas by them), with vLLM's
`model_name` label:
    vllm:num_requests_running{model_name}             requests decoding (superfluid_active_lanes)
    vllm:num_requests_waiting{model_name}             requests waiting for a lane
    vllm:kv_cache_usage_perc{model_name}              KV share in use, 0..1 (1 = full)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from superfluid.adapters.rates import RateWindow
from superfluid.application.events import Committed, Finish, TickReport
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.gates.throughput import Phase

#: Seconds of recent ticks the decode rate is measured over.
DEFAULT_RATE_WINDOW = 10.0

#: The classic text format: every Prometheus server and scraper reads it.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class ServedModel(Protocol):
    """What the metrics read from a served model (`service.ModelHost` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def policy(self) -> SpecPolicy | None: ...


Hosts = Sequence[ServedModel] | Callable[[], Sequence[ServedModel]]


class PrometheusMetrics:
    """The service's metrics observer and the `/metrics` body.

    `hosts` is the served models, or a callable returning them when the metrics are built before
    the service; it is read at each scrape for the gates' state. `clock` (monotonic seconds)
    ages the decode-rate window.
    """

    def __init__(
        self,
        hosts: Hosts,
        *,
        clock: Callable[[], float] = time.monotonic,
        rate_window: float = DEFAULT_RATE_WINDOW,
    ) -> None:
        self._hosts = hosts
        self._clock = clock
        self._rate_window = rate_window
        self._lock = threading.Lock()
        self._decode: dict[str, RateWindow] = {}
        self.registry = CollectorRegistry()
        registry = self.registry
        self._proposed = Counter(
            "superfluid_spec_proposed_total",
            "Draft tokens proposed for verification.",
            ["model"],
            registry=registry,
        )
        self._accepted = Counter(
            "superfluid_spec_accepted_total",
            "Draft tokens accepted by verification.",
            ["model"],
            registry=registry,
        )
        self._accepted_at = Counter(
            "superfluid_spec_accepted_position_total",
            "Draft tokens accepted at each draft position (1 is the first drafted token).",
            ["model", "position"],
            registry=registry,
        )
        self._requests = Counter(
            "superfluid_requests_total",
            "Finished requests by finish reason.",
            ["model", "finish"],
            registry=registry,
        )
        self._generated = Counter(
            "superfluid_generated_tokens_total",
            "Tokens committed by decoding, stop tokens included.",
            ["model"],
            registry=registry,
        )
        self._prefill = Counter(
            "superfluid_prefill_tokens_total",
            "Prompt tokens fed to the model.",
            ["model"],
            registry=registry,
        )
        self._reused = Counter(
            "superfluid_prefix_reused_tokens_total",
            "Prompt tokens found in a finished request's KV, so not fed again.",
            ["model"],
            registry=registry,
        )
        self._lanes = Gauge(
            "superfluid_active_lanes",
            "Lanes in use after the latest tick.",
            ["model"],
            registry=registry,
        )

        # Where decode time goes, by lane count and kind of tick: a speed-up or loss seen over
        # a whole run is split here into the lane counts a run passes through and what the
        # gates did at each.
        def by_tick(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, ["model", "lanes", "kind"], registry=registry)

        self._ticks = by_tick(
            "superfluid_ticks_total",
            "Ticks by the lanes decoding in them and kind (speculative, plain, prefill).",
        )
        self._tick_seconds = by_tick(
            "superfluid_tick_seconds_total",
            "Seconds taken by ticks, by the lanes decoding in them and kind.",
        )
        self._tick_tokens = by_tick(
            "superfluid_tick_tokens_total",
            "Tokens committed by ticks, by the lanes decoding in them and kind.",
        )
        self._http = Counter(
            "superfluid_http_requests_total",
            "HTTP requests answered, by route and status.",
            ["route", "status"],
            registry=registry,
        )
        registry.register(_ScrapeTimeCollector(self))
        if not callable(hosts):
            for host in hosts:
                self._introduce(host.name)

    # -- the Observer protocol (worker threads) -----------------------------------------------

    def tick(self, model: str, report: TickReport, active_lanes: int) -> None:
        if report.drafted:
            self._proposed.labels(model).inc(report.drafted)
        if report.accepted:
            self._accepted.labels(model).inc(report.accepted)
        if report.accepted_at:
            self.record_positions(model, report.accepted_at)
        if report.committed:
            self._generated.labels(model).inc(report.committed)
        if report.prefill_tokens:
            self._prefill.labels(model).inc(report.prefill_tokens)
        if report.reused_tokens:
            self._reused.labels(model).inc(report.reused_tokens)
        self._lanes.labels(model).set(active_lanes)
        labels = (model, str(report.decoding), _tick_kind(report))
        self._ticks.labels(*labels).inc()
        self._tick_seconds.labels(*labels).inc(max(report.seconds, 0.0))
        self._tick_tokens.labels(*labels).inc(report.committed)
        now = self._clock()
        with self._lock:
            self._window(model).add(now, report.committed, report.seconds)

    def finished(self, model: str, event: Committed, generated: int) -> None:
        finish = event.finish.value if event.finish is not None else "unknown"
        self._requests.labels(model, finish).inc()

    def record_positions(self, model: str, accepted_at: Sequence[int]) -> None:
        """Count accepted draft tokens per position: `accepted_at[i]` lanes had their draft
        token at 0-based position i accepted (exported as position i + 1)."""
        for index, count in enumerate(accepted_at):
            if count > 0:
                self._accepted_at.labels(model, str(index + 1)).inc(count)

    # -- the HTTP side ------------------------------------------------------------------------

    def http_request(self, route: str, status: int) -> None:
        self._http.labels(route, str(status)).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The `/metrics` body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE

    # -- internals ----------------------------------------------------------------------------

    def served(self) -> Sequence[ServedModel]:
        return self._hosts() if callable(self._hosts) else self._hosts

    def decode_rates(self) -> dict[str, float]:
        """Recent committed tokens per tick-second, per model that has ticked."""
        now = self._clock()
        with self._lock:
            return {model: window.rate(now) for model, window in self._decode.items()}

    def _window(self, model: str) -> RateWindow:
        window = self._decode.get(model)
        if window is None:
            window = self._decode[model] = RateWindow(self._rate_window)
        return window

    def _introduce(self, model: str) -> None:
        """Create a model's series at 0, so `rate()` sees its first increase and dashboards
        show the model before its first request."""
        counters = (self._proposed, self._accepted, self._generated, self._prefill, self._reused)
        for counter in counters:
            counter.labels(model)
        for finish in Finish:
            self._requests.labels(model, finish.value)
        self._lanes.labels(model).set(0)
        with self._lock:
            self._window(model)


def _tick_kind(report: TickReport) -> str:
    """A tick that prefilled is a prefill tick whatever it decoded (the gates do not judge it
    either); otherwise speculative when it drafted anything."""
    if report.prefill_tokens:
        return "prefill"
    return "speculative" if report.drafted else "plain"


class _ScrapeTimeCollector:
    """Reads the gates' state and the decode rates when `/metrics` is scraped.

    The policies belong to the worker threads and are read here without their cooperation:
    every read is of a finished value, and a scrape that races a tick shows either side of it.
    `SpecPolicy.states()` reads them without creating any, so a scrape never disturbs a gate.
    """

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        # Names only, so the registry can check for clashes without reading any policy.
        return [*_families(), *_admission_families()]

    def collect(self) -> Iterable[Metric]:
        depth, speculating, phase, abandoned, rate = _families()
        for host in self._metrics.served():
            policy = host.policy
            if policy is None:
                continue
            abandoned.add_metric([host.name], 1.0 if policy.abandoned else 0.0)
            for state in policy.states():
                labels = [host.name, str(state.lane_count)]
                depth.add_metric(labels, float(state.depth))
                if state.phase is None:
                    continue  # the throughput gate is switched off: nothing to show
                speculating.add_metric(labels, 1.0 if state.speculating else 0.0)
                for candidate in Phase:
                    current = 1.0 if candidate is state.phase else 0.0
                    phase.add_metric([*labels, candidate.value], current)
        rates = self._metrics.decode_rates()
        for host in self._metrics.served():
            rates.setdefault(host.name, 0.0)
        for model, value in sorted(rates.items()):
            rate.add_metric([model], value)
        return [depth, speculating, phase, abandoned, rate, *self._admission()]

    def _admission(self) -> list[Metric]:
        families = _admission_families()
        queued, capacity, rejected, kv, running_v, waiting_v, kv_v = families
        for host in self._metrics.served():
            # A model host carries its admission and executor; a bare ServedModel has neither.
            admission = getattr(host, "admission", None)
            executor = getattr(host, "executor", None)
            if admission is None or executor is None:
                continue
            running = executor.active_lanes
            waiting = float(admission.queued(running))
            usage = float(executor.kv_usage)
            queued.add_metric([host.name], waiting)
            if admission.capacity is not None:
                capacity.add_metric([host.name], float(admission.capacity))
            rejected.add_metric([host.name], float(admission.rejected))
            kv.add_metric([host.name], usage)
            running_v.add_metric([host.name], float(running))
            waiting_v.add_metric([host.name], waiting)
            kv_v.add_metric([host.name], usage)
        return list(families)


def _admission_families() -> tuple[
    GaugeMetricFamily,
    GaugeMetricFamily,
    CounterMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
]:
    return (
        GaugeMetricFamily(
            "superfluid_queue_depth", "Requests waiting for a lane.", labels=["model"]
        ),
        GaugeMetricFamily(
            "superfluid_queue_capacity",
            "Requests a model holds at most: its lanes plus its queue.",
            labels=["model"],
        ),
        CounterMetricFamily(
            "superfluid_requests_rejected",
            "Requests refused at once (429) because every lane and queue place was taken.",
            labels=["model"],
        ),
        GaugeMetricFamily(
            "superfluid_kv_cache_usage_ratio",
            "Share of the lanes' KV cells that running requests hold, 0..1.",
            labels=["model"],
        ),
        # vLLM's names and label, for the routers that score replicas by them.
        GaugeMetricFamily("vllm:num_requests_running", "Requests decoding.", labels=["model_name"]),
        GaugeMetricFamily(
            "vllm:num_requests_waiting", "Requests waiting for a lane.", labels=["model_name"]
        ),
        GaugeMetricFamily(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage; 1 means 100 percent.",
            labels=["model_name"],
        ),
    )


def _families() -> tuple[
    GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily
]:
    return (
        GaugeMetricFamily(
            "superfluid_spec_depth",
            "Draft depth a speculating tick uses at this lane count.",
            labels=["model", "lanes"],
        ),
        GaugeMetricFamily(
            "superfluid_spec_gate_speculating",
            "1 while the throughput gate speculates at this lane count, 0 while it decodes plainly.",
            labels=["model", "lanes"],
        ),
        GaugeMetricFamily(
            "superfluid_spec_gate_phase",
            "1 for the throughput gate's current phase at this lane count.",
            labels=["model", "lanes", "phase"],
        ),
        GaugeMetricFamily(
            "superfluid_spec_strategy_abandoned",
            "1 once the yield floor abandoned the strategy (until restart).",
            labels=["model"],
        ),
        GaugeMetricFamily(
            "superfluid_decode_tokens_per_second",
            "Tokens committed per second of tick time over the recent window.",
            labels=["model"],
        ),
    )

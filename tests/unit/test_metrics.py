import threading
import time
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from superfluid.adapters.metrics import PrometheusMetrics
from superfluid.application.events import Committed, Finish, SpecStats, TickReport
from superfluid.application.executor import Executor
from superfluid.application.registration import Registration
from superfluid.application.requests import GenerationRequest
from superfluid.application.service import GenerationService, ModelHost
from superfluid.domain.gates.depth import ROUNDS_BEFORE_TUNING
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.gates.throughput import GateTuning, Phase
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from tests.fakes import FakeModel, FakeRuntime

TUNING = GateTuning(probe_ticks=3, window_ticks=10, early_stop_ticks=5)


@dataclass
class Served:
    name: str
    policy: SpecPolicy | None


class Clock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def policy(settings=None, default_depth=4):
    return SpecPolicy(settings or SpecSettings(), default_depth=default_depth, tuning=TUNING)


def report(
    *,
    lanes=1,
    decoding=1,
    prefill=0,
    committed=1,
    drafted=0,
    accepted=0,
    seconds=0.01,
    accepted_at=(),
):
    return TickReport(
        lanes, decoding, prefill, committed, drafted, accepted, seconds, tuple(accepted_at)
    )


def scrape(metrics):
    """{(sample name, frozenset of labels): value} from the exposition text."""
    body, _ = metrics.exposition()
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


def series(samples, name):
    return {labels: v for (sample, labels), v in samples.items() if sample == name}


def lose_at(spec, lanes):
    """Drive one lane count's throughput gate to a loss: speculation at half the plain rate."""
    # A loss rests on at least the early stop's count of speculating ticks; + the warm-up tick.
    for _ in range(max(TUNING.probe_ticks, TUNING.early_stop_ticks) + 1):
        spec.record_spec_tick(lanes, drafted=4 * lanes, committed=lanes, seconds=0.02, rows=5)
    for _ in range(TUNING.probe_ticks):
        spec.record_plain_tick(lanes, committed=lanes, seconds=0.01)


def fail_request(spec, request_id, rounds):
    for _ in range(ROUNDS_BEFORE_TUNING):  # the depth's learning rounds: the floor skips them
        spec.record_round("learning", 1, drafted=4, accepted=0)
    spec.request_started(request_id)
    for _ in range(rounds):
        spec.record_round(request_id, 1, drafted=4, accepted=0)
    spec.request_finished(request_id)


def test_proposed_and_accepted_draft_tokens_count_up_tick_by_tick():
    metrics = PrometheusMetrics([Served("m", None)])
    metrics.tick("m", report(drafted=4, accepted=3, committed=4), 1)
    assert value(scrape(metrics), "superfluid_spec_proposed_total", model="m") == 4
    metrics.tick("m", report(drafted=8, accepted=2, committed=4), 2)
    samples = scrape(metrics)
    assert value(samples, "superfluid_spec_proposed_total", model="m") == 12
    assert value(samples, "superfluid_spec_accepted_total", model="m") == 5


def test_every_series_is_labelled_by_model_even_with_one_model_served():
    metrics = PrometheusMetrics([Served("a", None), Served("b", None)])
    metrics.tick("b", report(drafted=3, accepted=1), 1)
    samples = scrape(metrics)
    assert value(samples, "superfluid_spec_proposed_total", model="a") == 0
    assert value(samples, "superfluid_spec_proposed_total", model="b") == 3


def test_accepted_tokens_are_counted_per_draft_position_from_one():
    metrics = PrometheusMetrics([Served("m", None)])
    metrics.tick("m", report(lanes=2, drafted=8, accepted=3, accepted_at=[2, 1, 0, 0]), 2)
    metrics.record_positions("m", [1, 1, 1])
    positions = series(scrape(metrics), "superfluid_spec_accepted_position_total")
    assert positions == {
        frozenset({("model", "m"), ("position", "1")}): 3,
        frozenset({("model", "m"), ("position", "2")}): 2,
        frozenset({("model", "m"), ("position", "3")}): 1,
    }


def test_depth_and_gate_state_are_shown_per_lane_count():
    spec = policy()
    spec.plan(1)
    spec.plan(2)
    lose_at(spec, 2)
    samples = scrape(PrometheusMetrics([Served("m", spec)]))
    # The default depth 4, as the power-of-two-row depth nearest it (docs/adr/0013).
    assert value(samples, "superfluid_spec_depth", model="m", lanes="1") == 3
    assert value(samples, "superfluid_spec_depth", model="m", lanes="2") == 3
    assert value(samples, "superfluid_spec_gate_speculating", model="m", lanes="1") == 1
    assert value(samples, "superfluid_spec_gate_speculating", model="m", lanes="2") == 0
    phases = {
        phase.value: value(
            samples, "superfluid_spec_gate_phase", model="m", lanes="2", phase=phase.value
        )
        for phase in Phase
    }
    assert phases == {phase.value: 1 if phase is Phase.PLAIN else 0 for phase in Phase}
    assert value(samples, "superfluid_spec_gate_phase", model="m", lanes="1", phase="warm-up") == 1


def test_the_gauges_follow_the_policy_between_scrapes():
    spec = policy()
    spec.plan(3)
    metrics = PrometheusMetrics(lambda: [Served("m", spec)])
    assert value(scrape(metrics), "superfluid_spec_gate_speculating", model="m", lanes="3") == 1
    lose_at(spec, 3)
    assert value(scrape(metrics), "superfluid_spec_gate_speculating", model="m", lanes="3") == 0


def test_the_depth_gauge_shows_the_adaptive_choice():
    spec = policy(SpecSettings(throughput_gate=False, min_yield=0.0), default_depth=8)
    for _ in range(200):
        depth = spec.plan(1).depth
        spec.record_round("r", 1, drafted=depth, accepted=min(depth, 1))
        spec.record_spec_tick(
            1, drafted=depth, committed=2, seconds=0.01 * (1 + 0.17 * depth), rows=depth + 1
        )
    samples = scrape(PrometheusMetrics([Served("m", spec)]))
    assert value(samples, "superfluid_spec_depth", model="m", lanes="1") == spec.plan(1).depth
    assert value(samples, "superfluid_spec_depth", model="m", lanes="1") <= 2


def test_with_the_throughput_gate_off_only_the_depth_is_shown():
    spec = policy(SpecSettings(throughput_gate=False))
    spec.plan(1)
    samples = scrape(PrometheusMetrics([Served("m", spec)]))
    assert value(samples, "superfluid_spec_depth", model="m", lanes="1") == 3
    assert series(samples, "superfluid_spec_gate_speculating") == {}
    assert series(samples, "superfluid_spec_gate_phase") == {}


def test_the_abandonment_flag_rises_when_the_yield_floor_gives_up():
    spec = policy(SpecSettings(yield_rounds=4))
    metrics = PrometheusMetrics([Served("m", spec)])
    assert value(scrape(metrics), "superfluid_spec_strategy_abandoned", model="m") == 0
    fail_request(spec, "first", rounds=4)
    assert value(scrape(metrics), "superfluid_spec_strategy_abandoned", model="m") == 0
    fail_request(spec, "second", rounds=4)
    assert spec.abandoned
    assert value(scrape(metrics), "superfluid_spec_strategy_abandoned", model="m") == 1


def test_a_model_without_a_policy_has_no_gate_series():
    samples = scrape(PrometheusMetrics([Served("plain", None)]))
    for name in (
        "superfluid_spec_depth",
        "superfluid_spec_gate_speculating",
        "superfluid_spec_gate_phase",
        "superfluid_spec_strategy_abandoned",
    ):
        assert series(samples, name) == {}


def test_requests_tokens_and_lanes_are_counted():
    metrics = PrometheusMetrics([Served("m", None)])
    metrics.tick("m", report(lanes=3, decoding=1, prefill=120, committed=2), 3)
    metrics.tick("m", report(lanes=3, decoding=3, committed=3), 2)
    metrics.finished("m", Committed(1, (5,), SpecStats(), Finish.STOP), 4)
    metrics.finished("m", Committed(2, (), SpecStats(), Finish.LENGTH), 9)
    metrics.finished("m", Committed(3, (), SpecStats(), Finish.STOP), 1)
    samples = scrape(metrics)
    assert value(samples, "superfluid_prefill_tokens_total", model="m") == 120
    assert value(samples, "superfluid_generated_tokens_total", model="m") == 5
    assert value(samples, "superfluid_active_lanes", model="m") == 2
    assert value(samples, "superfluid_requests_total", model="m", finish="stop") == 2
    assert value(samples, "superfluid_requests_total", model="m", finish="length") == 1
    assert value(samples, "superfluid_requests_total", model="m", finish="error") == 0


def test_the_decode_rate_covers_recent_ticks_and_falls_to_zero_when_idle():
    clock = Clock()
    metrics = PrometheusMetrics([Served("m", None)], clock=clock, rate_window=10.0)
    assert value(scrape(metrics), "superfluid_decode_tokens_per_second", model="m") == 0
    metrics.tick("m", report(committed=3, seconds=0.05), 1)
    clock.now += 1.0
    metrics.tick("m", report(committed=5, seconds=0.15), 1)
    assert value(scrape(metrics), "superfluid_decode_tokens_per_second", model="m") == 40.0
    clock.now += 9.5  # the first tick has aged out
    assert value(scrape(metrics), "superfluid_decode_tokens_per_second", model="m") == 5 / 0.15
    clock.now += 1.0
    assert value(scrape(metrics), "superfluid_decode_tokens_per_second", model="m") == 0


def test_http_requests_are_counted_by_route_and_status():
    metrics = PrometheusMetrics([])
    metrics.http_request("/v1/chat/completions", 200)
    metrics.http_request("/v1/chat/completions", 200)
    metrics.http_request("/v1/chat/completions", 400)
    samples = scrape(metrics)
    assert (
        value(samples, "superfluid_http_requests_total", route="/v1/chat/completions", status="200")
        == 2
    )
    assert (
        value(samples, "superfluid_http_requests_total", route="/v1/chat/completions", status="400")
        == 1
    )


def test_each_instance_has_its_own_registry():
    one = PrometheusMetrics([Served("m", None)])
    two = PrometheusMetrics([Served("m", None)])
    one.tick("m", report(drafted=4), 1)
    assert value(scrape(one), "superfluid_spec_proposed_total", model="m") == 4
    assert value(scrape(two), "superfluid_spec_proposed_total", model="m") == 0


def test_the_exposition_is_prometheus_text():
    _, content_type = PrometheusMetrics([]).exposition()
    assert content_type.startswith("text/plain; version=0.0.4")


def test_scrapes_while_workers_tick_see_consistent_counters():
    spec = policy()
    metrics = PrometheusMetrics([Served("m", spec)])
    stop = threading.Event()

    def work():
        lanes = 1
        while not stop.is_set():
            spec.plan(lanes)
            metrics.tick("m", report(drafted=2, accepted=1), lanes)
            lanes = lanes % 8 + 1

    worker = threading.Thread(target=work)
    worker.start()
    try:
        seen = [value(scrape(metrics), "superfluid_spec_proposed_total", model="m")]
        for _ in range(50):
            seen.append(value(scrape(metrics), "superfluid_spec_proposed_total", model="m"))
    finally:
        stop.set()
        worker.join()
    assert seen == sorted(seen)
    assert all(v % 2 == 0 for v in seen)


def test_a_served_model_moves_the_counters_through_the_service():
    runtime = FakeRuntime(FakeModel(eos=False))
    executor = Executor(runtime, max_lanes=4, clock=time.perf_counter)
    host = ModelHost("m", runtime, Registration(None, None, ()), None, executor)
    metrics = PrometheusMetrics([host])
    service = GenerationService([host], metrics)
    done = threading.Event()
    service.start()
    try:
        request = GenerationRequest([1, 2, 3], SamplingParams(temperature=0.0), 5)
        service.submit(host, request, lambda event: event.finish is not None and done.set())
        assert done.wait(10)
    finally:
        service.stop()
    samples = scrape(metrics)
    assert value(samples, "superfluid_requests_total", model="m", finish="length") == 1
    assert value(samples, "superfluid_generated_tokens_total", model="m") == 5
    assert value(samples, "superfluid_prefill_tokens_total", model="m") == 3


def test_a_speculating_model_counts_accepted_drafts_per_position_through_the_service():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0, eos=False))
    executor = Executor(
        runtime, max_lanes=2, clock=time.perf_counter, drafter=PromptLookupDrafter()
    )
    host = ModelHost("m", runtime, Registration(None, None, ()), None, executor)
    metrics = PrometheusMetrics([host])
    service = GenerationService([host], metrics)
    done = threading.Event()
    service.start()
    try:
        request = GenerationRequest([1, 2, 1, 2, 1, 2], SamplingParams(temperature=0.0), 40)
        service.submit(host, request, lambda event: event.finish is not None and done.set())
        assert done.wait(10)
    finally:
        service.stop()
    samples = scrape(metrics)
    accepted = value(samples, "superfluid_spec_accepted_total", model="m")
    per_position = series(samples, "superfluid_spec_accepted_position_total")
    assert 0 < accepted <= value(samples, "superfluid_spec_proposed_total", model="m")
    assert sum(per_position.values()) == accepted
    by_position = sorted((int(dict(labels)["position"]), v) for labels, v in per_position.items())
    counts = [v for _, v in by_position]
    assert by_position[0][0] == 1 and counts == sorted(counts, reverse=True)


def test_every_series_but_the_http_count_names_its_model_as_operations_md_says() -> None:
    """docs/operations.md: every series about a model has a `model` label; the HTTP count is
    by route and status."""
    from pathlib import Path

    page = " ".join((Path(__file__).parents[2] / "docs" / "operations.md").read_text().split())
    assert "Every series about a model carries a `model` label" in page
    import re

    source = (Path(__file__).parents[2] / "src/superfluid/adapters/metrics.py").read_text()
    declared = re.findall(r'\(\s*"(superfluid_[a-z_]+)",\s*"[^"]*",\s*\[([^\]]*)\]', source)
    assert declared, "no metric declarations found"
    for name, labels in declared:
        if name == "superfluid_http_requests_total":
            assert "model" not in labels and "route" in labels
        else:
            assert '"model"' in labels, name


def test_tick_time_is_split_by_the_lanes_decoding_and_the_kind_of_tick():
    metrics = PrometheusMetrics([Served("m", None)])
    metrics.tick("m", report(lanes=3, decoding=2, prefill=50, committed=2, seconds=0.2), 3)
    metrics.tick("m", report(lanes=3, decoding=3, committed=3, seconds=0.03), 3)
    metrics.tick("m", report(lanes=3, decoding=3, committed=5, drafted=6, seconds=0.05), 3)
    metrics.tick("m", report(lanes=3, decoding=3, committed=4, drafted=6, seconds=0.04), 3)
    samples = scrape(metrics)

    def at(name, lanes, kind):
        return value(samples, name, model="m", lanes=str(lanes), kind=kind)

    assert at("superfluid_ticks_total", 2, "prefill") == 1
    assert at("superfluid_tick_seconds_total", 2, "prefill") == 0.2
    assert at("superfluid_ticks_total", 3, "plain") == 1
    assert at("superfluid_tick_tokens_total", 3, "plain") == 3
    assert at("superfluid_ticks_total", 3, "speculative") == 2
    assert at("superfluid_tick_tokens_total", 3, "speculative") == 9
    assert abs(at("superfluid_tick_seconds_total", 3, "speculative") - 0.09) < 1e-12
    assert (
        "superfluid_ticks_total",
        frozenset({("model", "m"), ("lanes", "2"), ("kind", "plain")}),
    ) not in samples


def test_running_waiting_and_kv_use_are_shown_under_superfluid_and_vllm_names():
    """What LLM-aware routers score replicas by: vLLM's series, with its `model_name` label."""
    from superfluid.application.admission import Admission

    runtime = FakeRuntime(FakeModel(eos=False), context_size=1000)
    executor = Executor(runtime, max_lanes=2, clock=time.perf_counter)
    host = ModelHost(
        "m", runtime, Registration(None, None, ()), None, executor, admission=Admission(2, 4)
    )
    metrics = PrometheusMetrics([host])
    idle = scrape(metrics)
    assert value(idle, "vllm:num_requests_running", model_name="m") == 0
    assert value(idle, "vllm:kv_cache_usage_perc", model_name="m") == 0
    for prompt in ([1, 2, 3], [4, 5, 6, 7], [8, 9]):
        assert host.places.enter()
        executor.submit(GenerationRequest(prompt, SamplingParams(temperature=0.0), 100))
    executor.tick()  # two lanes prefill their prompts; the third request waits
    samples = scrape(metrics)
    assert value(samples, "vllm:num_requests_running", model_name="m") == 2
    assert value(samples, "vllm:num_requests_waiting", model_name="m") == 1
    assert value(samples, "superfluid_queue_depth", model="m") == 1
    used = sum(len(seq) for seq in runtime.kv.values()) / (2 * 1000)
    assert used > 0
    assert value(samples, "vllm:kv_cache_usage_perc", model_name="m") == pytest.approx(used)
    assert value(samples, "superfluid_kv_cache_usage_ratio", model="m") == pytest.approx(used)

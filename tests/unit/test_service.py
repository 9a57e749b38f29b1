import threading
import time

import pytest

from superfluid.application.events import Finish
from superfluid.application.executor import Executor
from superfluid.application.registration import Registration
from superfluid.application.requests import GenerationRequest
from superfluid.application.service import GenerationService, ModelHost, UnknownModel
from superfluid.domain.sampling import SamplingParams
from tests.fakes import FakeModel, FakeRuntime

GREEDY = SamplingParams(temperature=0.0)


class Collector:
    def __init__(self):
        self.tokens = []
        self.finish = None
        self.done = threading.Event()

    def __call__(self, event):
        self.tokens.extend(event.tokens)
        if event.finish is not None:
            self.finish = event.finish
            self.done.set()


class Recorder:
    def __init__(self):
        self.ticks = 0
        self.ended = []

    def tick(self, model, report, active_lanes):
        self.ticks += 1

    def finished(self, model, event, generated):
        self.ended.append((model, event.finish, generated))


def host(name="m", runtime=None):
    runtime = runtime or FakeRuntime(FakeModel(eos=False))
    executor = Executor(runtime, max_lanes=4, clock=time.perf_counter)
    return ModelHost(name, runtime, Registration(None, None, ()), None, executor)


@pytest.fixture
def service():
    made = []

    def make(*hosts, observer=None):
        svc = GenerationService(list(hosts), observer)
        svc.start()
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.stop()


def test_requests_complete_through_the_worker_and_report_to_the_observer(service):
    recorder = Recorder()
    svc = service(host(), observer=recorder)
    sinks = [Collector() for _ in range(6)]
    for i, sink in enumerate(sinks):
        svc.submit(svc.host(None), GenerationRequest([1 + i, 2, 3], GREEDY, 12), sink)
    for sink in sinks:
        assert sink.done.wait(10)
        assert sink.finish is Finish.LENGTH and len(sink.tokens) == 12
    assert recorder.ticks > 0
    assert sorted(f[2] for f in recorder.ended) == [12] * 6


def test_a_cancelled_request_ends_and_frees_its_lane(service):
    model_host = host(runtime=FakeRuntime(FakeModel(eos=False), context_size=10**9))
    svc = service(model_host)
    request = GenerationRequest([1, 2, 3], GREEDY, 10**9)
    sink = Collector()

    def cancel_after_first_tokens(event):
        sink(event)
        request.cancel()  # as the HTTP layer does when the client disconnects

    svc.submit(model_host, request, cancel_after_first_tokens)
    assert sink.done.wait(10)
    assert sink.finish is Finish.CANCELLED
    deadline = time.time() + 5
    while model_host.executor.active_lanes and time.time() < deadline:
        time.sleep(0.01)
    assert model_host.executor.active_lanes == 0
    assert model_host.runtime.kv == model_host.executor.parked()


def test_requests_pick_a_model_by_name_and_an_unknown_name_is_refused(service):
    svc = service(host("a"), host("b"))
    assert svc.host("b").name == "b"
    assert svc.host(None).name == "a"
    with pytest.raises(UnknownModel):
        svc.host("c")


def test_past_lanes_and_queue_submit_refuses_and_every_end_gives_a_place_back(service):
    from superfluid.application.admission import Admission
    from superfluid.application.service import Overloaded

    h = host()
    h.admission = Admission(lanes=1, queue=1)
    svc = service(h)
    first, second = Collector(), Collector()
    long = GenerationRequest([1, 2, 3], GREEDY, max_tokens=10_000)
    svc.submit(h, long, first)
    svc.submit(h, GenerationRequest([1, 2, 3], GREEDY, max_tokens=4), second)
    with pytest.raises(Overloaded, match="m is at capacity"):
        svc.submit(h, GenerationRequest([1, 2, 3], GREEDY, max_tokens=4), Collector())
    assert h.places.rejected == 1
    long.cancel()
    assert first.done.wait(5) and second.done.wait(5)
    assert (first.finish, second.finish) == (Finish.CANCELLED, Finish.LENGTH)
    assert h.places.held == 0
    third = Collector()
    svc.submit(h, GenerationRequest([1, 2, 3], GREEDY, max_tokens=4), third)
    assert third.done.wait(5) and third.finish is Finish.LENGTH


def test_a_cancelled_waiting_request_ends_before_a_lane_frees():
    runtime = FakeRuntime(FakeModel(eos=False))
    executor = Executor(runtime, max_lanes=1, clock=time.perf_counter)
    running = GenerationRequest([1, 2, 3], GREEDY, max_tokens=10_000)
    waiting = GenerationRequest([1, 2, 3], GREEDY, max_tokens=4)
    executor.submit(running)
    executor.submit(waiting)
    executor.tick()
    assert executor.waiting == 1
    waiting.cancel()
    events = executor.tick()
    assert [(e.request_id, e.finish) for e in events if e.finish] == [
        (waiting.id, Finish.CANCELLED)
    ]
    assert executor.waiting == 0 and executor.active_lanes == 1


# -- the throughput gate's verdicts in the log --------------------------------------------------


def speculating_host(tuning):
    from superfluid.domain.gates.policy import SpecPolicy
    from superfluid.domain.prompt_lookup import PromptLookupDrafter
    from superfluid.domain.spec_settings import SpecSettings
    from superfluid.domain.strategies import Strategy

    runtime = FakeRuntime(FakeModel(eos=False))
    policy = SpecPolicy(SpecSettings(min_yield=0.0, adaptive=False), default_depth=4, tuning=tuning)
    drafter = PromptLookupDrafter()
    executor = Executor(
        runtime, max_lanes=1, clock=time.perf_counter, drafter=drafter, policy=policy
    )
    registration = Registration(Strategy.PROMPT_LOOKUP, drafter, ())
    return ModelHost("m", runtime, registration, policy, executor)


def test_each_throughput_verdict_is_logged_once_with_what_it_measured(service, caplog):
    from superfluid.domain.gates.throughput import GateTuning

    caplog.set_level("INFO", logger="superfluid")
    model_host = speculating_host(
        GateTuning(probe_ticks=2, window_ticks=1000, early_stop_ticks=100, settle_ticks=12)
    )
    svc = service(model_host)
    sink = Collector()
    # A repeating prompt, so prompt-lookup drafts and the gate has something to compare.
    svc.submit(model_host, GenerationRequest([5, 6, 7, 8] * 8, GREEDY, 60), sink)
    assert sink.done.wait(10)

    def gate_lines():
        return [r.getMessage() for r in caplog.records if "throughput gate" in r.getMessage()]

    from superfluid.application.service import describe_verdict

    lines = gate_lines()
    assert lines, "the gate decided at 1 lane, so the log says so"
    assert all(line.startswith("m: throughput gate at 1 lane: ") for line in lines)
    assert lines[-1] == "m: " + describe_verdict(1, model_host.policy.verdicts()[1])
    # A request too short for another decision logs nothing more: a verdict is said once.
    again = Collector()
    svc.submit(model_host, GenerationRequest([5, 6, 7, 8] * 8, GREEDY, 3), again)
    assert again.done.wait(10)
    assert gate_lines() == lines


def test_a_verdict_reads_as_one_line_that_says_what_was_compared():
    from superfluid.application.service import describe_verdict
    from superfluid.domain.gates.throughput import ThroughputVerdict

    won = ThroughputVerdict(True, 91.04, 61.3, spec_ticks=24, plain_ticks=30)
    assert describe_verdict(8, won) == (
        "throughput gate at 8 lanes: speculate "
        "(drafting 91.0 tok/s over 24 ticks, plain 61.3 over 30)"
    )
    lost = ThroughputVerdict(False, 50.0, 60.0, spec_ticks=48, plain_ticks=48, wait=64)
    assert describe_verdict(1, lost).startswith(
        "throughput gate at 1 lane: plain, re-probe after 64 requests (drafting 50.0"
    )
    final = ThroughputVerdict(False, 55.0, 44.0, 30, 40, at_deadline=True)
    assert describe_verdict(2, final) == (
        "throughput gate at 2 lanes: plain for good (re-probing is off) "
        "(drafting 55.0 tok/s over 30 ticks, plain 44.0 over 40; the probe ran out of ticks)"
    )
    undecided = ThroughputVerdict(
        True, 0.0, 126.8, plain_ticks=167, wait=4, at_deadline=True, undecided=True
    )
    assert describe_verdict(1, undecided) == (
        "throughput gate at 1 lane: undecided, measuring on; its deadline runs again after 4"
        " requests (nothing drafted to measure; plain 126.8 tok/s over 167 ticks; a verdict"
        " needs a full probe's measured ticks each way)"
    )


def test_an_undecided_gate_is_said_once_until_a_verdict_comes(caplog):
    from types import SimpleNamespace

    from superfluid.application.service import _log_verdicts, _Worker
    from superfluid.domain.gates.throughput import ThroughputVerdict

    caplog.set_level("INFO", logger="superfluid")
    verdicts = {}
    host = SimpleNamespace(name="m", policy=SimpleNamespace(verdicts=lambda: dict(verdicts)))
    worker = _Worker(host)  # type: ignore[arg-type]

    def undecided(plain_ticks):
        return ThroughputVerdict(True, 0.0, 50.0, plain_ticks=plain_ticks, wait=4, undecided=True)

    for said in (undecided(190), undecided(380), undecided(570)):
        verdicts[1] = said
        _log_verdicts(worker)
    verdicts[1] = ThroughputVerdict(True, 90.0, 50.0, spec_ticks=24, plain_ticks=600)
    _log_verdicts(worker)
    lines = [r.getMessage() for r in caplog.records if "throughput gate" in r.getMessage()]
    assert len(lines) == 2
    assert "undecided" in lines[0] and "over 190 ticks" in lines[0]
    assert ": speculate (" in lines[1]


# -- draining ----------------------------------------------------------------------------------


class Events(Collector):
    def __init__(self):
        super().__init__()
        self.error = None

    def __call__(self, event):
        if event.error is not None:
            self.error = event.error
        super().__call__(event)


def test_a_drain_refuses_new_requests_hands_back_the_waiting_and_lets_lanes_run(service):
    from superfluid.application.admission import Admission
    from superfluid.application.service import SHUTTING_DOWN, ShuttingDown

    h = host(runtime=FakeRuntime(FakeModel(eos=False), context_size=10**9))
    h.admission = Admission(lanes=1, queue=4)
    h.executor = Executor(h.runtime, max_lanes=1, clock=time.perf_counter)
    svc = service(h)
    running, waiting = Events(), Events()
    long = GenerationRequest([1, 2, 3], GREEDY, max_tokens=10**8)
    svc.submit(h, long, running)
    svc.submit(h, GenerationRequest([4, 5, 6], GREEDY, max_tokens=4), waiting)
    deadline = time.time() + 5
    while h.executor.active_lanes == 0 and time.time() < deadline:
        time.sleep(0.001)
    svc.drain()
    assert waiting.done.wait(5)
    assert waiting.finish is Finish.ERROR and waiting.tokens == []
    assert waiting.error.startswith(SHUTTING_DOWN) and "had not started" in waiting.error
    with pytest.raises(ShuttingDown):
        svc.submit(h, GenerationRequest([1, 2, 3], GREEDY, max_tokens=4), Events())
    so_far = len(running.tokens)
    deadline = time.time() + 5
    while len(running.tokens) == so_far and time.time() < deadline:
        time.sleep(0.001)
    assert len(running.tokens) > so_far and not running.done.is_set()  # the lane runs on
    long.cancel()
    assert running.done.wait(5) and running.finish is Finish.CANCELLED
    assert h.places.held == 0


def test_end_all_ends_running_requests_with_a_shutting_down_error(service):
    from superfluid.application.service import SHUTTING_DOWN

    h = host(runtime=FakeRuntime(FakeModel(eos=False), context_size=10**9))
    svc = service(h)
    sinks = [Events() for _ in range(2)]
    for sink in sinks:
        svc.submit(h, GenerationRequest([1, 2, 3], GREEDY, max_tokens=10**8), sink)
    deadline = time.time() + 5
    while h.executor.active_lanes < 2 and time.time() < deadline:
        time.sleep(0.001)
    assert h.places.held == 2
    svc.end_all()
    for sink in sinks:
        assert sink.done.wait(5)
        assert sink.finish is Finish.ERROR and sink.error == SHUTTING_DOWN
    assert h.places.held == 0 and h.executor.active_lanes == 0

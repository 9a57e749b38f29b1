import threading
import time

import pytest

from superfluid.application.executor import Executor
from superfluid.application.registration import Registration
from superfluid.application.requests import Finish, GenerationRequest
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

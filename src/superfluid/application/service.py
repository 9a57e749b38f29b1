"""The generation service: one worker thread per served model drives its executor.

Callers (the HTTP layer) submit a request with a sink; the worker calls the sink from its own
thread with each `Committed` event, the last one carrying the finish reason. A sink must be
quick and must not raise (the HTTP layer hands events to its event loop). A request whose client
went away is cancelled and its lane freed at the worker's next tick.

Each model admits at most its lanes plus its queue (`ModelHost.admission`); `submit` raises
`Overloaded` past that, before the request touches the worker, and a request gives its place
back when its last event is delivered.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from superfluid.application.admission import Admission
from superfluid.application.executor import Executor, TickReport
from superfluid.application.grammar import TokenPieces
from superfluid.application.ports import Runtime
from superfluid.application.registration import Registration
from superfluid.application.requests import Committed, Finish, GenerationRequest, SpecStats
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.sampling_defaults import BUILT_IN_SAMPLING, SamplingDefaults

log = logging.getLogger("superfluid")

Sink = Callable[[Committed], None]


class Observer(Protocol):
    """Where ticks and finished requests are reported (metrics, the monitor)."""

    def tick(self, model: str, report: TickReport, active_lanes: int) -> None: ...

    def finished(self, model: str, event: Committed, generated: int) -> None: ...


@dataclass(eq=False)
class ModelHost:
    """One served model: its runtime, what speculation registered, and its executor.

    `name` is the id clients see (the served name, else the file name); `aliases` are other
    names a request may use for it (the file name, when a served name replaced it).
    """

    name: str
    runtime: Runtime
    registration: Registration
    policy: SpecPolicy | None
    executor: Executor
    sampling: SamplingDefaults = BUILT_IN_SAMPLING
    aliases: tuple[str, ...] = ()
    admission: Admission | None = None
    _inbox: queue.SimpleQueue[tuple[GenerationRequest, Sink]] = field(
        default_factory=queue.SimpleQueue
    )
    _wake: threading.Event = field(default_factory=threading.Event)
    _sinks: dict[int, tuple[Sink, int]] = field(default_factory=dict)
    _pieces: TokenPieces | None = None
    _abandonment_logged: bool = False

    def __post_init__(self) -> None:
        if self.admission is None:
            self.admission = Admission(self.executor.max_lanes)

    @property
    def default_temperature(self) -> float:
        return self.sampling.temperature

    @property
    def places(self) -> Admission:
        assert self.admission is not None
        return self.admission

    def token_pieces(self) -> TokenPieces:
        """Each token's bytes for grammar lanes, cached for the model's lifetime."""
        if self._pieces is None:
            self._pieces = TokenPieces(self.runtime.detokenize)
        return self._pieces


class UnknownModel(LookupError):
    pass


class Overloaded(Exception):
    """Every place of a model (lanes + queue) is taken: the request is refused, not queued."""

    def __init__(self, host: ModelHost) -> None:
        admission = host.places
        super().__init__(
            f"{host.name} is at capacity: its lanes ({admission.lanes}) and its queue"
            f" ({admission.queue}) are full; retry shortly"
        )
        self.model = host.name


class GenerationService:
    def __init__(self, hosts: Sequence[ModelHost], observer: Observer | None = None) -> None:
        if not hosts:
            raise ValueError("a service serves at least one model")
        self._hosts = {host.name: host for host in hosts}
        self._order = list(hosts)
        self._observer = observer
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def hosts(self) -> list[ModelHost]:
        return list(self._order)

    def host(self, name: str | None) -> ModelHost:
        """The model a request names; None or an empty name picks the first served model."""
        if not name:
            return self._order[0]
        host = self._hosts.get(name)
        if host is None:
            raise UnknownModel(name)
        return host

    def start(self) -> None:
        for host in self._order:
            thread = threading.Thread(
                target=self._work, args=(host,), name=f"superfluid-{host.name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        for host in self._order:
            host._wake.set()
        for thread in self._threads:
            thread.join(timeout)

    def submit(self, host: ModelHost, request: GenerationRequest, sink: Sink) -> None:
        """Hand `request` to `host`'s worker; Overloaded when the model has no place for it."""
        if not host.places.enter():
            raise Overloaded(host)
        host._inbox.put((request, sink))
        host._wake.set()

    def active_lanes(self, host: ModelHost) -> int:
        return host.executor.active_lanes

    # -- the worker ----------------------------------------------------------------------------

    def _work(self, host: ModelHost) -> None:
        executor = host.executor
        while not self._stopping.is_set():
            self._take_submissions(host)
            if executor.idle:
                host._wake.wait(timeout=0.5)
                host._wake.clear()
                continue
            try:
                events = executor.tick()
            except Exception:  # a bug must not kill the worker silently: fail loudly, keep serving
                log.exception("the executor of %s failed a tick", host.name)
                self._fail_all(host, "internal error in the executor")
                continue
            for event in events:
                self._deliver(host, event)
            _log_abandonment(host)
            report = executor.last_tick
            if self._observer is not None and report is not None:
                self._observer.tick(host.name, report, executor.active_lanes)
        self._fail_all(host, "the server is shutting down")

    def _take_submissions(self, host: ModelHost) -> None:
        while True:
            try:
                request, sink = host._inbox.get_nowait()
            except queue.Empty:
                return
            host._sinks[request.id] = (sink, 0)
            host.executor.submit(request)

    def _deliver(self, host: ModelHost, event: Committed) -> None:
        entry = host._sinks.get(event.request_id)
        if entry is None:
            return
        sink, generated = entry
        generated += len(event.tokens)
        if event.finish is None:
            host._sinks[event.request_id] = (sink, generated)
        else:
            del host._sinks[event.request_id]
            host.places.leave()
            if self._observer is not None:
                self._observer.finished(host.name, event, generated)
        try:
            sink(event)
        except Exception:
            log.exception("a response sink failed")

    def _fail_all(self, host: ModelHost, why: str) -> None:
        for request_id in list(host._sinks):
            self._deliver(host, Committed(request_id, (), SpecStats(), Finish.ERROR, why))
        # No lane survives an executor failure: free every sequence and start over.
        host.executor.abort_all()


def _log_abandonment(host: ModelHost) -> None:
    """Say once, when it happens, that the yield floor gave the strategy up (docs/contract.md §7:
    visible on /metrics and in the log)."""
    policy = host.policy
    if policy is None or host._abandonment_logged or not policy.abandoned:
        return
    host._abandonment_logged = True
    log.info(
        "speculation: %s abandoned: two requests in a row drafted below --spec-min-yield %g "
        "accepted tokens per round",
        host.registration.strategy,
        policy.settings.min_yield,
    )

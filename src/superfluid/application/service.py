"""The generation service: one worker thread per served model drives its executor.

Callers (the HTTP layer) submit a request with a sink; the worker calls the sink from its own
thread with each `Committed` event, the last one carrying the finish reason. A sink must be
quick and must not raise (the HTTP layer hands events to its event loop). A request whose client
went away is cancelled and its lane freed at the worker's next tick.

Each model admits at most its lanes plus its queue (`ModelHost.admission`); `submit` raises
`Overloaded` past that, before the request touches the worker, and a request gives its place
back when its last event is delivered.

Draining (`drain`): a server that is stopping refuses new submissions (`ShuttingDown`), hands
every request still waiting for a lane back with an error that says so (nothing of it was sent,
so the HTTP layer answers 503 and a router can retry it elsewhere), and lets the lanes run to
their end; `end_all` then ends whatever still runs, each with an error event.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from superfluid.application.admission import Admission
from superfluid.application.events import Committed, Finish, Observer, SpecStats
from superfluid.application.executor import Executor
from superfluid.application.grammar import TokenPieces
from superfluid.application.ports import Capabilities, Runtime
from superfluid.application.registration import Registration
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.gates.throughput import ThroughputVerdict
from superfluid.domain.sampling_defaults import BUILT_IN_SAMPLING, SamplingDefaults
from superfluid.domain.tool_calls.families import ToolFamily

log = logging.getLogger("superfluid")

Sink = Callable[[Committed], None]


@dataclass(eq=False)
class ModelHost:
    """One served model: its runtime, what speculation registered, and its executor.

    `name` is the id clients see (the served name, else the file name); `aliases` are other
    names a request may use for it (the file name, when a served name replaced it).

    Callers (the HTTP layer) ask the model itself for what they need of its runtime
    (`capabilities`, `tokenize`, `chat_prompt`, `detokenize`, `token_pieces`), never the runtime;
    the worker that drives the executor belongs to the `GenerationService`.
    """

    name: str
    runtime: Runtime
    registration: Registration
    policy: SpecPolicy | None
    executor: Executor
    sampling: SamplingDefaults = BUILT_IN_SAMPLING
    aliases: tuple[str, ...] = ()
    admission: Admission | None = None
    #: `--tool-call-parser`: the family that reads this model's calls, whatever its template.
    tool_parser: ToolFamily | None = None
    _pieces: TokenPieces | None = field(default=None, repr=False)
    _turn_end_tokens: frozenset[int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.admission is None:
            self.admission = Admission(self.executor.max_lanes)

    @property
    def speculates(self) -> bool:
        """Whether a strategy is registered, so this model's lanes may draft."""
        return self.registration.speculates

    @property
    def places(self) -> Admission:
        assert self.admission is not None
        return self.admission

    @property
    def capabilities(self) -> Capabilities:
        return self.runtime.capabilities

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        return self.runtime.tokenize(text, add_special=add_special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return self.runtime.detokenize(tokens)

    def chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The model's chat template applied, ending with the assistant turn's opening."""
        return self.runtime.chat_prompt(messages, tools)

    @property
    def tool_family(self) -> ToolFamily | None:
        """How this model's replies write tool calls (`--tool-call-parser`, else the template's
        markers); None when its template takes no tools."""
        return self.tool_parser or self.runtime.tool_family

    @property
    def chat_template_origin(self) -> str:
        """Where the chat template came from, as an error message names it."""
        return self.runtime.chat_template_origin

    @property
    def turn_ends(self) -> tuple[str, ...]:
        """The chat template's end-of-turn markers: a chat reply stops at them."""
        return self.runtime.turn_ends

    def turn_end_tokens(self) -> frozenset[int]:
        """The end-of-turn markers that are one token each (most are special tokens, which
        render as no text, so a stop string could not catch them)."""
        if self._turn_end_tokens is None:
            tokens = (self.tokenize(marker, add_special=False) for marker in self.turn_ends)
            self._turn_end_tokens = frozenset(t[0] for t in tokens if len(t) == 1)
        return self._turn_end_tokens

    @property
    def template_takes_tools(self) -> bool:
        """Whether the chat template shows tools to the model (whatever parser reads them)."""
        return self.runtime.tool_family is not None

    def token_pieces(self) -> TokenPieces:
        """Each token's bytes for grammar lanes, cached for the model's lifetime."""
        if self._pieces is None:
            self._pieces = TokenPieces(self.runtime.detokenize)
        return self._pieces


@dataclass(eq=False)
class _Worker:
    """A served model's mailbox: what was submitted, the sinks of its requests, its wake-up."""

    host: ModelHost
    inbox: queue.SimpleQueue[tuple[GenerationRequest, Sink]] = field(
        default_factory=queue.SimpleQueue
    )
    wake: threading.Event = field(default_factory=threading.Event)
    #: request id -> (its sink, tokens delivered so far)
    sinks: dict[int, tuple[Sink, int]] = field(default_factory=dict)
    abandonment_logged: bool = False
    #: lane count -> the throughput verdict last logged there
    verdicts_logged: dict[int, ThroughputVerdict] = field(default_factory=dict)


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


class ShuttingDown(Exception):
    """The server is draining: a new request is refused, to be retried on another replica."""


#: The error a request gets when the server stops under it (the HTTP layer answers 503 for a
#: reply that has sent nothing yet, and recognises it by "shutting down").
SHUTTING_DOWN = "the server is shutting down"


class GenerationService:
    def __init__(self, hosts: Sequence[ModelHost], observer: Observer | None = None) -> None:
        if not hosts:
            raise ValueError("a service serves at least one model")
        self._hosts = {host.name: host for host in hosts}
        self._order = list(hosts)
        self._workers = {host: _Worker(host) for host in hosts}
        self._observer = observer
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._ending = threading.Event()
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
                target=self._work,
                args=(self._workers[host],),
                name=f"superfluid-{host.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake_all()
        for thread in self._threads:
            thread.join(timeout)

    def drain(self) -> None:
        """Refuse new requests and hand back those waiting for a lane; lanes run on."""
        self._draining.set()
        self._wake_all()

    def end_all(self) -> None:
        """End every request still in the service, each with a shutting-down error."""
        self._draining.set()
        self._ending.set()
        self._wake_all()

    def _wake_all(self) -> None:
        for worker in self._workers.values():
            worker.wake.set()

    def submit(self, host: ModelHost, request: GenerationRequest, sink: Sink) -> None:
        """Hand `request` to `host`'s worker; Overloaded when the model has no place for it,
        ShuttingDown when the server drains."""
        if self._draining.is_set():
            raise ShuttingDown(SHUTTING_DOWN)
        if not host.places.enter():
            raise Overloaded(host)
        worker = self._workers[host]
        worker.inbox.put((request, sink))
        worker.wake.set()

    def active_lanes(self, host: ModelHost) -> int:
        return host.executor.active_lanes

    # -- the worker ----------------------------------------------------------------------------

    def _work(self, worker: _Worker) -> None:
        host = worker.host
        executor = host.executor
        while not self._stopping.is_set():
            self._take_submissions(worker)
            if self._draining.is_set():
                self._hand_back_waiting(worker)
            if self._ending.is_set() and worker.sinks:
                self._fail_all(worker, SHUTTING_DOWN)
            if executor.idle:
                worker.wake.wait(timeout=0.5)
                worker.wake.clear()
                continue
            try:
                events = executor.tick()
            except Exception:  # a bug must not kill the worker silently: fail loudly, keep serving
                log.exception("the executor of %s failed a tick", host.name)
                self._fail_all(worker, "internal error in the executor")
                continue
            for event in events:
                self._deliver(worker, event)
            _log_abandonment(worker)
            _log_verdicts(worker)
            report = executor.last_tick
            if self._observer is not None and report is not None:
                self._observer.tick(host.name, report, executor.active_lanes)
        self._fail_all(worker, SHUTTING_DOWN)

    def _take_submissions(self, worker: _Worker) -> None:
        while True:
            try:
                request, sink = worker.inbox.get_nowait()
            except queue.Empty:
                return
            worker.sinks[request.id] = (sink, 0)
            worker.host.executor.submit(request)

    def _deliver(self, worker: _Worker, event: Committed) -> None:
        entry = worker.sinks.get(event.request_id)
        if entry is None:
            return
        sink, generated = entry
        generated += len(event.tokens)
        if event.finish is None:
            worker.sinks[event.request_id] = (sink, generated)
        else:
            del worker.sinks[event.request_id]
            worker.host.places.leave()
            if self._observer is not None:
                self._observer.finished(worker.host.name, event, generated)
        try:
            sink(event)
        except Exception:
            log.exception("a response sink failed")

    def _hand_back_waiting(self, worker: _Worker) -> None:
        why = f"{SHUTTING_DOWN}; this request had not started: retry it on another replica"
        for request in worker.host.executor.take_waiting():
            self._deliver(worker, Committed(request.id, (), SpecStats(), Finish.ERROR, why))

    def _fail_all(self, worker: _Worker, why: str) -> None:
        for request_id in list(worker.sinks):
            self._deliver(worker, Committed(request_id, (), SpecStats(), Finish.ERROR, why))
        # No lane survives an executor failure: free every sequence and start over.
        worker.host.executor.abort_all()


def _log_verdicts(worker: _Worker) -> None:
    """Say each throughput-gate decision when it is made, with the rates it compared and how
    many ticks each was measured over: the gate's verdicts are what an operator asks about when
    speculation is on and a lane count decodes plainly (or the other way round)."""
    policy = worker.host.policy
    if policy is None:
        return
    for lane_count, verdict in policy.verdicts().items():
        before = worker.verdicts_logged.get(lane_count)
        if before is verdict:
            continue
        worker.verdicts_logged[lane_count] = verdict
        if before is not None and before.undecided and verdict.undecided:
            continue  # still undecided: said once, until a verdict comes
        log.info("%s: %s", worker.host.name, describe_verdict(lane_count, verdict))


def describe_verdict(lane_count: int, verdict: ThroughputVerdict) -> str:
    lanes = f"{lane_count} lane{'s' if lane_count > 1 else ''}"
    if verdict.undecided:
        outcome = f"undecided, measuring on; its deadline runs again after {verdict.wait} requests"
    elif verdict.speculate:
        outcome = "speculate"
    elif verdict.wait is None:
        outcome = "plain for good (re-probing is off)"
    else:
        outcome = f"plain, re-probe after {verdict.wait} requests"
    if verdict.spec_ticks == 0:
        measured = (
            f"nothing drafted to measure; plain {verdict.plain_rate:.1f} tok/s"
            f" over {verdict.plain_ticks} ticks"
        )
    else:
        measured = (
            f"drafting {verdict.spec_rate:.1f} tok/s over {verdict.spec_ticks} ticks, "
            f"plain {verdict.plain_rate:.1f} over {verdict.plain_ticks}"
        )
    if verdict.undecided:
        measured += "; a verdict needs a full probe's measured ticks each way"
    elif verdict.at_deadline:
        measured += "; the probe ran out of ticks"
    return f"throughput gate at {lanes}: {outcome} ({measured})"


def _log_abandonment(worker: _Worker) -> None:
    """Say once, when it happens, that the yield floor gave the strategy up (docs/contract.md §7:
    visible on /metrics and in the log)."""
    host = worker.host
    policy = host.policy
    if policy is None or worker.abandonment_logged or not policy.abandoned:
        return
    worker.abandonment_logged = True
    log.info(
        "speculation: %s abandoned: two requests in a row drafted below --spec-min-yield %g "
        "accepted tokens per round",
        host.registration.strategy,
        policy.settings.min_yield,
    )

"""`superfluid serve` running: the listening socket, loading, serving, draining, exiting.

The order is what a load balancer and an orchestrator rely on:

1. Everything that can be refused without loading weights is refused first (a bad flag, an
   unreadable model file, a busy port): one line, exit 2, and the port never opens.
2. The port opens and `ServerGate` answers at once: `/health` 503 "loading" (with which models
   are ready), `/v1/*` 503 with `Retry-After`, `/livez` 200. The models load on a thread.
3. Once every model is loaded, requests reach the API app; `/health` answers 200.
4. SIGTERM or SIGINT drains: `/health` and new requests get 503 at once, requests waiting for a
   lane are handed back (503, to be retried elsewhere), running requests finish, for at most
   `--shutdown-timeout` seconds; what still runs then ends with an error event in its stream
   (a 503 when nothing was sent yet). A second signal ends the drain at once, the same way.
   The process exits 0: a drain is how the server is meant to stop.

A model that fails to load after the port opened ends the server with its one-line error and
exit 2, as a refusal before the port opened does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import uvicorn

from superfluid.application.serving import ServePlan
from superfluid.domain.errors import SuperfluidError
from superfluid.entrypoints.http.lifecycle import Phase, ServerGate

if TYPE_CHECKING:
    from superfluid.application.service import GenerationService
    from superfluid.entrypoints.container import Container

log = logging.getLogger("superfluid")


class _Stoppable(Protocol):
    def stop(self) -> None: ...


#: Seconds the streams ended by a drain's timeout get to send their error event and close.
_FAREWELL_SECONDS = 5.0


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio turns Nagle's algorithm off only on connections
    # of a socket that names its protocol. With Nagle on, a reply's body written after its
    # headers waits for the client's delayed ACK (40 ms on Linux) on kept-alive connections:
    # every first streamed token came late by that much.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise SuperfluidError(f"cannot listen on {host}:{port} ({error.strerror})") from error
    sock.listen(128)
    return sock


def run_server(plan: ServePlan) -> None:
    """Serve `plan` until a signal drains the server; raises SuperfluidError for a refusal."""
    from dependency_injector import providers

    from superfluid.entrypoints.container import Container

    container = Container(plan=plan)
    names = container.serving().check(plan)
    sock = listen(plan.host, plan.port)
    gate = ServerGate(names)
    container.loaded.override(providers.Object(lambda host: gate.loaded(host.name)))
    config = uvicorn.Config(
        gate,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # The drain has ended every request before uvicorn shuts down; this only bounds
        # connections a client keeps open past that.
        timeout_graceful_shutdown=int(_FAREWELL_SECONDS),
    )
    server = DrainingServer(config, gate, plan.shutdown_timeout)
    port = sock.getsockname()[1]
    url = f"http://[{plan.host}]:{port}" if ":" in plan.host else f"http://{plan.host}:{port}"
    log.info("listening on %s; loading %s", url, ", ".join(names))
    loader = threading.Thread(
        target=_load, args=(container, gate, server, url), name="superfluid-load", daemon=True
    )
    loader.start()
    try:
        server.run(sockets=[sock])
    finally:
        server.stop_service()
    if server.load_failure is not None:
        raise server.load_failure
    if loader.is_alive():
        # A signal while the weights load: the loading thread is native code that cannot be
        # interrupted. The process ends with it, as a daemon thread.
        log.info("stopped while loading")


def _load(container: Container, gate: ServerGate, server: DrainingServer, url: str) -> None:
    try:
        hosts = container.hosts()
        service = container.service()
        monitor = container.monitor()
        app = container.app()
    except SuperfluidError as error:
        server.fail(error)
        return
    except BaseException:
        log.exception("loading the models failed")
        server.fail(SuperfluidError("loading the models failed (the log above says where)"))
        return
    service.start()
    monitor.start()
    server.attach(service, monitor)
    gate.open(app)
    log.info("ready: serving %s on %s", ", ".join(h.name for h in hosts), url)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with signals that drain (module docstring) instead of cutting, and no
    re-raised signal at the end: the process exits 0 after a drain."""

    def __init__(self, config: uvicorn.Config, gate: ServerGate, timeout: float) -> None:
        super().__init__(config)
        self._gate = gate
        self._timeout = timeout
        self._service: GenerationService | None = None
        self._monitor: _Stoppable | None = None
        self._attach_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hurry: asyncio.Event | None = None
        self._drain_task: asyncio.Task[None] | None = None  # held, so it is not collected
        self._signals = 0
        self.load_failure: SuperfluidError | None = None

    def attach(self, service: GenerationService, monitor: _Stoppable) -> None:
        """The running service and monitor, stopped with the server."""
        with self._attach_lock:
            self._service = service
            self._monitor = monitor

    def fail(self, error: SuperfluidError) -> None:
        """Loading failed: stop serving, and let the caller report `error`."""
        self.load_failure = error
        self.should_exit = True

    def stop_service(self) -> None:
        with self._attach_lock:
            service, monitor = self._service, self._monitor
        if monitor is not None:
            monitor.stop()
        if service is not None:
            service.stop()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._hurry = asyncio.Event()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes of the event loop's thread (uvicorn
        # installs it with signal.signal): hand the work to the loop, never do it here.
        self._signals += 1
        loop = self._loop
        if loop is None:
            self.should_exit = True
            return
        first = self._signals == 1
        loop.call_soon_threadsafe(self._on_signal, first)

    def _on_signal(self, first: bool) -> None:
        if not first:
            assert self._hurry is not None
            self._hurry.set()
            return
        if self._gate.phase is Phase.LOADING:
            self._gate.drain()
            self.should_exit = True
            return
        assert self._loop is not None
        self._drain_task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        gate = self._gate
        gate.drain()
        with self._attach_lock:
            service = self._service
        assert service is not None  # the gate was open, so the service runs
        running = gate.in_flight
        log.info(
            "draining: %d request%s in flight; up to %gs to finish (a second signal ends them now)",
            running,
            "" if running == 1 else "s",
            self._timeout,
        )
        service.drain()
        finished = await self._until(gate.idle(self._timeout))
        ended = 0
        if not finished:
            ended = gate.in_flight
            service.end_all()
            await gate.idle(_FAREWELL_SECONDS)
        log.info(
            "drained: %s; exiting",
            f"{ended} request{'' if ended == 1 else 's'} ended unfinished"
            if ended
            else "every request finished",
        )
        self.should_exit = True

    async def _until(self, idle: Awaitable[bool]) -> bool:
        """The drain's wait: True when the app went idle, False at the timeout or on a second
        signal."""
        assert self._hurry is not None
        waiting = asyncio.ensure_future(idle)
        hurry = asyncio.ensure_future(self._hurry.wait())
        done, _ = await asyncio.wait({waiting, hurry}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        hurry.cancel()
        return waiting in done and not waiting.cancelled() and bool(waiting.result())

"""The server's phases as a load balancer sees them: loading, ready, draining.

`ServerGate` is the ASGI app uvicorn serves from the moment the port opens. While the models
load it answers every request at once: `/health` with 503 and which models are ready, `/v1/*`
with 503 and `Retry-After`, so a balancer's check fails fast and a client is told to come back
instead of waiting on a held connection. Once every model is loaded it hands each request to
the API app. When the server drains to stop, `/health` turns 503 at once (balancers take the
replica out) and new requests get 503 "shutting down" with `Retry-After`, while the requests
already in the app run to their end; the gate counts them, so the drain knows when it is done.

`/livez` answers 200 in every phase: an orchestrator tells "loading" or "draining" (not ready)
from "dead" (no answer) by it. `/metrics` stays served while draining, for the scrapers and
routers that read load off it.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Sequence
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from superfluid.entrypoints.http.errors import (
    LOADING_CODE,
    RETRY_AFTER_SECONDS,
    SERVER_ERROR,
    SHUTTING_DOWN_CODE,
    error_body,
)

LIVENESS = "/livez"
READINESS = "/health"


class Phase(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"


class ServerGate:
    """The ASGI app in front of the API app; see the module docstring for what each phase
    answers. `loaded`, `open` and `drain` may be called from any thread."""

    def __init__(self, models: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._phase = Phase.LOADING
        self._loading = list(models)
        self._ready: list[str] = []
        self._app: ASGIApp | None = None
        self._in_flight = 0
        self._idle: asyncio.Event | None = None

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def in_flight(self) -> int:
        """Requests the API app is serving now."""
        return self._in_flight

    def loaded(self, model: str) -> None:
        """`model` is loaded (it shows as ready on /health; requests wait for every model)."""
        with self._lock:
            if model in self._loading:
                self._loading.remove(model)
                self._ready.append(model)

    def open(self, app: ASGIApp) -> None:
        """Every model is loaded: requests go to `app` from now on."""
        with self._lock:
            self._app = app
            if self._phase is Phase.LOADING:
                self._phase = Phase.READY

    def drain(self) -> None:
        """Stop taking requests; those already in the app go on."""
        with self._lock:
            self._phase = Phase.DRAINING

    async def idle(self, timeout: float | None) -> bool:
        """Wait until the app serves no request, at most `timeout` seconds; True when idle.
        Call from the server's event loop."""
        if self._in_flight == 0:
            return True
        if self._idle is None:
            self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets: uvicorn closes the connection
        path = scope["path"]
        if path == LIVENESS:
            await JSONResponse({"status": "alive", "phase": self._phase.value})(
                scope, receive, send
            )
            return
        app = self._app
        phase = self._phase
        if app is None or (phase is Phase.DRAINING and path != "/metrics"):
            await self._refusal(phase, path)(scope, receive, send)
            return
        self._in_flight += 1
        try:
            await app(scope, receive, send)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._idle is not None:
                self._idle.set()
                self._idle = None

    def _refusal(self, phase: Phase, path: str) -> JSONResponse:
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        if phase is Phase.DRAINING:
            if path == READINESS:
                return JSONResponse({"status": "draining"}, 503, headers=retry)
            body = error_body(
                "the server is shutting down; retry on another replica",
                type=SERVER_ERROR,
                code=SHUTTING_DOWN_CODE,
            )
            # `Connection: close`: a kept-alive client reconnects, through its balancer, to a
            # replica that stays.
            return JSONResponse(body, 503, headers={**retry, "Connection": "close"})
        with self._lock:
            ready, loading = list(self._ready), list(self._loading)
        if path == READINESS:
            return JSONResponse(
                {"status": "loading", "ready": ready, "loading": loading}, 503, headers=retry
            )
        body = error_body(
            f"the server is loading its models ({', '.join(loading) or 'starting'}); retry shortly",
            type=SERVER_ERROR,
            code=LOADING_CODE,
        )
        return JSONResponse(body, 503, headers=retry)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop with the event loop: the caller owns the service."""
    while True:
        message: dict[str, Any] = dict(await receive())
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return

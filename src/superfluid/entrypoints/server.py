"""`superfluid serve` running: the listening socket, the server, and how it starts and ends."""

from __future__ import annotations

import logging
import socket

from superfluid.application.serving import ServePlan
from superfluid.domain.errors import SuperfluidError

log = logging.getLogger("superfluid")


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
    import uvicorn

    from superfluid.entrypoints.container import Container

    container = Container(plan=plan)
    # Bind first: a busy port is a one-line error before minutes of model loading.
    sock = listen(plan.host, plan.port)
    try:
        hosts = container.hosts()
        service = container.service()
        monitor = container.monitor()
        fastapi_app = container.app()
    except BaseException:
        sock.close()
        raise
    service.start()
    monitor.start()
    bound_port = sock.getsockname()[1]
    shown = f"[{plan.host}]" if ":" in plan.host else plan.host
    log.info("listening on http://%s:%d (%s)", shown, bound_port, ", ".join(h.name for h in hosts))
    server = uvicorn.Server(uvicorn.Config(fastapi_app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        monitor.stop()
        service.stop()

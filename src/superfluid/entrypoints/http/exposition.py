"""What the HTTP app needs from metrics, and the middleware that reports every request.

The app does not know Prometheus: it serves whatever `exposition()` returns on `/metrics` and
reports each answered request by route template (`/v1/chat/completions`, never the raw path,
so a client probing random URLs cannot grow the label set) and status.
"""

from __future__ import annotations

from typing import Protocol

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The route label of a request that matched no route.
UNMATCHED = "unmatched"


class MetricsExposition(Protocol):
    def exposition(self) -> tuple[bytes, str]:
        """The metrics page: (body, content type)."""
        ...

    def http_request(self, route: str, status: int) -> None:
        """One answered request: the route template it matched and the status it got."""
        ...


class RequestMetricsMiddleware:
    """Pure ASGI (not BaseHTTPMiddleware), so streamed replies pass through unbuffered."""

    def __init__(self, app: ASGIApp, metrics: MetricsExposition) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        reported = False

        async def send_and_report(message: Message) -> None:
            nonlocal reported
            if message["type"] == "http.response.start" and not reported:
                reported = True
                self._metrics.http_request(_route_of(scope), int(message["status"]))
            await send(message)

        try:
            await self._app(scope, receive, send_and_report)
        except Exception:
            # The outermost error handler answers 500 after this; count it here.
            if not reported:
                reported = True
                self._metrics.http_request(_route_of(scope), 500)
            raise


def _route_of(scope: Scope) -> str:
    route = scope.get("route")  # set by the router once a route matched
    if isinstance(route, BaseRoute):
        return str(getattr(route, "path", UNMATCHED))
    return UNMATCHED

"""The OpenAI-compatible HTTP API over a running `GenerationService`.

Routes: `POST /v1/chat/completions`, `POST /v1/completions` (streamed or not), `GET /v1/models`
(and `/v1/models/{id}`), `GET /health`, `GET /metrics`. With an API key, every `/v1/*` route
wants `Authorization: Bearer <key>`; `/health` and `/metrics` stay open for probes and scrapers.

The service is started and stopped by the caller; the app only submits requests to it. A route
parses and checks its body (intake.py), asks `RequestDefaults` (application/request_defaults.py)
for the request to submit, and renders the reply (replies.py, streaming.py): bad input is a 400
before anything is submitted, so it never costs a lane.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from superfluid.application.request_defaults import RequestDefaults, Work
from superfluid.application.service import (
    GenerationService,
    ModelHost,
    Overloaded,
    ShuttingDown,
)
from superfluid.application.tool_calling import ToolChoice, ToolPlan
from superfluid.entrypoints.http.errors import (
    SERVER_ERROR,
    SHUTTING_DOWN_CODE,
    ApiError,
    install_error_handlers,
    overloaded,
    unavailable,
)
from superfluid.entrypoints.http.exposition import MetricsExposition, RequestMetricsMiddleware
from superfluid.entrypoints.http.generation import Generation, Piece, unless_disconnected
from superfluid.entrypoints.http.intake import (
    asked,
    chat_messages,
    chat_prompt_tokens,
    check_supported,
    completion_prompt,
    find_host,
    read_body,
    template_tools,
    tools_asked,
)
from superfluid.entrypoints.http.replies import CallOut, LogprobEntry, ReplyFrame, usage
from superfluid.entrypoints.http.schemas import (
    ChatCompletionBody,
    CompletionBody,
    ErrorBody,
    StreamOptions,
    openapi_request_body,
)
from superfluid.entrypoints.http.streaming import GenerationStream, sse_events

log = logging.getLogger("superfluid")


def create_app(
    service: GenerationService,
    *,
    metrics: MetricsExposition | None,
    api_key: str | None = None,
    cli_temperature: float | None = None,
    cli_seed: int | None = None,
    max_temperature: float | None = None,
    max_body_bytes: int = 1 << 20,
) -> FastAPI:
    """The app serving `service` (already started by the caller, who also stops it)."""
    defaults = RequestDefaults(cli_temperature, cli_seed, max_temperature)
    routes = _Routes(service, defaults, metrics, max_body_bytes, started=int(time.time()))
    # No OpenAPI page: the API is OpenAI's, documented there, and the surface stays small.
    app = FastAPI(title="superfluid", openapi_url=None, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    if metrics is not None:
        app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    guards = [Depends(_bearer_guard(api_key))] if api_key else []
    v1 = APIRouter(prefix="/v1", dependencies=guards)
    generates = {**_REPLY, **_refusals(400, 401, 404, 413, 429, 503)}
    generators = (
        ("/chat/completions", routes.chat_completions, ChatCompletionBody),
        ("/completions", routes.completions, CompletionBody),
    )
    for path, route, body in generators:
        v1.add_api_route(
            path,
            route,
            methods=["POST"],
            responses=generates,
            openapi_extra=openapi_request_body(body),
        )
    v1.add_api_route("/models", routes.list_models, methods=["GET"], responses=_refusals(401))
    v1.add_api_route(
        "/models/{model:path}", routes.get_model, methods=["GET"], responses=_refusals(401, 404)
    )
    app.include_router(v1)
    app.add_api_route("/health", routes.health, methods=["GET"])
    app.add_api_route(
        "/metrics",
        routes.metrics_page,
        methods=["GET"],
        response_class=PlainTextResponse,
        responses={404: {"description": "metrics are off", "content": {"text/plain": {}}}},
    )
    return app


@dataclass(frozen=True, slots=True)
class _Routes:
    """The routes over one service: each parses, calls the use case or service, and renders."""

    service: GenerationService
    defaults: RequestDefaults
    metrics: MetricsExposition | None
    max_body_bytes: int
    started: int

    async def chat_completions(self, request: Request) -> Response:
        body = await read_body(request, ChatCompletionBody, self.max_body_bytes)
        check_supported(body)
        host = find_host(self.service, body.model)
        plan = self.defaults.tool_plan(tools_asked(body), host)
        messages = chat_messages(body.messages)
        tools = template_tools(body, plan)
        # Templates and tokenizers are plain blocking code: keep them off the event loop.
        prompt = await run_in_threadpool(chat_prompt_tokens, host, messages, tools)
        work = self.defaults.work(asked(body), host, prompt, plan)
        return await self._reply(request, body, host, work, plan)

    async def completions(self, request: Request) -> Response:
        body = await read_body(request, CompletionBody, self.max_body_bytes)
        check_supported(body)
        host = find_host(self.service, body.model)
        text = completion_prompt(body)
        prompt = await run_in_threadpool(host.tokenize, text, add_special=True)
        work = self.defaults.work(asked(body), host, prompt)
        return await self._reply(request, body, host, work)

    async def list_models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [_model_card(h, self.started) for h in self.service.hosts],
        }

    async def get_model(self, model: str) -> dict[str, Any]:
        return _model_card(find_host(self.service, model), self.started)

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "models": [host.name for host in self.service.hosts]}

    async def metrics_page(self) -> Response:
        if self.metrics is None:
            return PlainTextResponse("metrics are not enabled on this server\n", status_code=404)
        body, content_type = self.metrics.exposition()
        return Response(body, media_type=content_type)

    async def _reply(
        self,
        request: Request,
        body: ChatCompletionBody | CompletionBody,
        host: ModelHost,
        work: Work,
        plan: ToolPlan | None = None,
    ) -> Response:
        generation = Generation(self.service, host, work)
        try:
            generation.start()
        except Overloaded as full:
            raise overloaded(str(full)) from None
        except ShuttingDown as stopping:
            raise unavailable(str(stopping), SHUTTING_DOWN_CODE) from None
        frame = ReplyFrame(model=host.name, chat=isinstance(body, ChatCompletionBody))
        if body.streaming:
            return await _stream(request, generation, frame, body.options, plan)
        return await _whole(request, generation, frame, plan)


async def _stream(
    request: Request,
    generation: Generation,
    frame: ReplyFrame,
    options: StreamOptions,
    plan: ToolPlan | None,
) -> Response:
    """The reply as server-sent events. The first piece comes before any byte goes out, so a
    failure this early is an ordinary HTTP error rather than an event inside a 200 stream."""
    try:
        first = await unless_disconnected(generation.next_piece(), request)
        _raise_if_failed(first)
        events = sse_events(generation, first, frame, options, plan)
    except BaseException:
        generation.cancel()  # failed or abandoned: the lane is not needed
        raise
    return GenerationStream(generation, events)


async def _whole(
    request: Request, generation: Generation, frame: ReplyFrame, plan: ToolPlan | None
) -> Response:
    """The reply as one JSON body, with its tool calls read out of the text."""
    try:
        text, entries, last = await unless_disconnected(_whole_reply(generation), request)
    finally:
        generation.cancel()  # finished, failed or abandoned: the lane is not needed
    _raise_if_failed(last)
    assert last.finish is not None
    totals = usage(generation.prompt_tokens, last.completion_tokens)
    logprobs = entries if generation.request.logprobs is not None else None
    finish = last.finish
    calls: tuple[CallOut, ...] = ()
    if plan is not None and plan.choice is not ToolChoice.NONE:
        text, calls, finish = _read_calls(plan, text, finish)
    return JSONResponse(frame.reply(text, finish, totals, last.spec, logprobs, tool_calls=calls))


# What the OpenAPI schema says of each route's replies (the app itself never reads this; the
# schema is for tests that fuzz the routes against it).
_REPLY: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/json": {}, "text/event-stream": {}}},
}
_REFUSAL_WHY = {
    400: "the request is malformed or asks for what this server cannot do",
    401: "a wrong or missing API key",
    404: "no such model",
    413: "the body is larger than the server accepts",
    429: "the model's lanes and queue are full; retry after Retry-After seconds",
    503: "the server is loading or shutting down; retry after Retry-After seconds",
}


def _refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": ErrorBody, "description": _REFUSAL_WHY[s]} for s in statuses}


async def _whole_reply(generation: Generation) -> tuple[str, list[LogprobEntry], Piece]:
    texts = []
    entries: list[LogprobEntry] = []
    while True:
        piece = await generation.next_piece()
        texts.append(piece.text)
        entries.extend(piece.logprobs)
        if piece.last:
            return "".join(texts), entries, piece


def _read_calls(plan: ToolPlan, text: str, finish: str) -> tuple[str, tuple[CallOut, ...], str]:
    """A finished reply's content, its tool calls, and the finish reason it shows. A forced call
    cut short, or a call the parser cannot read, leaves the whole reply as content (and a line
    in the log); a reply `max_tokens` cut inside a call says `length`."""
    parsed = plan.read(text, finish)
    if parsed.problem is not None:
        log.warning("%s", parsed.problem)
    calls = tuple(CallOut.new(call.name, call.arguments) for call in parsed.calls)
    cut_inside = finish == "length" and plan.ends_inside_call(text)
    shown = plan.finish_reason(finish, called=bool(calls), cut_inside_call=cut_inside)
    return (parsed.content or "") if calls else text, calls, shown


def _raise_if_failed(piece: Piece) -> None:
    if piece.error is None:
        return
    if piece.error_status == 503:
        raise unavailable(piece.error, SHUTTING_DOWN_CODE)
    raise ApiError(piece.error_status, piece.error, type=SERVER_ERROR)


def _bearer_guard(api_key: str) -> Callable[[Request], Coroutine[Any, Any, None]]:
    expected = api_key.encode()

    async def require_api_key(request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("this server needs an API key: send `Authorization: Bearer <key>`")
        # Constant-time comparison: the time taken must not tell how much of a guess was right.
        if not hmac.compare_digest(token.strip().encode(), expected):
            raise _unauthorized(
                "the API key is not this server's; send the key it was started with"
            )

    return require_api_key


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def _model_card(host: ModelHost, created: int) -> dict[str, Any]:
    caps = host.capabilities
    return {
        "id": host.name,
        "object": "model",
        "created": created,
        "owned_by": "superfluid",
        "superfluid": {
            "runtime": caps.runtime,
            "strategy": host.registration.strategy,
            "aliases": list(host.aliases),
            "sampling_defaults": host.sampling.as_json(),
            "capabilities": {
                "verify_rows": caps.verify_rows,
                "verify_batches": caps.verify_batches,
                "truncate_partial": caps.truncate_partial,
                "cut_refusal": caps.cut_refusal,
                "strategies": list(caps.strategies),
                "max_verify_rows": caps.max_verify_rows,
                "context_size": caps.context_size,
            },
        },
    }

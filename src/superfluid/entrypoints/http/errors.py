"""OpenAI-shaped errors: every refusal leaves as `{"error": {message, type, param, code}}`.

A client's mistake is a 4xx whose message says what is wrong and what to do; a bug is a 500 with
no traceback in the body (the server log has it). FastAPI's own 422 validation shape never
reaches a client: validation failures are 400s like every other bad input, because that is what
OpenAI clients expect and raise `BadRequestError` for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from superfluid.application.request_defaults import RequestRefused
from superfluid.domain.errors import SuperfluidError

INVALID_REQUEST = "invalid_request_error"
NOT_FOUND = "not_found_error"
SERVER_ERROR = "server_error"
#: The `code` of a 503 while the server loads its models, and while it drains to stop.
LOADING_CODE = "model_loading"
SHUTTING_DOWN_CODE = "shutting_down"


class ApiError(Exception):
    """A refusal with its HTTP status and the fields of OpenAI's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class ClientGone(Exception):
    """The client hung up before its reply was ready; there is nobody left to answer."""


def error_body(
    message: str, *, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


#: Seconds a refused client is told to wait (`Retry-After`): a lane frees within about a
#: reply's time, and the openai clients honour the header when they retry.
RETRY_AFTER_SECONDS = 1


def overloaded(message: str) -> ApiError:
    """429: every lane and queue place of the model is taken; nothing was queued."""
    return ApiError(
        429,
        message,
        type="server_overloaded",
        code="queue_full",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def unavailable(message: str, code: str) -> ApiError:
    """503 with `Retry-After`: this replica cannot serve the request now (it is loading, or it
    drains before stopping) and nothing of it was done, so a router or client retries it,
    here later or on another replica at once."""
    return ApiError(
        503,
        message,
        type=SERVER_ERROR,
        code=code,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


# -- pydantic errors as one readable sentence -----------------------------------------------------

# Pydantic names the member of a union it tried (`str`, `list[str]`, `ContentPart`) inside an
# error's location. Those tags are not fields a client sent, so they are left out of `param`.
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})


def _is_type_tag(part: str | int) -> bool:
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part or part[:1].isupper())


def _field_path(location: Sequence[str | int]) -> str:
    path = ""
    for part in location:
        if _is_type_tag(part):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def from_validation_errors(errors: Sequence[Any]) -> ApiError:
    """One 400 for a failed validation: the most specific field, with every reason given for it.

    The body is read as JSON first, so a malformed body arrives here as `json_invalid`.
    """
    details = [(_field_path(e.get("loc", ())), str(e.get("msg", "invalid")), e) for e in errors]
    details = [(path.removeprefix("body."), msg, e) for path, msg, e in details]
    if not details:
        return bad_request("the request body is invalid")
    if any(e.get("type") == "json_invalid" for _, _, e in details):
        return bad_request(f"the request body is not valid JSON ({details[0][1]})")
    deepest = max(details, key=lambda d: d[0].count(".") + d[0].count("["))[0]
    reasons = list(dict.fromkeys(msg for path, msg, _ in details if path == deepest))
    because = _either(reasons)
    if not deepest:
        return bad_request(f"the request body is invalid: {because}")
    return bad_request(f"`{deepest}`: {because}", param=deepest)


_SHOULD_BE = "Input should be "


def _either(reasons: list[str]) -> str:
    """Reasons joined with "or"; a union's "Input should be a string" / "... an array" read as
    "input should be a string or an array"."""
    if len(reasons) > 1 and all(r.startswith(_SHOULD_BE) for r in reasons):
        reasons = [reasons[0], *(r.removeprefix(_SHOULD_BE) for r in reasons[1:])]
    return " or ".join(r[:1].lower() + r[1:] for r in reasons)


# -- handlers ---------------------------------------------------------------------------------------


async def _api_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return error.response()


async def _validation_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError | pydantic.ValidationError)
    return from_validation_errors(error.errors()).response()


async def _user_error(_: Request, error: Exception) -> Response:
    # Domain errors carry a message meant for the user (a chat template's refusal, a sampling
    # parameter out of range): they are the request's fault. A refused request names its field.
    assert isinstance(error, SuperfluidError)
    param = error.param if isinstance(error, RequestRefused) else None
    return bad_request(error.message, param).response()


async def _http_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    kinds = {404: NOT_FOUND}
    kind = kinds.get(
        error.status_code, SERVER_ERROR if error.status_code >= 500 else INVALID_REQUEST
    )
    message = str(error.detail) if error.detail else "request refused"
    if error.status_code == 404:
        message = "no such route; this server serves /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics"
    elif error.status_code == 405:
        message = f"this route does not accept that method ({message})"
    headers = dict(error.headers) if error.headers else None
    return ApiError(error.status_code, message, type=kind, headers=headers).response()


async def _client_gone(_: Request, error: Exception) -> Response:
    # Nobody reads this; 499 is the status proxies log for "client closed the request".
    return Response(status_code=499)


async def _unexpected(_: Request, error: Exception) -> Response:
    # A real bug. Starlette re-raises it after this reply, so the server log gets the traceback;
    # the client gets none of it.
    body = error_body(
        "the server failed while handling this request; the server log has the details",
        type=SERVER_ERROR,
    )
    return JSONResponse(body, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(pydantic.ValidationError, _validation_error)
    app.add_exception_handler(SuperfluidError, _user_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientGone, _client_gone)
    app.add_exception_handler(ClientDisconnect, _client_gone)  # gone while sending the body
    app.add_exception_handler(Exception, _unexpected)

"""Bad HTTP input: schemathesis fuzzes every route against the app's own OpenAPI schema.

The app serves no /openapi.json, so the schema is taken from `app.openapi()` and the cases go
to a real uvicorn on loopback (tests/integration/http_harness.py) serving a fake model. Every
reply must be a non-5xx whose status, content type and body the schema documents; refusals are
OpenAI error bodies (`ErrorBody`). Bodies the schema allows (repaired where it cannot say what
the server wants, see `servable`) must be served.

The explicit cases after it cover what test_http_api.py does not already: a negative,
fractional or huge `max_tokens`, NaN and infinite numbers (the `NaN` literal and the string),
extreme values the schema allows (seed, top_k, token ids, penalties), more malformed JSON, a body
that is not UTF-8, and unknown models by path. Already there: wrong types and ranges per field
(`test_bad_input_is_a_400_in_openai_shape`), a body that is not a JSON object, an unknown model
(`test_an_unknown_model_is_a_404_…`), an oversize body declared or chunked
(`test_a_body_over_the_limit_is_a_413`) and a missing or wrong API key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from superfluid.application.service import GenerationService
from superfluid.entrypoints.http.app import create_app
from tests.fakes import FakeModel, FakeRuntime
from tests.integration.http_harness import (
    API_KEY,
    MAX_BODY_BYTES,
    BackgroundServer,
    RecordingMetrics,
    speculating_host,
)

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {API_KEY}"}
USER = [{"role": "user", "content": "the cat sat on the mat"}]
#: Per operation, for the fuzzing phase; six operations in all.
MAX_EXAMPLES = 40
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

#: Replies, by (operation, generation mode, status), so the run can say what it tried.
TALLY: Counter[tuple[str, str, int]] = Counter()


CONTEXT = 256


def fuzzed_app() -> tuple[GenerationService, FastAPI]:
    # A small window keeps every reply short, whatever `max_tokens` the fuzzer picks.
    runtime = FakeRuntime(FakeModel(order=1, eos=False), context_size=CONTEXT)
    service = GenerationService([speculating_host("fake-model", runtime)])
    app = create_app(
        service, metrics=RecordingMetrics(), api_key=API_KEY, max_body_bytes=MAX_BODY_BYTES
    )
    return service, app


# Built at import, as schemathesis needs the schema to parametrize the test; the service starts
# (and the server binds) only in the fixture below. (`schemathesis.pytest.from_fixture` would
# defer all of it, but its per-operation subtests do not run on pytest 9.2.)
SERVICE, APP = fuzzed_app()
schema = schemathesis.openapi.from_dict(
    APP.openapi(),
    config=SchemathesisConfig.from_dict(
        {
            "headers": AUTH,
            "seed": 20240601,
            "phases": {"examples": {"enabled": False}, "stateful": {"enabled": False}},
            "generation": {"max-examples": MAX_EXAMPLES},
        }
    ),
)


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    server = BackgroundServer(APP)
    SERVICE.start()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        SERVICE.stop()
        if TALLY:
            print(f"\nschemathesis sent {TALLY.total()} cases:")
            for (label, mode, status), count in sorted(TALLY.items()):
                print(f"  {label} {mode}: {status} x{count}")


@pytest.fixture(scope="module")
def http(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=20) as client:
        yield client


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)
def test_every_route_answers_what_its_schema_documents_and_never_a_5xx(
    case: Any, server: BackgroundServer
) -> None:
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    if positive and isinstance(case.body, dict):
        case.body = servable(case.body)
    reply = case.call_and_validate(base_url=server.url, checks=CHECKS, timeout=20)
    TALLY[case.operation.label, "positive" if positive else "negative", reply.status_code] += 1
    if positive and case.method == "POST":
        # A body the schema allows, repaired where the schema cannot say what the server
        # wants, is served; only a prompt too long for the window may still be refused.
        assert reply.status_code == 200 or "context window" in reply.text, reply.text


def test_the_fuzz_reached_the_model_often() -> None:
    served = sum(n for (label, _, status), n in TALLY.items() if "POST" in label and status == 200)
    if not TALLY:
        pytest.skip("the fuzz test did not run in this session")
    assert served >= 40, TALLY


def servable(body: dict[str, Any]) -> dict[str, Any]:
    """A body the schema allows, with what only the server's checks refuse taken out.

    The schema cannot say that integers are not written `1.0`, that `n` and `best_of` must be
    1, that `top_logprobs` needs `logprobs`, that `logit_bias` keys are token ids, that content
    parts are text, that a prompt is not empty, or which models are served; those refusals are
    test_http_api.py's, and negative cases still send them.
    """
    body = {key: value for key, value in body.items() if key not in _REFUSED_FIELDS}
    body["model"] = "fake-model"
    for key in _INTEGER_FIELDS:  # JSON Schema counts 1.0 as an integer; strict pydantic does not
        if isinstance(body.get(key), float):
            body[key] = int(body[key])
    if body.get("top_logprobs") is not None:
        body["logprobs"] = True
    if isinstance(body.get("response_format"), dict):
        body["response_format"] = {"type": "text"}
    if isinstance(body.get("logit_bias"), dict):
        body["logit_bias"] = {k: v for k, v in body["logit_bias"].items() if k.isdigit()}
    if isinstance(body.get("stop"), list):
        body["stop"] = body["stop"][:4]
    if "prompt" in body:
        prompt = body["prompt"]
        body["prompt"] = "hi " + (prompt if isinstance(prompt, str) else "".join(prompt[:1]))
    if "messages" in body:
        body["messages"] = [
            _servable_message(m) | {"content": _servable_content(m)} for m in body["messages"]
        ]
    if isinstance(body.get("tools"), list):
        # Names are unique, and a forced call needs a schema the grammar can enforce.
        unique = {t["function"]["name"]: t for t in body["tools"] if isinstance(t, dict)}
        body["tools"] = list(unique.values())
    if body.get("tool_choice") not in (None, "auto", "none") or not body.get("tools"):
        body.pop("tool_choice", None)
    return body


def _servable_content(message: dict[str, Any]) -> str:
    content = message.get("content")
    return "hi " + content if isinstance(content, str) else "hi"


def _servable_message(message: dict[str, Any]) -> dict[str, Any]:
    """A tool turn needs the id of an earlier call, and a call's arguments must be an object."""
    message = {k: v for k, v in message.items() if k not in ("tool_call_id", "tool_calls")}
    if message.get("role") == "tool":
        message["role"] = "user"
    return message


_REFUSED_FIELDS = ("n", "best_of", "echo", "suffix")
_INTEGER_FIELDS = (
    "max_tokens",
    "max_completion_tokens",
    "top_k",
    "seed",
    "top_logprobs",
    "logprobs",
)


def test_the_schema_documents_request_bodies_and_openai_error_replies() -> None:
    document = APP.openapi()
    chat = document["paths"]["/v1/chat/completions"]["post"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    assert "messages" in body["required"] and "$ref" not in str(body)
    assert set(chat["responses"]) >= {"200", "400", "401", "404", "413"}
    error = document["components"]["schemas"]["ErrorDetail"]
    assert set(error["properties"]) == {"message", "type", "param", "code"}


# -- explicit cases (the rest are in test_http_api.py) ---------------------------------------------


def refusal(answer: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in answer.text
    return error


def post_raw(http: httpx.Client, route: str, raw: str) -> httpx.Response:
    return http.post(route, content=raw.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("limit", [-1, -(2**63), 1.5, True, "7"])
def test_a_negative_fractional_or_boolean_max_tokens_is_a_400(
    http: httpx.Client, limit: object
) -> None:
    body = {"model": "fake-model", "messages": USER, "max_tokens": limit}
    assert refusal(http.post("/v1/chat/completions", json=body))["param"] == "max_tokens"
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": limit}
    assert refusal(http.post("/v1/completions", json=body))["param"] == "max_tokens"


@pytest.mark.parametrize("limit", [10**6, 2**63, 10**40])
def test_a_huge_max_tokens_ends_the_reply_at_the_context_window(
    http: httpx.Client, limit: int
) -> None:
    body = {"model": "fake-model", "prompt": "the cat", "max_tokens": limit, "temperature": 0}
    answer = http.post("/v1/completions", json=body)
    assert answer.status_code == 200, answer.text
    reply = answer.json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["total_tokens"] == CONTEXT


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", '"nan"', '"inf"', "1e999"])
@pytest.mark.parametrize("field", ["temperature", "top_p", "presence_penalty", "repeat_penalty"])
def test_a_nan_or_infinite_number_is_a_400_naming_its_field(
    http: httpx.Client, field: str, literal: str
) -> None:
    raw = f'{{"model": "fake-model", "prompt": "hi", "max_tokens": 2, "{field}": {literal}}}'
    error = refusal(post_raw(http, "/v1/completions", raw))
    assert error["type"] == "invalid_request_error" and error["param"] == field


def test_a_nan_logit_bias_is_a_400(http: httpx.Client) -> None:
    raw = '{"model": "fake-model", "prompt": "hi", "max_tokens": 2, "logit_bias": {"5": NaN}}'
    assert refusal(post_raw(http, "/v1/completions", raw))["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "changes",
    [
        {"seed": 2**64},
        {"seed": -(2**70)},
        {"top_k": 10**30},
        {"logit_bias": {str(10**30): 5}},
        {"logit_bias": {"99999999": -100}},
        {"top_p": 1e-300},
        {"repeat_penalty": 1e300},
        {"repeat_penalty": 5e-324},  # found by the fuzz: 0 in float32, so logits / 0 = inf
        {"repeat_penalty": 1e-300, "presence_penalty": -2, "frequency_penalty": -2},
    ],
)
def test_extreme_numbers_the_schema_allows_are_served_or_refused_never_a_500(
    http: httpx.Client, changes: dict[str, Any]
) -> None:
    body = {"model": "fake-model", "prompt": "the cat sat on the mat", "max_tokens": 16, **changes}
    answer = http.post("/v1/completions", json={**body, "temperature": 1})
    assert answer.status_code in (200, 400), answer.text
    if answer.status_code == 400:
        refusal(answer)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"prompt": "hi", "max_tokens": 2,}', "JSON"),  # a trailing comma
        ('{"prompt": "hi" "max_tokens": 2}', "JSON"),
        ('{"prompt": "\\ud800"}', ""),  # a lone surrogate escaped
        ('{"prompt": "hi", "prompt": 7}', "prompt"),  # a duplicate key: the last one counts
        ("null", ""),
        ('"a string"', ""),
        ("7", ""),
    ],
)
def test_malformed_json_is_a_400_not_a_crash(http: httpx.Client, raw: str, why: str) -> None:
    error = refusal(post_raw(http, "/v1/completions", raw))
    assert why in error["message"] or why in (error["param"] or "")


def test_a_body_that_is_not_utf8_is_a_400(http: httpx.Client) -> None:
    answer = http.post(
        "/v1/completions",
        content=b'{"prompt": "\xff\xfe"}',
        headers={"Content-Type": "application/json"},
    )
    refusal(answer)


def test_an_unknown_model_by_path_is_a_404_in_openai_shape(http: httpx.Client) -> None:
    for name in ("gpt-5", "fake-model/extra", "..%2F..%2Fetc%2Fpasswd", "%00", "%F0%9F%90%88"):
        error = refusal(http.get(f"/v1/models/{name}"), 404)
        assert error["type"] == "not_found_error" and error["param"] == "model"
    assert http.get("/v1/models/fake-model.gguf").json()["id"] == "fake-model"

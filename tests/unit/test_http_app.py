"""The HTTP layer's own rules, without a server: model names, sampling, errors, plain lanes."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pydantic
import pytest
from fastapi.testclient import TestClient

from superfluid.application.executor import Executor
from superfluid.application.registration import Registration
from superfluid.application.request_defaults import RequestDefaults, RequestRefused
from superfluid.application.service import GenerationService, ModelHost
from superfluid.application.tool_calling import FunctionTool, ToolChoice, ToolPlan
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.strategies import Strategy
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.entrypoints.http.app import _read_calls, create_app
from superfluid.entrypoints.http.errors import ApiError, from_validation_errors
from superfluid.entrypoints.http.intake import asked, find_host, template_tools, tools_asked
from superfluid.entrypoints.http.schemas import ChatCompletionBody, CompletionBody
from superfluid.entrypoints.http.streaming import StreamedCalls
from tests.fakes import FakeModel, FakeRuntime


def host(name: str, *, speculates: bool = False, runtime: FakeRuntime | None = None) -> ModelHost:
    runtime = runtime or FakeRuntime(FakeModel(eos=False))
    drafter = PromptLookupDrafter() if speculates else None
    executor = Executor(runtime, max_lanes=2, clock=time.perf_counter, drafter=drafter)
    registration = Registration(Strategy.PROMPT_LOOKUP if drafter else None, drafter, ())
    return ModelHost(name, runtime, registration, None, executor)


def chat_body(**fields: object) -> ChatCompletionBody:
    return ChatCompletionBody.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], **fields}
    )


# -- naming a model -------------------------------------------------------------------------------


def test_a_model_is_found_by_its_name_or_by_its_file_name_with_or_without_the_suffix() -> None:
    service = GenerationService([host("Qwen3-4B-Q4"), host("gemma.gguf")])
    assert find_host(service, None).name == "Qwen3-4B-Q4"
    assert find_host(service, "").name == "Qwen3-4B-Q4"
    assert find_host(service, "Qwen3-4B-Q4.gguf").name == "Qwen3-4B-Q4"
    assert find_host(service, "gemma").name == "gemma.gguf"
    assert find_host(service, "gemma.gguf").name == "gemma.gguf"


def test_a_name_no_model_answers_to_is_a_404_even_with_one_model_served() -> None:
    service = GenerationService([host("only")])
    with pytest.raises(ApiError) as caught:
        find_host(service, "gpt-4o")
    assert caught.value.status == 404 and caught.value.param == "model"
    with pytest.raises(ApiError):
        find_host(service, "ONLY")  # names are case-sensitive, as files are on most systems


# -- what a body asks ----------------------------------------------------------------------------


def test_a_bodys_sampling_fields_reach_the_use_case() -> None:
    body = chat_body(temperature=0.3, top_k=5, seed=7, logit_bias={"9": 1, "2": -3.5})
    params = RequestDefaults().sampling(asked(body).sampling, host("m"))
    assert (params.temperature, params.top_k, params.seed) == (0.3, 5, 7)
    assert params.logit_bias == ((2, -3.5), (9, 1.0))


def test_grammar_bias_and_logprob_lanes_decode_plainly() -> None:
    model = host("m", speculates=True)

    def drafts(body: ChatCompletionBody | CompletionBody) -> bool:
        return RequestDefaults().work(asked(body), model, [1, 2, 3]).request.may_draft

    assert drafts(chat_body())
    assert drafts(chat_body(logit_bias={}, response_format={"type": "text"}))
    assert not drafts(chat_body(logprobs=True))
    assert not drafts(chat_body(response_format={"type": "json_object"}))
    assert not drafts(chat_body(logit_bias={"3": -100.0}))
    assert not drafts(CompletionBody.model_validate({"prompt": "x", "logprobs": 0}))
    forced = {"type": "function", "function": {"name": "done"}}
    tools = chat_body(tools=[TOOL], tool_choice=forced)
    plan = RequestDefaults().tool_plan(tools_asked(tools), model)
    assert not RequestDefaults().work(asked(tools), model, [1], plan).request.may_draft


# -- validation messages --------------------------------------------------------------------------


def validation_error(body: dict[str, object]) -> ApiError:
    with pytest.raises(pydantic.ValidationError) as caught:
        ChatCompletionBody.model_validate(body)
    return from_validation_errors(caught.value.errors())


def test_a_union_refusal_names_the_field_not_pydantics_type_tags() -> None:
    error = validation_error({"messages": [{"role": "user", "content": "x"}], "stop": 3})
    assert error.param == "stop"
    # ("array" when the body came as JSON; "list" here, validated from Python objects)
    assert error.message == "`stop`: input should be a valid string or a valid list"


def test_a_nested_refusal_points_at_the_deepest_field() -> None:
    error = validation_error({"messages": [{"role": "user", "content": [{"text": "x"}]}]})
    assert error.param == "messages[0].content[0].type"


# -- the app around a service ---------------------------------------------------------------------


class BrokenTemplateRuntime(FakeRuntime):
    def chat_prompt(self, messages: Sequence[Any], tools: Sequence[Any] | None = None) -> str:
        raise KeyError("a bug, not the client's fault")


class NoToolsRuntime(FakeRuntime):
    tool_family = None


@pytest.fixture
def app_client() -> Iterator[TestClient]:
    service = GenerationService(
        [
            host("m"),
            host("broken", runtime=BrokenTemplateRuntime()),
            host("no-tools", runtime=NoToolsRuntime(FakeModel(eos=False))),
        ]
    )
    service.start()
    try:
        with TestClient(create_app(service, metrics=None), raise_server_exceptions=False) as c:
            yield c
    finally:
        service.stop()


def test_without_metrics_the_metrics_page_is_a_plain_404(app_client: TestClient) -> None:
    page = app_client.get("/metrics")
    assert page.status_code == 404 and page.text.startswith("metrics are not enabled")


def test_a_bug_is_a_500_with_an_openai_body_and_no_traceback(app_client: TestClient) -> None:
    messages = [{"role": "user", "content": "hi"}]
    answer = app_client.post("/v1/chat/completions", json={"model": "broken", "messages": messages})
    assert answer.status_code == 500
    assert answer.json()["error"]["type"] == "server_error"
    assert "KeyError" not in answer.text and "Traceback" not in answer.text


TOOL = {"type": "function", "function": {"name": "done", "parameters": {"type": "object"}}}


def test_a_template_that_cannot_take_tools_is_a_400_unless_a_call_is_forced(
    app_client: TestClient,
) -> None:
    body = {"model": "no-tools", "messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}
    refused = app_client.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools"
    assert "cannot take tools" in refused.json()["error"]["message"]
    # A forced call needs no template's help: the grammar writes it.
    forced = {**body, "tool_choice": {"type": "function", "function": {"name": "done"}}}
    answer = app_client.post("/v1/chat/completions", json={**forced, "max_tokens": 8})
    assert answer.status_code == 200, answer.text
    (call,) = answer.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "done", "arguments": "{}"}


def test_without_an_api_key_configured_v1_needs_no_key(app_client: TestClient) -> None:
    answer = app_client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 3})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3


# -- tool calls in replies ------------------------------------------------------------------------


def auto_plan() -> ToolPlan:
    return ToolPlan(ToolChoice.AUTO, (FunctionTool("f", None),), ToolFamily.HERMES)


MALFORMED = 'Sure. <tool_call>{"name": "f", "arguments": {"x": 1</tool_call> more'


def test_a_malformed_call_in_a_whole_reply_is_returned_as_text_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text, calls, finish = _read_calls(auto_plan(), MALFORMED, "stop")
    assert (text, calls, finish) == (MALFORMED, (), "stop")
    assert any("hermes tool call not parsed" in r.getMessage() for r in caplog.records)


def test_a_call_that_breaks_before_its_name_reaches_a_stream_as_text() -> None:
    text = 'Sure. <tool_call>{"arguments": {"x": 1</tool_call> more'
    streamed = StreamedCalls(auto_plan())
    said = [s for at in range(0, len(text), 7) for s in streamed.push(text[at : at + 7])]
    said += streamed.finish("stop")
    assert all(isinstance(s, str) for s in said) and "".join(map(str, said)) == text
    assert not streamed.called


def test_a_streamed_call_leaves_as_deltas_in_order_with_the_text_before_it() -> None:
    streamed = StreamedCalls(auto_plan())
    first = streamed.push('Sure. <tool_call>{"name": "f", ')
    assert first[0] == "Sure." and len(first) == 2 and streamed.called
    (opening,) = first[1]
    assert opening["index"] == 0 and opening["function"] == {"name": "f", "arguments": ""}
    assert opening["type"] == "function" and opening["id"].startswith("call_")
    assert streamed.push('"arguments": {"x": 1}}</tool_call>') == [
        [{"index": 0, "function": {"arguments": '{"x": 1}'}}]
    ]
    assert streamed.finish("stop") == []


def test_a_parser_flag_does_not_make_a_template_take_tools() -> None:
    runtime = NoToolsRuntime(FakeModel(eos=False))
    model = host("no-tools", runtime=runtime)
    model.tool_parser = ToolFamily.HERMES
    body = chat_body(tools=[TOOL])
    with pytest.raises(RequestRefused) as refused:
        RequestDefaults().tool_plan(tools_asked(body), model)
    assert refused.value.param == "tools"
    forced = chat_body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "done"}})
    plan = RequestDefaults().tool_plan(tools_asked(forced), model)
    assert plan is not None and template_tools(forced, plan) is None

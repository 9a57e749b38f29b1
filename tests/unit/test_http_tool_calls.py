"""Tool calls through the HTTP app, with a fake model that writes what it is told to.

The scripted model writes, greedily, the text of the last user turn, then ends: each test says
what the model replies and looks at what a client receives, streamed and whole, with prompt
lookup drafting (it copies the script from the prompt, so drafts are accepted) and without.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from superfluid.application.executor import Executor
from superfluid.application.registration import Registration
from superfluid.application.service import GenerationService, ModelHost
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.strategies import Strategy
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.entrypoints.http.app import create_app
from tests.fakes import EOS, FakeRuntime

VOCAB = 128
USER, ASSISTANT = "<user>", "<assistant>"


class ScriptedModel:
    """Writes the last user turn's text, one character a token, then ends."""

    vocab = VOCAB

    def logits(self, context: Sequence[int]) -> np.ndarray:
        text = "".join(map(chr, context))
        script_at = text.rfind(USER) + len(USER)
        reply_at = text.find(ASSISTANT, script_at)
        row = np.zeros(VOCAB, dtype=np.float32)
        if reply_at < 0:  # inside the prompt: nothing is sampled from this row
            return row
        script = text[script_at:reply_at]
        written = len(text) - reply_at - len(ASSISTANT)
        row[ord(script[written]) if written < len(script) else EOS] = 30.0
        return row


class ScriptedRuntime(FakeRuntime):
    def __init__(self) -> None:
        super().__init__(ScriptedModel(), context_size=4096, max_verify_rows=16)  # type: ignore[arg-type]

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        return [min(ord(ch), VOCAB - 1) or 1 for ch in text]

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return bytes(token for token in tokens if token != EOS)


def scripted_host(name: str, family: ToolFamily, *, speculates: bool) -> ModelHost:
    runtime = ScriptedRuntime()
    drafter = PromptLookupDrafter() if speculates else None
    executor = Executor(runtime, max_lanes=2, clock=time.perf_counter, drafter=drafter)
    registration = Registration(Strategy.PROMPT_LOOKUP if drafter else None, drafter, ())
    host = ModelHost(name, runtime, registration, None, executor)
    host.tool_parser = family
    return host


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    hosts = [
        scripted_host(f"{family.value}-{'spec' if speculates else 'plain'}", family, speculates=s)
        for family in ToolFamily
        for speculates, s in ((True, True), (False, False))
    ]
    service = GenerationService(hosts)
    service.start()
    try:
        with TestClient(create_app(service, metrics=None), raise_server_exceptions=False) as c:
            yield c
    finally:
        service.stop()


TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("read_file", "grep", "noop")
]


def body(model: str, script: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": script}],
        "tools": TOOLS,
        "temperature": 0,
        "max_tokens": 400,
        **fields,
    }


def whole(client: TestClient, model: str, script: str, **fields: Any) -> dict[str, Any]:
    answer = client.post("/v1/chat/completions", json=body(model, script, **fields))
    assert answer.status_code == 200, answer.text
    reply: dict[str, Any] = answer.json()
    return reply


def chunks(client: TestClient, model: str, script: str, **fields: Any) -> list[dict[str, Any]]:
    fields = {"stream": True, "stream_options": {"include_usage": True}, **fields}
    answer = client.post("/v1/chat/completions", json=body(model, script, **fields))
    assert answer.status_code == 200, answer.text
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


def accumulated(stream: list[dict[str, Any]]) -> Any:
    """The reply as the official client puts a stream together."""
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in stream:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    return state.current_completion_snapshot


def deltas_of(stream: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Each tool-call delta, with the number of the chunk it came in."""
    return [
        (at, delta)
        for at, chunk in enumerate(stream)
        if chunk["choices"]
        for delta in chunk["choices"][0]["delta"].get("tool_calls", [])
    ]


def calls_in(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]


def streamed_calls(completion: Any) -> list[tuple[str, Any]]:
    made = completion.choices[0].message.tool_calls or []
    return [(c.function.name, json.loads(c.function.arguments)) for c in made]


def finish_of(stream: list[dict[str, Any]]) -> str:
    (finish,) = [c["choices"][0]["finish_reason"] for c in stream if c["choices"]][-1:]
    return str(finish)


SCRIPTS = {
    ToolFamily.HERMES: (
        'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "src/app.py",'
        ' "lines": [1, 20]}}\n</tool_call>\n<tool_call>\n{"arguments": {"pattern": "TODO"},'
        ' "name": "grep"}\n</tool_call>'
    ),
    ToolFamily.LLAMA3: (
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "src/app.py", "lines":'
        ' [1, 20]}}; {"name": "grep", "parameters": {"pattern": "TODO"}}'
    ),
    ToolFamily.MISTRAL: (
        'Checking.[TOOL_CALLS]read_file[ARGS]{"path": "src/app.py", "lines": [1, 20]}'
        '[TOOL_CALLS]grep[ARGS]{"pattern": "TODO"}'
    ),
    ToolFamily.PYTHONIC: (
        "I will look.\n```tool_code\n[read_file(path='src/app.py', lines=[1, 20]),"
        " grep(pattern='TODO')]\n```"
    ),
}
BOTH = [("read_file", {"path": "src/app.py", "lines": [1, 20]}), ("grep", {"pattern": "TODO"})]


@pytest.mark.parametrize("family", list(ToolFamily), ids=lambda f: f.value)
def test_an_auto_call_streams_its_name_then_its_arguments_as_they_are_written(
    client: TestClient, family: ToolFamily
) -> None:
    stream = chunks(client, f"{family.value}-plain", SCRIPTS[family])
    deltas = deltas_of(stream)
    opening = deltas[0][1]
    assert opening["index"] == 0 and opening["type"] == "function"
    assert opening["id"].startswith("call_") and opening["function"]["name"] == "read_file"
    # The name left in a chunk of its own, before any of the arguments were written; then the
    # arguments as the model wrote them (pythonic ones leave whole when the call's `)` closes).
    arguments_at = [at for at, d in deltas if d["index"] == 0 and d["function"]["arguments"]]
    assert deltas[0][0] < arguments_at[0]
    if family is not ToolFamily.PYTHONIC:
        assert len(arguments_at) > 1
    second = [d for _, d in deltas if d["index"] == 1]
    assert second[0]["function"]["name"] == "grep" and second[0]["id"] != opening["id"]
    # Content before the calls went out before them.
    content_at = [
        at
        for at, chunk in enumerate(stream)
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content")
    ]
    assert all(at < deltas[0][0] for at in content_at)
    assert finish_of(stream) == "tool_calls"
    completion = accumulated(stream)
    assert streamed_calls(completion) == BOTH


@pytest.mark.parametrize("family", list(ToolFamily), ids=lambda f: f.value)
@pytest.mark.parametrize("speculates", [False, True], ids=["plain", "spec"])
def test_streamed_calls_are_the_whole_replys_calls(
    client: TestClient, family: ToolFamily, speculates: bool
) -> None:
    model = f"{family.value}-{'spec' if speculates else 'plain'}"
    reply = whole(client, model, SCRIPTS[family])
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and calls_in(choice["message"]) == BOTH
    stream = chunks(client, model, SCRIPTS[family])
    assert streamed_calls(accumulated(stream)) == BOTH
    streamed_content = accumulated(stream).choices[0].message.content
    assert (streamed_content or "").split() == (choice["message"]["content"] or "").split()
    if speculates:
        assert reply["superfluid"]["spec"]["accepted"] > 0


@pytest.mark.parametrize("family", list(ToolFamily), ids=lambda f: f.value)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_parallel_tool_calls_false_ends_the_reply_when_its_first_call_closes(
    client: TestClient, family: ToolFamily, stream: bool
) -> None:
    replies = []
    for speculates in (False, True):
        model = f"{family.value}-{'spec' if speculates else 'plain'}"
        if stream:
            got = chunks(client, model, SCRIPTS[family], parallel_tool_calls=False)
            completion = accumulated(got)
            made, finish = streamed_calls(completion), finish_of(got)
            content, used = completion.choices[0].message.content, got[-1]["usage"]
        else:
            reply = whole(client, model, SCRIPTS[family], parallel_tool_calls=False)
            made, finish = (
                calls_in(reply["choices"][0]["message"]),
                reply["choices"][0]["finish_reason"],
            )
            content, used = reply["choices"][0]["message"]["content"], reply["usage"]
        assert made == BOTH[:1] and finish == "tool_calls"
        replies.append((made, content))
        if not speculates:  # one token a character: the second call's arguments never came
            assert used["completion_tokens"] < SCRIPTS[family].index("TODO")
    assert replies[0] == replies[1]  # the same with and without speculation


def test_parallel_tool_calls_false_leaves_a_reply_without_calls_alone(client: TestClient) -> None:
    reply = whole(client, "hermes-plain", "No call { here }.", parallel_tool_calls=False)
    choice = reply["choices"][0]
    assert choice["message"]["content"] == "No call { here }." and choice["finish_reason"] == "stop"


def test_a_reply_cut_by_max_tokens_inside_a_call_says_length(client: TestClient) -> None:
    script = SCRIPTS[ToolFamily.HERMES]
    cut_at = script.index('"src/') + 5
    stream = chunks(client, "hermes-plain", script, max_tokens=cut_at)
    assert finish_of(stream) == "length"
    completion = accumulated(stream)
    (call,) = completion.choices[0].message.tool_calls
    assert call.function.name == "read_file" and call.function.arguments == '{"path": "src/'
    reply = whole(client, "hermes-plain", script, max_tokens=cut_at)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == script[:cut_at]  # the cut call is text


def test_a_reply_cut_by_max_tokens_after_its_calls_closed_says_tool_calls(
    client: TestClient,
) -> None:
    script = '<tool_call>{"name": "noop", "arguments": {}}</tool_call> and then some more text'
    cut_at = len(script) - 8
    stream = chunks(client, "hermes-plain", script, max_tokens=cut_at)
    assert finish_of(stream) == "tool_calls"
    assert streamed_calls(accumulated(stream)) == [("noop", {})]
    reply = whole(client, "hermes-plain", script, max_tokens=cut_at)
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert calls_in(reply["choices"][0]["message"]) == [("noop", {})]


def test_a_call_that_breaks_after_its_name_left_stands_and_the_rest_is_content(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    script = 'Sure. <tool_call>{"name": "grep", "arguments": {"pattern": 1</tool_call> more'
    stream = chunks(client, "hermes-plain", script)
    completion = accumulated(stream)
    (call,) = completion.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("grep", '{"pattern": 1')
    assert completion.choices[0].message.content == "Sure. </tool_call> more"
    assert any("'grep' broke off" in r.getMessage() for r in caplog.records)
    # A whole reply sees it all, and returns it as text.
    reply = whole(client, "hermes-plain", script)
    assert reply["choices"][0]["message"]["content"] == script
    assert reply["choices"][0]["finish_reason"] == "stop"

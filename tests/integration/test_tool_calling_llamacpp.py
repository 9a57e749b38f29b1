"""Tool calling on the real demo model, as an agent would use it: the official `openai` client.

The demo GGUF carries no chat template; a copy gets a tool-capable one (Hermes-style
`<tool_call>` blocks in Gemma's turns) written into `tokenizer.chat_template`, so the server
reads its call format off the template. The base model is steered to calls by the conversation
itself: earlier turns in which the assistant called `read_file` (greedy decoding copies the
pattern, and prompt-lookup drafts the copy). Forced calls (`tool_choice` naming a function, or
`required`) need no steering: the grammar writes them.

Two servers, one speculating and one not: greedy tool-calling replies must be the same.
Streamed `auto` calls leave as the model writes them (their names before the reply ends), and
with `parallel_tool_calls` false the reply ends where its first call closes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from bench.agent_workload import GEMMA_HERMES

from tests.integration.conftest import model_cache
from tests.integration.gguf_edit import with_metadata
from tests.integration.serving import Server, calls_of, started

pytestmark = pytest.mark.slow

FILE = "gemma-tools.gguf"

READ_PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
GREP_PARAMETERS = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string"},
        "max_hits": {"type": "integer"},
        "mode": {"enum": ["plain", "regex"]},
    },
    "required": ["pattern", "max_hits"],
}
READ = {
    "type": "function",
    "function": {"name": "read_file", "description": "Read a file.", "parameters": READ_PARAMETERS},
}
GREP = {
    "type": "function",
    "function": {"name": "grep", "description": "Search the code.", "parameters": GREP_PARAMETERS},
}
SCHEMAS = {"read_file": READ_PARAMETERS, "grep": GREP_PARAMETERS}


def called(number: int, *paths: str) -> list[dict[str, Any]]:
    """An assistant turn that read `paths`, and the tool turns that answered it."""
    calls = [
        {
            "id": f"call_{number}_{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
        }
        for i, path in enumerate(paths)
    ]
    answers = [
        {"role": "tool", "tool_call_id": call["id"], "content": f"(the contents of {path})"}
        for call, path in zip(calls, paths, strict=True)
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *answers]


def shots(*groups: tuple[str, ...]) -> list[dict[str, Any]]:
    """Earlier turns: the user asks for files, the assistant reads them, then says so."""
    turns: list[dict[str, Any]] = []
    for number, paths in enumerate(groups):
        asked = " and ".join(paths)
        turns += [
            {"role": "user", "content": f"Show me {asked}."},
            *called(number, *paths),
            {"role": "assistant", "content": f"Here is {asked}."},
        ]
    return turns


ONE = [
    *shots(("setup.py",), ("README.md",), ("src/app.py",), ("Makefile",)),
    {"role": "user", "content": "Show me docs/index.md."},
]
TWO = [
    *shots(("setup.py", "README.md"), ("src/app.py", "src/db.py"), ("Makefile", "LICENSE")),
    {"role": "user", "content": "Show me docs/index.md and docs/api.md."},
]


@pytest.fixture(scope="module")
def model(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("gguf") / FILE
    return with_metadata(demo_gguf, target, {"tokenizer.chat_template": GEMMA_HERMES})


def serve(model: Path, speculate: str) -> Iterator[Server]:
    env = {**os.environ, "SUPERFLUID_HOME": str(model_cache())}
    args = [str(model), "--speculate", speculate, "--max-lanes", "2", "--ctx-size", "2048"]
    with started(args, env) as running:
        yield running


@pytest.fixture(scope="module")
def auto(model: Path) -> Iterator[Server]:
    yield from serve(model, "auto")


@pytest.fixture(scope="module")
def plain(model: Path) -> Iterator[Server]:
    yield from serve(model, "off")


def ask(server: Server, messages: list[dict[str, Any]], **options: Any) -> Any:
    return server.client().chat.completions.create(
        model=FILE,
        messages=messages,  # type: ignore[arg-type]
        temperature=0,
        **{"tools": [READ, GREP], "max_tokens": 80, **options},
    )


def streamed(server: Server, messages: list[dict[str, Any]], **options: Any) -> Any:
    with server.client().chat.completions.stream(
        model=FILE,
        messages=messages,  # type: ignore[arg-type]
        temperature=0,
        stream_options={"include_usage": True},
        **{"tools": [READ, GREP], "max_tokens": 80, **options},
    ) as stream:
        return stream.get_final_completion()


def chunks(server: Server, messages: list[dict[str, Any]], **options: Any) -> list[Any]:
    """A streamed reply's chunks, as the client receives them."""
    return list(
        server.client().chat.completions.create(
            model=FILE,
            messages=messages,  # type: ignore[arg-type]
            temperature=0,
            stream=True,
            **{"tools": [READ, GREP], "max_tokens": 80, **options},
        )
    )


def test_the_model_calls_a_tool_and_the_client_reads_it(auto: Server) -> None:
    reply = ask(auto, ONE)
    assert reply.choices[0].finish_reason == "tool_calls"
    assert calls_of(reply) == [("read_file", {"path": "docs/index.md"})]
    (call,) = reply.choices[0].message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    # The call copies its context, so prompt-lookup drafted it.
    assert reply.model_extra["superfluid"]["spec"]["accepted"] > 0


def test_a_streamed_call_is_the_same_call(auto: Server) -> None:
    final = streamed(auto, ONE)
    assert final.choices[0].finish_reason == "tool_calls"
    assert calls_of(final) == calls_of(ask(auto, ONE))


def test_the_model_makes_two_calls_in_one_turn(auto: Server) -> None:
    reply = ask(auto, TWO)
    made = calls_of(reply)
    assert len(made) >= 2 and all(name == "read_file" for name, _ in made)
    assert {args["path"] for _, args in made} <= {"docs/index.md", "docs/api.md"}
    assert calls_of(streamed(auto, TWO)) == made


def test_a_call_then_its_result_then_the_answer(auto: Server) -> None:
    first = ask(auto, ONE)
    (call,) = first.choices[0].message.tool_calls
    messages = [
        *ONE,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        # The result in the earlier turns' words, so the base model answers as they did.
        {"role": "tool", "tool_call_id": call.id, "content": "(the contents of docs/index.md)"},
    ]
    answer = ask(auto, messages, max_tokens=12)
    assert answer.choices[0].message.content.startswith("Here is ")
    assert not answer.choices[0].message.tool_calls


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_named_tool_choice_yields_that_call_with_valid_arguments(
    auto: Server, stream: bool
) -> None:
    messages = [{"role": "user", "content": "Find the TODO comments in the code."}]
    choice = {"type": "function", "function": {"name": "grep"}}
    reply = (streamed if stream else ask)(auto, messages, tool_choice=choice)
    assert reply.choices[0].finish_reason == "tool_calls"
    ((name, arguments),) = calls_of(reply)
    assert name == "grep"
    assert jsonschema_rs.validator_for(GREP_PARAMETERS).is_valid(arguments), arguments


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_required_tool_choice_yields_a_call_with_valid_arguments(
    auto: Server, stream: bool
) -> None:
    messages = [{"role": "user", "content": "Find the TODO comments in the code."}]
    reply = (streamed if stream else ask)(
        auto, messages, tool_choice="required", parallel_tool_calls=False, max_tokens=120
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    ((name, arguments),) = calls_of(reply)
    assert jsonschema_rs.validator_for(SCHEMAS[name]).is_valid(arguments), arguments


@pytest.mark.parametrize("conversation", [ONE, TWO], ids=["one call", "two calls"])
def test_greedy_tool_calls_are_the_same_with_and_without_speculation(
    auto: Server, plain: Server, conversation: list[dict[str, Any]]
) -> None:
    spec, off = ask(auto, conversation), ask(plain, conversation)
    assert calls_of(spec) == calls_of(off)
    assert spec.choices[0].message.content == off.choices[0].message.content
    assert spec.usage.completion_tokens == off.usage.completion_tokens


def test_an_auto_call_streams_its_name_before_the_reply_ends(plain: Server) -> None:
    # The plain server commits a token at a time, so each chunk is one step of the model's.
    stream = chunks(plain, ONE)
    deltas = [
        (at, delta)
        for at, chunk in enumerate(stream)
        if chunk.choices
        for delta in chunk.choices[0].delta.tool_calls or []
    ]
    opened_at, opening = deltas[0]
    assert (opening.index, opening.type, opening.function.name) == (0, "function", "read_file")
    assert opening.id.startswith("call_")
    finished_at = next(at for at, chunk in enumerate(stream) if chunk.choices[0].finish_reason)
    # The arguments came in later chunks, as the model wrote them, and the reply went on after.
    arguments_at = [at for at, delta in deltas if delta.function and delta.function.arguments]
    assert opened_at < arguments_at[0] < finished_at
    assert stream[finished_at].choices[0].finish_reason == "tool_calls"
    fragments = "".join(delta.function.arguments or "" for _, delta in deltas if delta.index == 0)
    assert [("read_file", json.loads(fragments))] == calls_of(ask(plain, ONE))


@pytest.mark.parametrize("conversation", [ONE, TWO], ids=["one call", "two calls"])
def test_streamed_auto_calls_join_to_the_whole_replys_calls(
    auto: Server, conversation: list[dict[str, Any]]
) -> None:
    stream = chunks(auto, conversation)
    joined: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    for chunk in stream:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if delta.function and delta.function.name:
                names[delta.index] = delta.function.name
            joined.setdefault(delta.index, []).append(
                (delta.function.arguments or "") if delta.function else ""
            )
    made = [(names[i], json.loads("".join(joined[i]))) for i in sorted(names)]
    assert made == calls_of(ask(auto, conversation))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_parallel_tool_calls_false_under_auto_returns_one_call(
    auto: Server, plain: Server, stream: bool
) -> None:
    both = ask(plain, TWO)
    assert len(calls_of(both)) >= 2  # the model makes two calls when it may
    replies = [
        (streamed if stream else ask)(server, TWO, parallel_tool_calls=False)
        for server in (auto, plain)
    ]
    for reply in replies:
        assert reply.choices[0].finish_reason == "tool_calls"
        assert calls_of(reply) == calls_of(both)[:1]
    # Generation ended when the first call closed, the same with speculation as without.
    assert replies[1].usage.completion_tokens < both.usage.completion_tokens
    assert replies[0].choices[0].message.content == replies[1].choices[0].message.content

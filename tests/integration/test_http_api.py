"""The OpenAI-compatible API end to end: a real uvicorn server, the official `openai` client.

The server (tests/integration/http_harness.py) serves fake models that speculate with
prompt-lookup, so drafts are proposed, accepted, and must reach the client as promised:
one chunk per accepted draft, cumulative usage, `superfluid.spec` on replies.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.integration.http_harness import API_KEY, MAX_BODY_BYTES, ServedModels, wait_for_idle

REPETITIVE = "the cat sat on the mat, " * 6
USER = [{"role": "user", "content": REPETITIVE}]
EVERY_USAGE = {"include_usage": True, "continuous_usage_stats": True}

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def served() -> Iterator[ServedModels]:
    with ServedModels() as models:
        yield models


@pytest.fixture(scope="module")
def client(served: ServedModels) -> openai.OpenAI:
    # No retries: a 5xx must surface as the error it is, not be retried into a success.
    return openai.OpenAI(
        base_url=f"{served.server.url}/v1", api_key=API_KEY, max_retries=0, timeout=20
    )


@pytest.fixture(scope="module")
def http(served: ServedModels) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=served.server.url, headers=headers, timeout=20) as raw:
        yield raw


def chat(client: openai.OpenAI, **options: Any) -> Any:
    return client.chat.completions.create(
        **{"model": "fake-model", "messages": USER, "temperature": 0, **options}
    )


def streamed_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# -- replies and their shapes ---------------------------------------------------------------------


def test_a_chat_reply_has_the_openai_shape_and_reports_speculation(client: openai.OpenAI) -> None:
    reply = chat(client, max_tokens=64)
    assert reply.id.startswith("chatcmpl-") and reply.object == "chat.completion"
    assert reply.model == "fake-model"
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and len(choice.message.content) == 64
    assert choice.finish_reason == "length"
    assert reply.usage.completion_tokens == 64
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 64
    spec = reply.model_extra["superfluid"]["spec"]
    assert spec["proposed"] > 0 and 0 < spec["accepted"] <= spec["proposed"]
    assert spec["acceptance_rate"] == pytest.approx(spec["accepted"] / spec["proposed"])


def test_a_stream_carries_each_accepted_draft_as_one_multi_token_chunk(
    client: openai.OpenAI,
) -> None:
    chunks = list(chat(client, max_tokens=64, stream=True, stream_options=EVERY_USAGE))
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert content[0].choices[0].delta.role == "assistant"
    counts = [c.usage.completion_tokens for c in content]
    assert all(a < b for a, b in itertools.pairwise(counts)), counts
    assert all(
        c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens for c in content
    )
    assert max(b - a for a, b in itertools.pairwise([0, *counts])) >= 2, counts
    closing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(closing) == 1 and closing[0].choices[0].finish_reason == "length"
    assert closing[0].model_extra["superfluid"]["spec"]["proposed"] > 0
    assert closing[0].usage.completion_tokens == 64
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 64
    assert streamed_text(chunks) == chat(client, max_tokens=64).choices[0].message.content


@pytest.mark.parametrize("text_api", [False, True], ids=["chat", "completions"])
def test_the_final_stream_chunk_carries_usage_and_the_spec(
    client: openai.OpenAI, text_api: bool
) -> None:
    options: dict[str, Any] = {
        "model": "fake-model",
        "max_tokens": 48,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if text_api:
        chunks = list(client.completions.create(prompt=REPETITIVE, **options))
    else:
        chunks = list(client.chat.completions.create(messages=USER, **options))
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 48
    spec = last.model_extra["superfluid"]["spec"]
    assert 0 < spec["accepted"] <= spec["proposed"]
    assert spec["acceptance_rate"] == pytest.approx(spec["accepted"] / spec["proposed"])
    # The same figures as the chunk with the finish reason: one reply, one account.
    closing = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert closing.model_extra["superfluid"]["spec"] == spec


def test_text_completions_stream_and_not_with_the_same_text(client: openai.OpenAI) -> None:
    options: dict[str, Any] = {"model": "fake-model", "max_tokens": 32, "temperature": 0}
    reply = client.completions.create(prompt=REPETITIVE, **options)
    assert reply.id.startswith("cmpl-") and reply.object == "text_completion"
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 32
    assert reply.model_extra["superfluid"]["spec"]["proposed"] > 0
    chunks = list(client.completions.create(prompt=[REPETITIVE], stream=True, **options))
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_text_parts_are_read_as_one_message(client: openai.OpenAI) -> None:
    parts = [{"type": "text", "text": "the cat sat"}, {"type": "text", "text": "on the mat"}]
    joined = chat(client, messages=[{"role": "user", "content": "the cat sat\non the mat"}])
    reply = chat(client, messages=[{"role": "user", "content": parts}], max_tokens=16)
    assert reply.choices[0].message.content == joined.choices[0].message.content[:16]


def test_a_stop_string_ends_the_reply_before_it_and_frees_the_lane(
    client: openai.OpenAI, served: ServedModels
) -> None:
    full = chat(client, max_tokens=48).choices[0].message.content
    stop = full[20:23]
    before = full[: full.index(stop)]
    # slow-model decodes what fake-model does, slowly: its lane would run for minutes if the
    # stop string did not end it.
    endless = {"model": "slow-model", "max_tokens": 100_000}
    reply = chat(client, stop=[stop], **endless)
    assert reply.choices[0].message.content == before
    assert reply.choices[0].finish_reason == "stop"
    assert wait_for_idle(served.slow) == 0
    chunks = list(chat(client, stop=stop, stream=True, **endless))
    assert streamed_text(chunks) == before
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert wait_for_idle(served.slow) == 0


def test_characters_split_across_tokens_are_never_broken_in_a_stream(
    client: openai.OpenAI,
) -> None:
    # Every character of utf8-model takes two tokens; 60 tokens make 30 whole characters.
    whole = chat(client, model="utf8-model", max_tokens=60).choices[0].message.content
    chunks = list(chat(client, model="utf8-model", max_tokens=60, stream=True))
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(whole) == 30 and all(ord(ch) > 0x7F for ch in whole)
    assert "\ufffd" not in whole and not any("\ufffd" in piece for piece in pieces)
    assert "".join(pieces) == whole


def test_lanes_with_logprobs_json_mode_or_a_bias_never_speculate(client: openai.OpenAI) -> None:
    for extra in (
        {"logprobs": True},
        {"response_format": {"type": "json_object"}},
        {"logit_bias": {"5": 1.0}},
    ):
        reply = chat(client, max_tokens=64, **extra)
        assert "superfluid" not in (reply.model_extra or {}), extra
        # Only the lane that asked for logprobs reports them.
        assert (reply.choices[0].logprobs is None) == ("logprobs" not in extra), extra


# -- logprobs -------------------------------------------------------------------------------------


def assert_chat_entry(entry: Any, top: int) -> None:
    """One `logprobs.content` entry: exact bytes, a log-probability, its likeliest alternatives."""
    assert entry.bytes == list(entry.token.encode())
    assert entry.logprob <= 0.0
    assert len(entry.top_logprobs) == top
    values = [alt.logprob for alt in entry.top_logprobs]
    assert values == sorted(values, reverse=True) and all(v <= 0.0 for v in values)
    assert all(alt.bytes == list(alt.token.encode()) for alt in entry.top_logprobs)
    # Greedy decoding picks the likeliest token: it heads its own list.
    if top:
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)


def test_a_chat_reply_with_logprobs_lists_every_token_and_its_likeliest_alternatives(
    client: openai.OpenAI,
) -> None:
    reply = chat(client, max_tokens=32, logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 32
    assert "".join(entry.token for entry in content) == reply.choices[0].message.content
    for entry in content:
        assert_chat_entry(entry, top=3)
    assert "superfluid" not in (reply.model_extra or {})  # and the lane did not speculate
    bare = chat(client, max_tokens=8, logprobs=True).choices[0].logprobs.content
    assert len(bare) == 8 and all(entry.top_logprobs == [] for entry in bare)


def test_a_chat_stream_with_logprobs_carries_each_chunks_own_tokens(
    client: openai.OpenAI,
) -> None:
    options: dict[str, Any] = {"max_tokens": 32, "logprobs": True, "top_logprobs": 2}
    whole = chat(client, **options).choices[0].logprobs.content
    chunks = list(chat(client, stream=True, **options))
    streamed = []
    for chunk in chunks:
        choice = chunk.choices[0]
        if choice.delta.content:
            entries = choice.logprobs.content
            assert "".join(entry.token for entry in entries) == choice.delta.content
            streamed.extend(entries)
        elif choice.finish_reason:
            assert choice.logprobs is None  # nothing was owed: every token showed its text
    for entry in streamed:
        assert_chat_entry(entry, top=2)
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in whole]


def test_text_completions_report_tokens_offsets_and_top_logprobs(client: openai.OpenAI) -> None:
    options: dict[str, Any] = {"model": "fake-model", "max_tokens": 24, "temperature": 0}
    reply = client.completions.create(prompt=REPETITIVE, logprobs=2, **options)
    text, logprobs = reply.choices[0].text, reply.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 24
    assert "".join(logprobs.tokens) == text
    assert logprobs.text_offset == list(
        itertools.accumulate((len(t) for t in logprobs.tokens[:-1]), initial=0)
    )
    for token, value, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert value <= 0.0
        # Two of the fake model's ids may share a text, so a list can hold fewer than 2.
        assert 1 <= len(top) <= 2
        assert list(top.values()) == sorted(top.values(), reverse=True)
        assert top[token] == pytest.approx(value)  # greedy: the chosen token is the likeliest
    chunks = list(client.completions.create(prompt=REPETITIVE, logprobs=2, stream=True, **options))
    tokens, offsets = [], []
    for chunk in chunks:
        if chunk.choices[0].text:
            assert "".join(chunk.choices[0].logprobs.tokens) == chunk.choices[0].text
            tokens.extend(chunk.choices[0].logprobs.tokens)
            offsets.extend(chunk.choices[0].logprobs.text_offset)
    assert tokens == logprobs.tokens and offsets == logprobs.text_offset
    assert client.completions.create(prompt=REPETITIVE, **options).choices[0].logprobs is None


def test_logprobs_end_where_a_stop_string_cuts_the_reply(client: openai.OpenAI) -> None:
    full = chat(client, max_tokens=48).choices[0].message.content
    stop = full[20:23]
    reply = chat(client, max_tokens=48, stop=[stop], logprobs=True)
    content = reply.choices[0].message.content
    assert content == full[: full.index(stop)]
    # Each fake token is one character, so the cut falls between tokens: no entry is left over.
    assert "".join(entry.token for entry in reply.choices[0].logprobs.content) == content
    chunks = list(chat(client, max_tokens=48, stop=stop, logprobs=True, stream=True))
    entries = [e for c in chunks if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert "".join(entry.token for entry in entries) == content


def test_a_token_holding_half_a_character_shows_a_replacement_and_its_exact_bytes(
    client: openai.OpenAI,
) -> None:
    reply = chat(client, model="utf8-model", max_tokens=20, logprobs=True, top_logprobs=1)
    content = reply.choices[0].logprobs.content
    assert len(content) == 20 and all(entry.token == "\ufffd" for entry in content)
    assert all(len(entry.bytes) == 1 for entry in content)
    joined = bytes(b for entry in content for b in entry.bytes)
    assert joined.decode() == reply.choices[0].message.content
    chunks = list(chat(client, model="utf8-model", max_tokens=20, logprobs=True, stream=True))
    for chunk in chunks:
        choice = chunk.choices[0]
        if choice.delta.content:
            data = bytes(b for entry in choice.logprobs.content for b in entry.bytes)
            assert data.decode() == choice.delta.content


def test_top_logprobs_without_logprobs_is_a_400(http: httpx.Client) -> None:
    body = {"model": "fake-model", "messages": USER, "max_tokens": 4, "top_logprobs": 2}
    answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "top_logprobs"
    too_many = {**body, "logprobs": True, "top_logprobs": 21}
    assert http.post("/v1/chat/completions", json=too_many).status_code == 400


def test_sampled_replies_differ_without_a_seed_and_repeat_with_one(client: openai.OpenAI) -> None:
    def sampled(**seed: Any) -> str:
        return chat(client, temperature=1.0, max_tokens=48, **seed).choices[0].message.content

    assert sampled() != sampled()
    assert sampled(seed=7) == sampled(seed=7)


# -- concurrency and clients that leave -----------------------------------------------------------


def test_eight_simultaneous_streams_all_complete(served: ServedModels) -> None:
    async def one(aclient: openai.AsyncOpenAI, i: int) -> tuple[str | None, int]:
        stream = await aclient.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": f"{i} {REPETITIVE}"}],
            temperature=0,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        return chunks[-2].choices[0].finish_reason, chunks[-1].usage.completion_tokens

    async def all_eight() -> list[tuple[str | None, int]]:
        async with openai.AsyncOpenAI(
            base_url=f"{served.server.url}/v1", api_key=API_KEY, max_retries=0
        ) as aclient:
            return await asyncio.gather(*(one(aclient, i) for i in range(8)))

    assert asyncio.run(all_eight()) == [("length", 40)] * 8


def test_a_client_that_leaves_mid_stream_frees_its_lane(
    client: openai.OpenAI, served: ServedModels
) -> None:
    stream = chat(client, model="slow-model", max_tokens=100_000, stream=True)
    for seen, _ in enumerate(stream):
        if seen == 3:
            break
    assert served.slow.executor.active_lanes == 1
    stream.close()
    assert wait_for_idle(served.slow) == 0


def test_a_client_that_stops_waiting_for_a_whole_reply_frees_its_lane(
    http: httpx.Client, served: ServedModels
) -> None:
    body = {"model": "slow-model", "messages": USER, "max_tokens": 100_000}
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/chat/completions", json=body, timeout=0.5)
    assert wait_for_idle(served.slow) == 0


# -- refusals -------------------------------------------------------------------------------------


def test_a_wrong_or_missing_api_key_is_a_401(served: ServedModels) -> None:
    stranger = openai.OpenAI(
        base_url=f"{served.server.url}/v1", api_key="not-the-key", max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    with pytest.raises(openai.AuthenticationError):
        chat(stranger, max_tokens=4)
    anonymous = httpx.post(f"{served.server.url}/v1/completions", json={"prompt": "hi"})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{served.server.url}/health").status_code == 200  # probes need no key


def test_bad_input_through_the_client_is_a_bad_request(client: openai.OpenAI) -> None:
    for options in ({"temperature": 5}, {"n": 2}, {"messages": []}, {"temperature": "hot"}):
        with pytest.raises(openai.BadRequestError) as caught:
            chat(client, **options)
        assert caught.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"top_p": 0}, "top_p"),
        ({"n": 2}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0].type",
        ),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": 3}, "stop"),
        ({"logit_bias": {"not-a-token": 1}}, "logit_bias"),
        ({"response_format": {"type": "json_schema"}}, "response_format.type"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice.function.name",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "string", "pattern": "x"}},
                    }
                ],
                "tool_choice": "required",
            },
            "tools",
        ),
        (
            {"messages": [*USER, {"role": "tool", "content": "42", "tool_call_id": "call_1"}]},
            "messages[1].tool_call_id",
        ),
        (
            {
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1]"},
                            }
                        ],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_bad_input_is_a_400_in_openai_shape(
    http: httpx.Client, changes: dict[str, Any], param: str
) -> None:
    body = {"model": "fake-model", "messages": USER, "max_tokens": 4, **changes}
    answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert "Traceback" not in answer.text


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"", '{"prompt": "\u00e9"'.encode()])
def test_a_body_that_is_not_a_json_object_is_a_400(http: httpx.Client, raw: bytes) -> None:
    answer = http.post("/v1/completions", content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_a_prompt_longer_than_the_context_is_a_400_naming_both_numbers(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="fake-model", prompt="x" * 600, max_tokens=5)
    assert "600" in caught.value.message and "512" in caught.value.message
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="fake-model", prompt=["one", "two"], max_tokens=5)


def test_an_unknown_model_is_a_404_and_a_file_name_reaches_its_model(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        chat(client, model="gpt-5", max_tokens=4)
    assert caught.value.param == "model" and "fake-model" in caught.value.message
    assert chat(client, model="fake-model.gguf", max_tokens=4).model == "fake-model"
    assert chat(client, model="", max_tokens=4).model == "fake-model"  # empty: the first model


def test_a_body_over_the_limit_is_a_413(http: httpx.Client) -> None:
    oversized = {"model": "fake-model", "prompt": "x" * (MAX_BODY_BYTES + 1)}
    answer = http.post("/v1/completions", json=oversized)
    assert answer.status_code == 413
    assert answer.json()["error"]["type"] == "invalid_request_error"

    def chunked() -> Iterator[bytes]:  # no Content-Length: the size is known only by reading
        yield b'{"prompt": "'
        for _ in range(MAX_BODY_BYTES // 4096 + 1):
            yield b"x" * 4096
        yield b'"}'

    answer = http.post("/v1/completions", content=chunked())
    assert answer.status_code == 413


# -- failures -------------------------------------------------------------------------------------


def test_a_runtime_failure_before_the_first_byte_is_a_500(
    client: openai.OpenAI, served: ServedModels
) -> None:
    assert wait_for_idle(served.slow) == 0
    served.slow.runtime.fail_next_step = True
    with pytest.raises(openai.InternalServerError) as caught:
        chat(client, model="slow-model", max_tokens=8, stream=True)
    assert caught.value.type == "server_error" and "injected fault" in caught.value.message
    # Only that request failed: the model keeps serving.
    again = chat(client, model="slow-model", max_tokens=4)
    assert again.choices[0].finish_reason == "length"


def test_a_runtime_failure_mid_stream_is_an_sse_error_event(
    http: httpx.Client, served: ServedModels
) -> None:
    body = {"model": "slow-model", "messages": USER, "max_tokens": 100_000, "stream": True}
    events = []
    with http.stream("POST", "/v1/chat/completions", json=body) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                if len(events) == 2:
                    served.slow.runtime.fail_next_step = True
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error" and "injected fault" in error["message"]
    assert wait_for_idle(served.slow) == 0


# -- models, health, metrics ----------------------------------------------------------------------


def test_models_lists_each_served_model_with_its_capabilities(client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == ["fake-model", "utf8-model", "slow-model"]
    card = models[0]
    assert card.object == "model" and card.owned_by == "superfluid"
    assert card.model_extra["superfluid"] == {
        "runtime": "fake",
        "strategy": "prompt-lookup",
        "aliases": [],
        "sampling_defaults": {
            "temperature": 0.8,
            "top_k": None,
            "top_p": None,
            "min_p": None,
            "repeat_penalty": None,
            "source": "built-in",
        },
        "capabilities": {
            "verify_rows": True,
            "verify_batches": True,
            "truncate_partial": True,
            "cut_refusal": None,
            "strategies": ["prompt-lookup"],
            "max_verify_rows": 16,
            "context_size": 512,
        },
    }
    assert client.models.retrieve("utf8-model").id == "utf8-model"


def test_health_and_metrics_are_served_and_requests_are_counted(
    http: httpx.Client, served: ServedModels
) -> None:
    assert http.get("/health").json() == {
        "status": "ok",
        "models": ["fake-model", "utf8-model", "slow-model"],
    }
    page = http.get("/metrics")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    assert b"superfluid_spec_proposed_total" in page.content
    missing = http.get("/no/such/route")
    assert missing.status_code == 404 and "error" in missing.json()
    recorded = set(served.metrics.requests)
    assert ("/health", 200) in recorded and ("unmatched", 404) in recorded
    assert ("/v1/chat/completions", 200) in recorded


# -- tool calling (the fake model; the real one is in test_tool_calling_llamacpp.py) --------------

DONE_TOOL = {
    "type": "function",
    "function": {"name": "done", "description": "Say the work is finished.", "parameters": {}},
}
FORCE_DONE = {"type": "function", "function": {"name": "done"}}


def test_a_named_tool_choice_always_yields_that_call(client: openai.OpenAI) -> None:
    reply = chat(client, tools=[DONE_TOOL], tool_choice=FORCE_DONE, max_tokens=8)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "done" and json.loads(call.function.arguments) == {}


def test_a_streamed_named_call_arrives_as_deltas_the_client_accumulates(
    client: openai.OpenAI,
) -> None:
    with client.chat.completions.stream(
        model="fake-model",
        messages=USER,  # type: ignore[arg-type]
        tools=[DONE_TOOL],  # type: ignore[list-item]
        tool_choice=FORCE_DONE,  # type: ignore[arg-type]
        max_tokens=8,
        temperature=0,
        stream_options={"include_usage": True},
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "done" and json.loads(call.function.arguments) == {}


def test_with_tools_and_no_call_in_the_reply_the_text_is_content(client: openai.OpenAI) -> None:
    for choice in ("auto", "none"):
        reply = chat(client, tools=[DONE_TOOL], tool_choice=choice, max_tokens=12)
        assert reply.choices[0].finish_reason == "length"
        assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls


def test_a_conversation_with_a_call_and_its_result_is_served(client: openai.OpenAI) -> None:
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "done", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    reply = chat(client, messages=messages, tools=[DONE_TOOL], max_tokens=6)
    assert reply.choices[0].message.content

"""`superfluid serve` as a user starts it: the demo model, `--speculate auto`, the openai client."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import model_cache
from tests.integration.serving import started

pytestmark = pytest.mark.slow

SUPERFLUID = Path(sys.executable).parent / "superfluid"
REPEAT = "Repeat this line exactly three times: the quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def server(demo_gguf, instruct_gguf):
    env = {**os.environ, "SUPERFLUID_HOME": str(model_cache())}
    # No MODEL argument: the README's command serves the demo models.
    with started(["--speculate", "auto"], env) as running:
        yield running.port, running.lines


def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)


def test_the_startup_log_names_the_strategy(server):
    _, lines = server
    for model in ("gemma3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"):
        assert (
            f"superfluid: speculation: {model}: auto: prompt-lookup on the llamacpp runtime"
            in lines
        )
    assert any("gemma3-270m-q4_k_m.gguf: Q5_0 weights served as Q8_0" in line for line in lines)
    assert not any("Traceback" in line for line in lines)


def test_the_startup_log_names_the_kernels_every_weight_runs_on(server):
    _, lines = server
    head = "superfluid: gemma3-270m-q4_k_m.gguf runs on batch-invariant kernels: "
    (kernels,) = [line for line in lines if line.startswith(head)]
    # The Q5_0 weights are served widened to Q8_0, on tinyBLAS's quantized tiles.
    assert "tinyBLAS (91 Q8_0)" in kernels, kernels
    assert kernels.endswith("tiled attention on an F16 cache, a KV stream per lane")


def test_the_openai_client_can_chat_with_the_demo_server(server):
    port, _ = server
    reply = client(port).chat.completions.create(
        model="gemma3-270m-q4_k_m.gguf",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=12,
        temperature=0,
    )
    assert reply.choices[0].message.content.strip()
    assert reply.usage.completion_tokens <= 12


def test_an_accepted_draft_streams_as_one_chunk_with_several_tokens(server):
    port, _ = server
    stream = client(port).chat.completions.create(
        model="gemma3-270m-q4_k_m.gguf",
        messages=[{"role": "user", "content": REPEAT}],
        max_tokens=60,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    counts, spec = [], None
    for chunk in stream:
        if chunk.choices and chunk.usage is not None:
            counts.append(chunk.usage.completion_tokens)
        extra = (chunk.model_extra or {}).get("superfluid")
        if extra:
            spec = extra["spec"]
    steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert counts == sorted(counts)
    assert max(steps) >= 2, f"no chunk carried more than one token: {steps}"
    assert spec is not None and spec["accepted"] > 0


def test_metrics_parse_and_count_speculation(server):
    port, _ = server
    client(port).chat.completions.create(
        model="gemma3-270m-q4_k_m.gguf",
        messages=[{"role": "user", "content": REPEAT}],
        max_tokens=40,
        temperature=0,
    )
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    model = (("model", "gemma3-270m-q4_k_m.gguf"),)
    assert samples[("superfluid_spec_proposed_total", model)] > 0
    assert (
        0
        < samples[("superfluid_spec_accepted_total", model)]
        <= samples[("superfluid_spec_proposed_total", model)]
    )
    assert samples[("superfluid_active_lanes", model)] == 0
    assert any(name == "superfluid_spec_gate_phase" for name, _ in samples)


def test_json_mode_returns_a_json_object_and_stops_when_it_closes(server):
    port, _ = server
    reply = client(port).chat.completions.create(
        model="gemma3-270m-q4_k_m.gguf",
        messages=[
            {
                "role": "user",
                "content": "Return a JSON object with the keys city and country for Paris, nothing else.",
            }
        ],
        max_tokens=80,
        temperature=0,
        response_format={"type": "json_object"},
    )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    assert (reply.model_extra or {}).get("superfluid") is None  # a grammar lane never drafts

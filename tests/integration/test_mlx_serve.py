"""`superfluid serve <MLX directory> --speculate auto`, as a user starts it, with the openai client.

The model is a tiny random llama made on the spot (tests/integration/mlx_models.py); the hub is
switched off for the server, so loading can only read the directory. Outside CI a machine
without the mlx extra skips this module; in CI it fails.
"""

from __future__ import annotations

import os

import openai
import pytest

if not os.environ.get("CI"):
    pytest.importorskip("mlx_lm", reason="needs the mlx extra (pip install -e '.[mlx]')")

from tests.integration.mlx_models import write_tiny_llama
from tests.integration.serving import calls_of, started

MODEL = "tiny-llama-mlx"
REPEATS = "the quick brown fox jumps over the lazy dog. " * 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    model = write_tiny_llama(tmp_path_factory.mktemp("models") / MODEL)
    env = {
        **os.environ,
        "SUPERFLUID_HOME": str(home),
        "HF_HUB_OFFLINE": "1",  # any attempt to reach the hub fails loudly
        "TRANSFORMERS_OFFLINE": "1",
    }
    args = [str(model), "--speculate", "auto", "--ctx-size", "512", "--max-lanes", "2", "--offline"]
    with started(args, env, timeout=120) as running:
        yield running.port, running.lines


def client(port: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)


def test_the_startup_log_names_prompt_lookup_on_the_mlx_runtime(server):
    _, lines = server
    assert "superfluid: speculation: auto: prompt-lookup on the mlx runtime" in lines
    assert not any("Traceback" in line for line in lines)


def test_the_openai_client_can_chat_with_an_mlx_model(server):
    port, _ = server
    reply = client(port).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": REPEATS}],
        max_tokens=24,
        temperature=0,
    )
    choice = reply.choices[0]
    # A random model's text is noise; that it arrives, counted and finished, is the point.
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert 0 < reply.usage.completion_tokens <= 24
    assert reply.usage.prompt_tokens > 40
    # The gates probe speculation first, and the model soon cycles: drafts were verified.
    spec = (reply.model_extra or {}).get("superfluid", {}).get("spec")
    assert spec is not None and spec["proposed"] > 0


PATH_TOOL = {
    "type": "function",
    "function": {
        "name": "open_path",
        "parameters": {
            "type": "object",
            "properties": {"line": {"type": "integer"}, "strict": {"type": "boolean"}},
            "required": ["line", "strict"],
        },
    },
}


def test_a_template_without_tools_refuses_them_and_a_forced_call_still_works(server):
    """The tiny model's template shows no tools: `auto` is a 400 that says so, and a named
    `tool_choice` is written by the grammar anyway (random weights, valid arguments)."""
    port, _ = server
    with pytest.raises(openai.BadRequestError, match="cannot take tools"):
        client(port).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[PATH_TOOL]
        )
    reply = client(port).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=[PATH_TOOL],
        tool_choice={"type": "function", "function": {"name": "open_path"}},
        max_tokens=120,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    ((_, arguments),) = calls_of(reply)
    assert isinstance(arguments["line"], int) and isinstance(arguments["strict"], bool)

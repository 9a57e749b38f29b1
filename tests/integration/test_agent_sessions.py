"""Agent traffic on the real models, through the official `openai` client.

An agent's session is turn after turn of: a tool call (the model's own under `auto`, or one a
grammar writes under a forced `tool_choice`), the tool's result, then an edit that returns a
file with a change. Speculation must change none of it: greedy sessions, four at once with
prefix reuse on, stream the same calls and the same text with `--speculate auto` as with
`off`, and the edit turns draft whatever ran before them.

Also here: a chat reply ends at the template's end-of-turn marker even where the model's own
end-of-generation token is another (the base demo model under a ChatML template), and a
`tokenizer_config.json` whose `chat_template` is a list gives tool requests its `tool_use`
template.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from bench.agent_workload import GEMMA_HERMES

from tests.integration.conftest import model_cache
from tests.integration.serving import Server, started

pytestmark = pytest.mark.slow

DEMO = "gemma3-270m-q4_k_m.gguf"
INSTRUCT = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The base model takes tools through Gemma's turns with Hermes-style blocks (the bench's
# template, GEMMA_HERMES); earlier turns that called `read_file` steer it into calling again.
CHATML = """\
{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the project.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
FORCED = {"type": "function", "function": {"name": "read_file"}}


def serve(args: list[str]) -> Iterator[Server]:
    env = {**os.environ, "SUPERFLUID_HOME": str(model_cache())}
    with started([*args, "--max-lanes", "4", "--ctx-size", "4096"], env) as running:
        yield running


@pytest.fixture(scope="module")
def gemma_hermes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("templates") / "gemma-hermes.jinja"
    path.write_text(GEMMA_HERMES)
    return path


def demo_models(demo: Path, instruct: Path, template: Path, speculate: str) -> list[str]:
    """Both real models, the base one with its Hermes tool template."""
    args = [str(demo), "--model", str(instruct), "--chat-template-file", str(template)]
    return [*args, "--speculate", speculate]


@pytest.fixture(scope="module")
def auto(demo_gguf: Path, instruct_gguf: Path, gemma_hermes: Path) -> Iterator[Server]:
    yield from serve(demo_models(demo_gguf, instruct_gguf, gemma_hermes, "auto"))


@pytest.fixture(scope="module")
def off(demo_gguf: Path, instruct_gguf: Path, gemma_hermes: Path) -> Iterator[Server]:
    yield from serve(demo_models(demo_gguf, instruct_gguf, gemma_hermes, "off"))


# -- one session ----------------------------------------------------------------------------------


def source_file(rng: random.Random) -> tuple[str, str]:
    """A fresh small Python module and its path: no two sessions copy the same text."""
    name = rng.choice(["ledger", "router", "cache", "parser", "queue", "store"])
    name += f"_{rng.randrange(10_000)}"
    lines = [f'"""The {name} module."""', "", "import json", ""]
    for index in range(2):
        value = rng.randrange(100, 999)
        lines += [
            f"def {name}_step_{index}(items, limit={value}):",
            "    kept = [item for item in items if item < limit]",
            f"    return json.dumps({{'step': {index}, 'kept': kept}})",
            "",
        ]
    return f"src/{name}.py", "\n".join(lines)


@dataclass
class Turn:
    """What a client reads off one streamed reply: text, calls (no ids: those are random), the
    finish reason and the drafts."""

    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    finish: str | None = None
    accepted: int = 0


def stream_turn(server: Server, model: str, messages: list[dict[str, Any]], **options: Any) -> Turn:
    stream = server.client().chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        temperature=0,
        stream=True,
        **options,
    )
    turn = Turn()
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for chunk in stream:
        spec = (chunk.model_extra or {}).get("superfluid")
        if spec:
            turn.accepted = spec["spec"]["accepted"]
        for choice in chunk.choices:
            delta = choice.delta
            turn.content += delta.content or ""
            for call in delta.tool_calls or []:
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                if call.function and call.function.arguments:
                    arguments[call.index] = arguments.get(call.index, "") + call.function.arguments
            turn.finish = choice.finish_reason or turn.finish
    turn.calls = [(names[i], arguments.get(i, "")) for i in sorted(names)]
    return turn


def session(server: Server, model: str, seed: int, *, own_calls: bool) -> list[Turn]:
    """Call → result → edit → forced call: an agent's round on one file, and its next call."""
    rng = random.Random(seed)
    path, text = source_file(rng)
    old = text.split("def ", 1)[1].split("_step_", 1)[0]
    new = f"{old}_v2"
    steer = []  # earlier turns that called the tool: a base model copies the pattern
    for shot, earlier in enumerate(("setup.py", "README.md", "Makefile")):
        steer += [
            {"role": "user", "content": f"Open {earlier}."},
            *called(f"shot_{shot}", earlier, f"(the contents of {earlier})"),
            {"role": "assistant", "content": f"Here is {earlier}."},
        ]
    messages: list[dict[str, Any]] = [*steer, {"role": "user", "content": f"Open {path}."}]
    turns = []
    first = stream_turn(
        server,
        model,
        messages,
        tools=[READ_FILE],
        tool_choice="auto" if own_calls else FORCED,
        # One call per turn, as agents that run one tool at a time ask: the reply ends when
        # the call closes, not when a base model's rambling after it reaches max_tokens.
        parallel_tool_calls=False,
        max_tokens=40,
    )
    turns.append(first)
    messages += called(f"{seed}_0", path, text)
    messages.append(
        {
            "role": "user",
            "content": f"Return the whole file with `{old}` renamed to `{new}`, and nothing else.",
        }
    )
    edit = stream_turn(server, model, messages, max_tokens=120)
    turns.append(edit)
    messages.append({"role": "assistant", "content": edit.content})
    messages.append({"role": "user", "content": f"Open {path} again."})
    turns.append(
        stream_turn(server, model, messages, tools=[READ_FILE], tool_choice=FORCED, max_tokens=40)
    )
    return turns


def called(call_id: str, path: str, result: str) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{call_id}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result},
    ]


def four_sessions(server: Server, model: str, *, own_calls: bool) -> list[list[Turn]]:
    with ThreadPoolExecutor(4) as pool:
        return list(
            pool.map(
                lambda seed: session(server, model, seed, own_calls=own_calls), range(100, 104)
            )
        )


@pytest.mark.parametrize(("model", "own_calls"), [(DEMO, True), (INSTRUCT, False)])
def test_four_agent_sessions_stream_the_same_calls_and_text_with_speculation_as_without(
    auto: Server, off: Server, model: str, own_calls: bool
) -> None:
    spec = four_sessions(auto, model, own_calls=own_calls)
    plain = four_sessions(off, model, own_calls=own_calls)
    for with_drafts, without in zip(spec, plain, strict=True):
        assert [(t.content, t.calls, t.finish) for t in with_drafts] == [
            (t.content, t.calls, t.finish) for t in without
        ]
        # Every call turn is a call, whoever wrote it, with arguments a client can read.
        for turn in (with_drafts[0], with_drafts[2]):
            assert turn.finish == "tool_calls", turn
            ((name, arguments),) = turn.calls
            assert name == "read_file" and "path" in json.loads(arguments)
        assert all(t.accepted == 0 for t in without)
    # The edits copy their file back: speculation drafts them whatever ran before, forced
    # calls included (grammar lanes never draft, and their ticks never reach the gates).
    edits = [turns[1] for turns in spec]
    assert sum(turn.accepted for turn in edits) > 0
    assert sum(turn.accepted > 0 for turn in edits) >= len(edits) // 2


# -- templates --------------------------------------------------------------------------------------


def test_a_chat_reply_ends_at_the_template_s_end_of_turn_marker(
    demo_gguf: Path, tmp_path: Path
) -> None:
    # The base model's end-of-generation token is not ChatML's `<|im_end|>`: unstopped, it
    # writes the marker as text and goes on into turns it invents.
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    for server in serve([str(demo_gguf), "--chat-template-file", str(template)]):
        reply = server.client().chat.completions.create(
            model=DEMO,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            temperature=0,
            max_tokens=60,
        )
        (choice,) = reply.choices
        assert choice.finish_reason == "stop"
        assert "<|im_" not in (choice.message.content or "")
        assert reply.usage is not None and reply.usage.completion_tokens < 60


def test_a_tokenizer_config_s_tool_use_template_takes_the_requests_with_tools(
    instruct_gguf: Path, tmp_path: Path
) -> None:
    config = tmp_path / "tokenizer_config.json"
    templates = [{"name": "default", "template": CHATML}]
    config.write_text(json.dumps({"chat_template": templates}))
    for server in serve([str(instruct_gguf), "--chat-template-file", str(config)]):
        with pytest.raises(openai.BadRequestError, match=f"--chat-template-file {config}"):
            server.client().chat.completions.create(
                model=INSTRUCT,
                messages=[{"role": "user", "content": "Open setup.py."}],
                tools=[READ_FILE],  # type: ignore[list-item]
                max_tokens=5,
            )
    hermes = CHATML.replace(
        "{% for m in messages %}",
        "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}"
        "{% endfor %}</tools> Call one as <tool_call>{...}</tool_call>.<|im_end|>\n"
        "{% endif %}{% for m in messages %}",
    )
    templates.append({"name": "tool_use", "template": hermes})
    config.write_text(json.dumps({"chat_template": templates}))
    for server in serve([str(instruct_gguf), "--chat-template-file", str(config)]):
        reply = server.client().chat.completions.create(
            model=INSTRUCT,
            messages=[{"role": "user", "content": "Open setup.py."}],
            tools=[READ_FILE],  # type: ignore[list-item]
            max_tokens=5,
        )
        assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
        plain = server.client().chat.completions.create(
            model=INSTRUCT, messages=[{"role": "user", "content": "Open setup.py."}], max_tokens=5
        )
        # The tool_use template shows the tools: the prompt with them is longer.
        assert reply.usage is not None and plain.usage is not None
        assert reply.usage.prompt_tokens > plain.usage.prompt_tokens + 20

"""The README's requests, run as written against the demo server (only the port is changed).

A newcomer's first chat request must get a reply from the instruct model; the copy request must
show the product: a reply with accepted drafts in `superfluid.spec`, and the same text from a
server started with `--speculate off`. The tool calling example must print a call. The snippets are read out of README.md, so the README cannot
drift from what works.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import model_cache
from tests.integration.serving import Server, started

pytestmark = pytest.mark.slow

README = (Path(__file__).parents[2] / "README.md").read_text()
PORT = "8453"


def section(title: str) -> str:
    start = README.index(title)
    following = re.search(r"\n##+ ", README[start + len(title) :])
    return README[start : start + len(title) + (following.start() if following else len(README))]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


FIRST = section("## A first request")
COPY = section("### A copy that shows speculation")
TOOLS = section("### Tool calling")


def serve(speculate: str) -> Iterator[Server]:
    env = {**os.environ, "SUPERFLUID_HOME": str(model_cache())}
    # The README's command, on a free port: `superfluid serve --speculate ...` (the demo model).
    with started(["--speculate", speculate], env) as running:
        yield running


@pytest.fixture(scope="module")
def auto(demo_gguf: Path, instruct_gguf: Path) -> Iterator[Server]:
    yield from serve("auto")


@pytest.fixture(scope="module")
def off(demo_gguf: Path, instruct_gguf: Path) -> Iterator[Server]:
    yield from serve("off")


def run_python(snippet: str, server: Server) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(snippet.replace(PORT, str(server.port)), {})
    return printed.getvalue()


def run_curl(snippet: str, server: Server) -> dict[str, object]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    command = shlex.split(snippet.replace(PORT, str(server.port)))
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    reply: dict[str, object] = json.loads(done.stdout)
    return reply


def test_the_demo_serves_the_instruct_model_beside_the_base_model(auto: Server) -> None:
    served = [model.id for model in auto.client().models.list()]
    assert served == ["gemma3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"]


def test_the_first_chat_request_gets_an_answer_from_the_instruct_model(auto: Server) -> None:
    (curl,) = blocks(FIRST, "sh")
    reply = run_curl(curl, auto)
    (choice,) = reply["choices"]  # type: ignore[misc]
    assert reply["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop"


def test_the_copy_request_shows_accepted_drafts_and_the_same_text_without_them(
    auto: Server, off: Server
) -> None:
    (curl,) = blocks(COPY, "sh")
    spec, plain = run_curl(curl, auto), run_curl(curl, off)
    assert spec["superfluid"]["spec"]["accepted"] > 0  # type: ignore[index]
    assert "superfluid" not in plain
    assert spec["choices"] == plain["choices"]


def test_the_copy_openai_request_prints_the_copy_and_its_spec(auto: Server, off: Server) -> None:
    (snippet,) = blocks(COPY, "python")
    printed = run_python(snippet, auto)
    assert "'accepted'" in printed and "bread, milk" in printed
    with pytest.raises(KeyError):  # no drafts, no `superfluid` field: the last print fails
        run_python(snippet, off)


def test_the_tool_calling_example_prints_a_call(auto: Server) -> None:
    (snippet,) = blocks(TOOLS, "python")
    name, arguments = run_python(snippet, auto).split(" ", 1)
    assert name == "read_file" and "path" in json.loads(arguments)

"""What an operator meets, on the real demo model served as a subprocess: a served name (the
file name still works, and so does no name), the model file's own sampling defaults, and
overload with ten times the lanes of concurrent clients against `--max-lanes 1`.

The demo GGUF is copied with `general.sampling.*` keys added (tests/integration/gguf_edit.py):
temperature 0 (so a request that sets none decodes greedily) and top_k 7.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.conftest import model_cache
from tests.integration.gguf_edit import with_metadata
from tests.integration.serving import Server, started

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FILE = "gemma-defaults.gguf"
ASK = [{"role": "user", "content": "Name three colours."}]
CLIENTS = 10  # ten times the lanes


@pytest.fixture(scope="module")
def model(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    extra = {"general.sampling.temp": 0.0, "general.sampling.top_k": 7}
    return with_metadata(demo_gguf, tmp_path_factory.mktemp("gguf") / FILE, extra)


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[Server]:
    env = {**os.environ, "SUPERFLUID_HOME": str(model_cache())}
    args = [str(model), "--served-model-name", "gemma", "--max-lanes", "1", "--max-queue", "1"]
    # Speculating: greedy replies must not depend on drafts (ADR 0008), and these tests compare
    # greedy replies across requests.
    with started([*args, "--speculate", "auto", "--ctx-size", "1024"], env) as running:
        yield running


def ask(server: Server, model: str, **options: object) -> str:
    reply = server.client().chat.completions.create(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        max_tokens=12,
        **options,  # type: ignore[arg-type]
    )
    return reply.choices[0].message.content or ""


def test_the_startup_log_says_where_the_sampling_defaults_came_from(server: Server) -> None:
    assert (
        "superfluid: gemma: sampling defaults from GGUF general.sampling.*: temperature 0, top_k 7"
        in server.lines
    )


def test_models_lists_the_served_name_with_its_file_name_and_defaults(server: Server) -> None:
    (card,) = server.client().models.list().data
    assert card.id == "gemma"
    extra = card.model_extra["superfluid"]  # type: ignore[index]
    assert extra["aliases"] == [FILE]
    assert extra["sampling_defaults"] == {
        "temperature": 0.0,
        "top_k": 7,
        "top_p": None,
        "min_p": None,
        "repeat_penalty": None,
        "source": "GGUF general.sampling.*",
    }


def test_the_served_name_the_file_name_and_no_name_reach_the_model(server: Server) -> None:
    # No temperature: the model's default of 0 applies, so every reply is the greedy one.
    greedy = ask(server, "gemma", temperature=0)
    assert greedy
    assert ask(server, "gemma") == greedy
    assert ask(server, FILE) == greedy
    assert ask(server, "gemma-defaults") == greedy
    body = {"messages": ASK, "max_tokens": 12}  # no `model` at all: the one served model
    reply = httpx.post(f"http://127.0.0.1:{server.port}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200 and reply.json()["model"] == "gemma"
    assert reply.json()["choices"][0]["message"]["content"] == greedy
    with pytest.raises(openai.NotFoundError, match="this server serves gemma"):
        ask(server, "gpt-4o")


def test_a_requests_own_temperature_wins_over_the_models_default(server: Server) -> None:
    greedy = ask(server, "gemma")
    hot = {ask(server, "gemma", temperature=1.5, seed=seed) for seed in range(3)}
    assert hot != {greedy}


def test_ten_clients_against_one_lane_get_a_reply_or_a_429_and_nothing_hangs(
    server: Server,
) -> None:
    async def one(client: httpx.AsyncClient, i: int) -> httpx.Response:
        body = {"model": "gemma", "messages": [{"role": "user", "content": f"Count to {i}."}]}
        return await client.post("/v1/chat/completions", json={**body, "max_tokens": 24})

    async def all_of_them() -> list[httpx.Response]:
        url = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(CLIENTS)))

    before = server.metrics()
    replies = asyncio.run(all_of_them())
    statuses = sorted(r.status_code for r in replies)
    assert set(statuses) <= {200, 429}, statuses
    served = [r for r in replies if r.status_code == 200]
    refused = [r for r in replies if r.status_code == 429]
    # One lane and one queue place: at least those two are served; the rest may be refused.
    assert len(served) >= 2 and refused, statuses
    for reply in served:
        assert reply.json()["choices"][0]["finish_reason"] in ("stop", "length")
    for reply in refused:
        assert reply.headers["retry-after"] == "1"
        error = reply.json()["error"]
        assert error["type"] == "server_overloaded" and error["code"] == "queue_full"
    model = (("model", "gemma"),)
    after = server.metrics()
    rejected = ("superfluid_requests_rejected_total", model)
    assert after[rejected] - before.get(rejected, 0.0) == len(refused)
    assert after[("superfluid_queue_depth", model)] == 0
    assert after[("superfluid_queue_capacity", model)] == 2
    # And it serves normally afterwards.
    assert ask(server, "gemma")

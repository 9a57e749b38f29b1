"""The benchmark's fresh prompts: no server is sent a prompt twice, every server in a round the
same ones (a repeated prompt hands a server's prompt cache or n-gram pool the answer)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from bench import http_bench
from bench.http_bench import Side, measured_cells, parse_args
from bench.http_load import Request, Round
from bench.http_results import AUTO, LLAMA_SERVERS, PLAIN, RAW
from bench.http_workloads import (
    COPY_HEAVY,
    DEFAULT_WORKLOADS,
    LONG_PROMPT_TASKS,
    LONG_PROMPT_WORDS,
    MULTI_TURN,
    SOURCE_LINES,
    WORKLOADS,
    FreshPrompts,
    Workload,
    copy_heavy_prompt,
    open_ended_prompt,
    reference_documents,
    source_functions,
)
from bench.raw_loop import RawLoop


def test_documents_are_cut_to_the_word_range_and_are_all_different() -> None:
    documents = reference_documents()
    low, high = LONG_PROMPT_WORDS
    assert len(documents) >= 60
    assert all(low <= len(document.split()) <= high for document in documents)
    assert len(set(documents)) == len(documents)


def test_each_round_and_client_gets_its_own_prompt_and_asking_again_gives_the_same() -> None:
    fresh = FreshPrompts()
    keys = [(run, client) for run in (0, 1, 1000, 1500) for client in range(8)]
    texts = [fresh.variant(run, client).text for run, client in keys]
    assert len(set(texts)) == len(keys)
    assert [fresh.variant(run, client).text for run, client in keys] == texts


def test_the_first_prompts_use_every_document_once_then_another_task_leads() -> None:
    fresh = FreshPrompts()
    count = len(reference_documents())
    first = [fresh.variant(run, 0).text for run in range(count)]
    assert all(text.startswith(LONG_PROMPT_TASKS[0]) for text in first)
    assert {text.split("Document:\n\n", 1)[1] for text in first} == set(reference_documents())
    assert fresh.variant(count, 0).text.startswith(LONG_PROMPT_TASKS[1])


def fake_servers(monkeypatch: pytest.MonkeyPatch, one_round: Any) -> None:
    """Servers that answer every round with `one_round` and whose /metrics is empty."""
    monkeypatch.setattr(http_bench, "one_round", one_round)
    monkeypatch.setattr(http_bench, "scrape", lambda base: {})
    monkeypatch.setattr(http_bench, "cell_of", lambda *a: None)
    monkeypatch.setattr(http_bench, "log_cell", lambda cell: None)


def sides_of(*systems: str) -> list[Side]:
    return [Side(system, "http://x", None, Request(system, 0.0, 8)) for system in systems]  # type: ignore[arg-type]


def test_measured_cells_send_no_server_a_round_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, int, int]] = []  # (server, round, client)

    async def fake_round(client: Any, workload: Workload, request: Request, clients: int, run: int):
        sent.extend((request.model, run, index) for index in range(clients))
        return Round((), 1.0)

    fake_servers(monkeypatch, fake_round)
    monkeypatch.setattr(http_bench, "gate_settled", lambda samples, lanes: False)
    options = ["--runs", "3", "--min-requests", "0", "--warmup", "2", "--warmup-max", "2"]
    args = parse_args(["--llama-server", __file__, *options])
    systems = (AUTO, PLAIN, LLAMA_SERVERS[1])
    sides = sides_of(*systems)
    workload = Workload("fresh", chat=True, variants=(), fresh=FreshPrompts())
    for counts in ((1, 4), (2, 8)):  # two groups of cells, as two temperatures would be
        asyncio.run(measured_cells(args, sides, workload, counts))

    per_server = Counter(sent)
    assert max(per_server.values()) == 1, "a server was sent one (round, client) twice"
    # Every server is sent the same measured rounds (warm-ups go to drafting servers only).
    measured = {
        system: {(run, c) for s, run, c in sent if s == system and run % 1000 < 500}
        for system in systems
    }
    assert measured[AUTO] == measured[PLAIN] == measured[LLAMA_SERVERS[1]]
    assert len(measured[AUTO]) == 3 * (1 + 4 + 2 + 8)


def test_a_cell_runs_until_it_has_sent_the_minimum_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At one client a run is one prompt: `--min-requests` gives such a cell more runs, and
    leaves a cell whose runs already send that many alone."""
    runs: Counter[tuple[str, int]] = Counter()  # (system, clients) -> measured runs

    async def fake_round(client: Any, workload: Workload, request: Request, clients: int, run: int):
        if run % 1000 < 500:  # warm-ups are numbered from halfway
            runs[(request.model, clients)] += 1
        return Round((), 1.0)

    fake_servers(monkeypatch, fake_round)
    args = parse_args(
        ["--llama-server", __file__, "--runs", "2", "--min-requests", "6", "--warmup", "0"]
    )
    workload = Workload("fresh", chat=True, variants=(), fresh=FreshPrompts())
    asyncio.run(measured_cells(args, sides_of(PLAIN, AUTO), workload, (1, 2, 4, 8)))

    for system in (PLAIN, AUTO):
        assert [runs[(system, clients)] for clients in (1, 2, 4, 8)] == [6, 3, 2, 2]
    assert parse_args(["--llama-server", __file__]).min_requests == 16
    assert parse_args(["--llama-server", __file__, "--quick"]).min_requests == 0


def test_the_raw_loop_joins_the_one_client_runs_on_the_servers_prompts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`off / raw loop` pairs runs seconds apart on the same prompt: the raw loop takes its turn
    in every 1-client run (last when the servers walk forwards, first when backwards), and in
    no other cell."""
    order: list[tuple[str, int, int]] = []  # (system, clients, round)

    async def fake_round(client: Any, workload: Workload, request: Request, clients: int, run: int):
        order.append((request.model, clients, run))
        return Round((), 1.0)

    def fake_raw_round(loop: Any, workload: Workload, run: int, max_tokens: int) -> Round:
        order.append((RAW, 1, run))
        return Round((), 1.0)

    fake_servers(monkeypatch, fake_round)
    monkeypatch.setattr(http_bench, "raw_round", fake_raw_round)
    args = parse_args(
        ["--llama-server", __file__, "--runs", "3", "--min-requests", "0", "--warmup", "0"]
    )
    sides = sides_of(PLAIN, AUTO)
    workload = Workload("fresh", chat=True, variants=(), fresh=FreshPrompts())
    loop = RawLoop.__new__(RawLoop)  # never loaded: its rounds are faked
    cells = asyncio.run(measured_cells(args, sides, workload, (1, 4), loop))

    one_client = [entry for entry in order if entry[1] == 1]
    rounds = sorted({run for _, _, run in one_client})
    assert [system for system, _, _ in one_client] == [
        PLAIN,
        AUTO,
        RAW,
        RAW,
        AUTO,
        PLAIN,
        PLAIN,
        AUTO,
        RAW,
    ]
    assert all(
        {run for system, _, run in one_client if system == who} == set(rounds)
        for who in (PLAIN, AUTO, RAW)
    )
    assert all(system != RAW for system, clients, _ in order if clients == 4)
    assert [cell.system for cell in cells if cell is not None] == [RAW]


def test_copy_heavy_prompts_are_standard_library_functions_each_with_an_edit() -> None:
    functions = source_functions()
    assert len(functions) >= 500
    low, high = SOURCE_LINES
    assert all(low <= len(f.code.splitlines()) <= high for f in functions)
    texts = [copy_heavy_prompt(n).text for n in range(len(functions))]
    assert len(set(texts)) == len(texts)
    for n in (0, 1, 2, 3):
        function, text = functions[n], texts[n]
        assert function.code in text
        renamed = function.parameter if n % 2 and function.parameter else function.name
        assert (
            f"Rename the {'parameter' if renamed != function.name else 'function'} `{renamed}`"
            in text
        )
    # Neighbouring prompts (one round's clients) come from different modules.
    modules = [f.where.split(":")[0] for f in functions[:8]]
    assert len(set(modules)) == 8


def test_open_ended_openings_are_all_different() -> None:
    openings = [open_ended_prompt(n).text for n in range(2016)]
    assert len(set(openings)) == 2016


def test_every_measured_workload_is_fresh_and_the_repeated_cell_says_so_in_its_name() -> None:
    for name in DEFAULT_WORKLOADS:
        workload = WORKLOADS[name]
        assert (workload.fresh is not None) == ("repeated" not in name), name
    assert "copy-heavy repeated" in DEFAULT_WORKLOADS


def test_servers_keep_their_prompt_caches_on_fresh_prompts_and_off_on_repeated_ones() -> None:
    """Fresh prompts share only the chat template's first tokens, so both servers run as a user
    gets them; a repeated cell would hand a prompt cache what no user hands it."""
    from pathlib import Path

    from bench.http_bench import request_for, server_for

    args = parse_args(["--llama-server", __file__])
    for name, workload in WORKLOADS.items():
        # A session's first line is tagged with its round and client: sessions never repeat.
        fresh = "repeated" not in name or workload.multi_turn
        for system in (AUTO, PLAIN):
            spec = server_for(args, system, Path("m.gguf"), "g", 4, workload)
            assert ("--no-prefix-reuse" in spec.argv) != fresh, (name, system)
        peer = server_for(args, LLAMA_SERVERS[1], Path("m.gguf"), "g", 4, workload)
        request = request_for(args, peer, 0.0, workload)
        assert request.extra["cache_prompt"] is fresh, name


def test_a_fresh_multi_turn_session_has_three_follow_ups_and_a_tagged_first_line() -> None:
    assert MULTI_TURN.multi_turn and not COPY_HEAVY.multi_turn
    first, second = MULTI_TURN.variant(0, 7), MULTI_TURN.variant(1, 7)
    assert len(first.follow_ups) == 3 and first.text != second.text
    assert MULTI_TURN.first_line(first, 7, 0).startswith("Session 7.0: ")


def test_the_generated_benchmark_report_says_what_the_report_generator_says() -> None:
    """The HTTP bench's main report (its default `--out`) is generated; its fixed method text
    must be the generator's (a report edited by hand, or a generator changed without
    regenerating, fails here)."""
    from pathlib import Path

    from bench.http_bench import DEFAULT_OUT
    from bench.http_report import Settings, method

    report = Path(__file__).parents[2] / DEFAULT_OUT / "README.md"
    text = " ".join(report.read_text().split())
    # The committed report was run interleaved, llama-server beside superfluid's pair and the
    # raw loop in its 1-client runs.
    settings = Settings.__new__(Settings)
    object.__setattr__(settings, "interleaved", True)
    object.__setattr__(settings, "peers_interleaved", True)
    object.__setattr__(settings, "raw_interleaved", True)
    for line in method(settings):
        assert " ".join(line.split()) in text, line[:80]

"""The peer and the ceiling benches: the oracle drafter on the fake runtime, the harness's
system selection, and (where `bench/build_llama_server.sh` has built it) llama.cpp's server
answering the harness with the prompt superfluid renders."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from bench import http_bench
from bench.http_bench import LLAMA_SERVER_EXTRA, parse_args, peers_beside
from bench.http_load import Request, client_for, one_round
from bench.http_results import AUTO, LLAMA_SERVERS, PLAIN, is_llama_server
from bench.http_servers import llama_server_binary, llama_server_spec, running
from bench.http_workloads import COPY_HEAVY, MULTI_TURN
from bench.oracle_ceiling import (
    Cell,
    ClairvoyantLookupDrafter,
    FixedDepth,
    OracleDrafter,
    OracleState,
    RoundFigures,
    lookup_table,
    run_round,
)
from bench.raw_loop import RawLoop

from superfluid.application.executor import Executor
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from tests.fakes import FakeModel, FakeRuntime

# -- the oracle -------------------------------------------------------------------------------


def test_the_oracle_drafts_the_known_continuation_and_stops_off_it():
    state = OracleState([5, 6, 7, 8, 9])
    assert state.propose(3) == [5, 6, 7]
    state.commit([5, 6])
    assert state.propose(8) == [7, 8, 9]
    state.commit([7, 4])  # the lane left the known path
    assert state.propose(3) == []
    assert OracleDrafter({}).open([1, 2], seq=0).propose(4) == []


def test_the_oracle_is_accepted_whole_and_changes_no_output():
    runtime = FakeRuntime(FakeModel(eos=False), max_verify_rows=16)
    prompts = [[3, 4, 5, 6], [7, 8, 9]]
    plain = run_round(Executor(runtime, max_lanes=2, clock=time.perf_counter), prompts, 40)
    plain_steps = len(runtime.steps)
    assert [len(o) for o in plain.outputs] == [40, 40] and plain.proposed == 0
    oracle = Executor(
        runtime,
        max_lanes=2,
        clock=time.perf_counter,
        drafter=OracleDrafter({tuple(p): o for p, o in zip(prompts, plain.outputs, strict=True)}),
        policy=FixedDepth(7),
    )
    figures = run_round(oracle, prompts, 40)
    assert figures.outputs == plain.outputs
    assert figures.proposed > 0 and figures.accepted == figures.proposed
    # 7 drafts + 1 per step: 40 tokens in far fewer steps than plain's one per step.
    assert len(runtime.steps) - plain_steps < plain_steps / 3
    assert figures.decode_tokens < figures.tokens and figures.decode_wall <= figures.wall


def _runs(rate: float) -> list[RoundFigures]:
    return [RoundFigures(((1,),), 1.0, int(rate), 1.0, 0, 0)]


def test_prompt_lookups_own_ceiling_is_its_best_fixed_depth():
    cell = Cell("copy-heavy", 4, _runs(100.0), _runs(135.0), {15: _runs(180.0)}, "speculate")
    assert lookup_table([cell]) == []  # no fixed prompt-lookup depth measured
    cell.lookup = {3: _runs(120.0), 7: _runs(150.0), 15: _runs(140.0)}
    assert cell.best_lookup_depth == 7
    table = lookup_table([cell])
    assert (
        "| copy-heavy | 4 | d3 120.0, d7 150.0, d15 140.0 | 83% (d7) | 90% | – | – | – |" in table
    )
    cell.bound = {15: _runs(160.0), 63: _runs(170.0)}
    assert cell.best_bound_depth == 63
    row = "| copy-heavy | 4 | d3 120.0, d7 150.0, d15 140.0 | 83% (d7) | 90% | d15 160.0, d63 170.0 | 94% (d63) | 79% |"
    assert row in lookup_table([cell])


def test_the_clairvoyant_length_drafts_only_what_is_accepted():
    # The prompt repeats 1 2 3 4 5, so prompt-lookup drafts 4 5 1 2 after "1 2 3"; the known
    # continuation agrees on 4 5 only: the draft is cut there, and nothing is drafted where
    # prompt-lookup's first token is already wrong.
    drafter = ClairvoyantLookupDrafter({(1, 2, 3, 4, 5, 1, 2, 3): (4, 5, 9, 9, 9)})
    state = drafter.open([1, 2, 3, 4, 5, 1, 2, 3], seq=0)
    assert state.propose(4) == [4, 5]
    state.commit([4, 5, 9])  # history now ends 5 9: no earlier "5 9" nor "9"-ending trigram
    assert state.propose(4) == []
    assert drafter.open([7, 7], seq=0).propose(3) == []  # an unknown prompt drafts nothing


def test_the_clairvoyant_length_is_accepted_whole_and_changes_no_output():
    # A small vocabulary makes the fake model's replies repeat, so prompt-lookup drafts often;
    # the prompts' own repeats are not what the model continues, so some drafts are wrong.
    runtime = FakeRuntime(FakeModel(vocab=12, eos=False), max_verify_rows=16)
    prompts = [[3, 4, 5, 6, 3, 4, 5, 6, 3, 4], [7, 8, 9, 7, 8]]

    def executor(drafter=None) -> Executor:
        policy = FixedDepth(7) if drafter is not None else None
        return Executor(
            runtime, max_lanes=2, clock=time.perf_counter, drafter=drafter, policy=policy
        )

    plain = run_round(executor(), prompts, 30)
    lookup = run_round(executor(PromptLookupDrafter()), prompts, 30)
    assert lookup.accepted < lookup.proposed  # uncut, prompt-lookup's drafts miss here
    known = {tuple(p): o for p, o in zip(prompts, plain.outputs, strict=True)}
    clairvoyant = run_round(executor(ClairvoyantLookupDrafter(known)), prompts, 30)
    assert clairvoyant.outputs == plain.outputs
    assert 0 < clairvoyant.accepted == clairvoyant.proposed


# -- the harness ------------------------------------------------------------------------------


def test_systems_take_a_prefix_and_a_missing_llama_server_is_refused(tmp_path: Path):
    args = parse_args(["--systems", "superfluid auto,superfluid off", "--quick"])
    assert args.systems == ("superfluid auto", "superfluid off")
    assert args.session_clients == (1,)
    with pytest.raises(SystemExit):
        parse_args(["--systems", "llama-server*", "--llama-server", str(tmp_path / "absent")])
    binary = tmp_path / "llama-server"
    binary.write_text("")
    args = parse_args(["--systems", "llama-server*", "--llama-server", str(binary)])
    assert args.systems == LLAMA_SERVERS and all(is_llama_server(s) for s in args.systems)


def test_a_multi_turn_session_tags_its_first_line_only():
    variant = MULTI_TURN.variant(1, 2)
    assert MULTI_TURN.first_line(variant, 2, 1).startswith("Session 2.1: ")
    assert len(variant.follow_ups) == 3
    assert COPY_HEAVY.first_line(variant, 2, 1) == variant.text


def test_llama_server_runs_beside_superfluid_at_the_counts_both_are_measured_at():
    args = parse_args(["--systems", "superfluid*,llama-server*", "--llama-server", __file__])
    peers = list(LLAMA_SERVERS)
    beside = peers_beside(args, peers, 0.0, COPY_HEAVY, (1, 2, 4, 8))
    assert beside == {clients: tuple(peers) for clients in (1, 2, 4, 8)}
    args = parse_args(["--llama-server-clients", "1,4", "--llama-server", __file__])
    beside = peers_beside(args, peers[:2], 0.0, COPY_HEAVY, (1, 2, 4, 8))
    assert beside == {1: tuple(peers[:2]), 2: (), 4: tuple(peers[:2]), 8: ()}
    # Multi-turn runs at the session client counts, for every system alike.
    args = parse_args(["--session-clients", "1,4", "--llama-server", __file__])
    assert peers_beside(args, peers[:1], 0.0, MULTI_TURN, (1, 4)) == {
        1: (peers[0],),
        4: (peers[0],),
    }


def test_peers_start_per_client_count_beside_the_pair_and_share_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    events: list[tuple[str, ...]] = []

    @contextlib.contextmanager
    def fake_running(spec, log_path, **_):
        slots = spec.argv[spec.argv.index("-np") + 1] if "-np" in spec.argv else "-"
        events.append(("start", spec.system, slots))
        yield f"http://{spec.system.replace(' ', '-')}-{slots}"
        events.append(("stop", spec.system, slots))

    async def fake_group_cells(args, servers, workload, temperature, counts, primed=None, raw=None):
        events.append(("measure", *sorted(spec.system for spec, _ in servers), str(counts)))
        return []

    monkeypatch.setattr(http_bench, "running", fake_running)
    monkeypatch.setattr(http_bench, "group_cells", fake_group_cells)
    args = parse_args(["--llama-server", __file__, "--log-dir", str(tmp_path)])
    plain, spec_default = LLAMA_SERVERS[0], LLAMA_SERVERS[1]
    beside = {1: (plain, spec_default), 4: (plain,)}
    systems = [PLAIN, AUTO]
    http_bench.served_cells(
        args, tmp_path / "m.gguf", systems, COPY_HEAVY, 0.0, {}, (1, 4), beside=beside
    )
    pair = sorted(systems)
    assert events == [
        ("start", PLAIN, "-"),
        ("start", AUTO, "-"),
        ("start", plain, "1"),
        ("start", spec_default, "1"),
        ("measure", *sorted([*pair, plain, spec_default]), "(1,)"),
        ("stop", spec_default, "1"),
        ("stop", plain, "1"),
        ("start", plain, "4"),
        ("measure", *sorted([*pair, plain]), "(4,)"),
        ("stop", plain, "4"),
        ("stop", AUTO, "-"),
        ("stop", PLAIN, "-"),
    ]


# -- llama-server, where it is built -----------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server() -> Path:
    binary = llama_server_binary()
    if not binary.is_file():
        pytest.skip(f"llama-server is not built ({binary}): sh bench/build_llama_server.sh")
    return binary


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_llama_server_sees_the_prompt_superfluid_renders_and_streams_counts(
    llama_server: Path, demo_gguf: Path, tmp_path: Path
):
    from llama_cpp import Llama

    vocab = Llama(str(demo_gguf), vocab_only=True, verbose=False)
    variant = COPY_HEAVY.variant(0, 0)
    expected = len(vocab.tokenize(COPY_HEAVY.raw_prompt(variant).encode(), special=True))
    spec = llama_server_spec(
        "llama-server ngram-simple n3 m8",
        llama_server,
        demo_gguf,
        slots=1,
        ctx_size=2048,
        threads=2,
    )
    with running(spec, tmp_path / "llama-server.log") as base:

        async def go():
            client = client_for(base, 1)
            try:
                request = Request(
                    spec.model_name,
                    0.0,
                    24,
                    dict(LLAMA_SERVER_EXTRA),
                    stream_options={"include_usage": True},
                )
                return await one_round(client, COPY_HEAVY, request, 1, 0)
            finally:
                await client.close()

        round_ = asyncio.run(go())
    (reply,) = round_.replies
    assert reply.prompt_tokens == expected
    assert reply.tokens == 24
    assert reply.ttft is not None and reply.decode_tokens is not None
    assert round_.decode_tokens is not None and round_.decode_tokens > 0
    assert reply.proposed >= reply.accepted >= 0


@pytest.mark.slow
def test_the_peers_and_the_raw_loop_render_the_model_s_own_chat_template(
    demo_gguf: Path, instruct_gguf: Path
):
    # SmolLM2 carries a ChatML template, which llama-server renders with --jinja; the demo GGUF
    # carries none, and Gemma's built-in turn is what superfluid renders for it.
    def argv(model: Path) -> list[str]:
        spec = llama_server_spec(
            "llama-server", Path("llama-server"), model, slots=1, ctx_size=512, threads=2
        )
        return spec.command(8000)

    assert "--jinja" in argv(instruct_gguf)
    assert "--no-jinja" not in argv(instruct_gguf)
    demo = argv(demo_gguf)
    assert demo[demo.index("--chat-template") + 1] == "gemma"
    # RawLoop loads with whatever switches the process has, and llama.cpp reads some of them at
    # a model's first load; this process serves models in other tests, so it sets the served ones.
    from superfluid.adapters.llamacpp.kernels import apply_process_switches, served_kernels
    from superfluid.adapters.llamacpp.native import llama

    apply_process_switches(llama(), served_kernels(llama()))
    for model, expected in (
        (demo_gguf, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
        (instruct_gguf, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    ):
        loop = RawLoop(model, ctx_size=256, threads=1)
        try:
            turn = loop.chat_turn("Hi")
        finally:
            loop.close()
        assert turn.endswith(expected), turn

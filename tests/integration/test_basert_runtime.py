"""The basert runtime on its reference backend, with the fixture bundles written once per session.

The promises checked here are the ones speculative decoding stands on: a logits row does not
depend on what else shares its step (bit for bit), a cut KV is the KV before the cut, and so the
executor's speculative output is the plain output token for token, with prompt-lookup and with
a draft model, at one to three lanes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from superfluid.adapters.basert.drafters.draft_model import DraftModelDrafter
from superfluid.adapters.basert.layers import linear, rms_norm
from superfluid.adapters.basert.runtime import BaseRTRuntime, engine_note
from superfluid.adapters.bundle_files import read_header
from superfluid.adapters.fixtures.basert import (
    CORPUS,
    make_fixtures,
    train_tokenizer,
    write_model_bundle,
)
from superfluid.application.events import Finish
from superfluid.application.executor import Executor
from superfluid.application.ports import (
    Drafter,
    EngineRefusal,
    Feed,
    Logits,
    RuntimeFault,
    SampledDraftState,
)
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from superfluid.domain.strategies import Strategy

GREEDY = SamplingParams(temperature=0.0)
TEXTS = [
    "The quick brown fox",
    "def count_lines(path):\n",
    "Once upon a time there was",
    "Here is a list of colors: red, green,",
    "The server starts, loads the model, and",
    "for i in range(10):\n    if i % 2 == 0:",
]
CHAT = [{"role": "user", "content": "Please write a short summary of the text."}]


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_fixtures(tmp_path_factory.mktemp("basert"))


@pytest.fixture
def runtime(bundles: dict[str, Path]) -> BaseRTRuntime:
    return BaseRTRuntime.load(bundles["target"], ctx_size=512, max_sequences=4)


def prompt(runtime: BaseRTRuntime, text: str) -> list[int]:
    return runtime.tokenize(text, add_special=True)


def prefilled(runtime: BaseRTRuntime, tokens: Sequence[int]) -> int:
    seq = runtime.new_sequence()
    runtime.step([Feed(seq, tokens, 0)])
    return seq


def one_at_a_time(runtime: BaseRTRuntime, seq: int, tokens: Sequence[int]) -> Logits:
    start = runtime.length(seq)
    rows = [runtime.step([Feed(seq, [t], start + i)])[0][0] for i, t in enumerate(tokens)]
    return np.stack(rows)


# -- files, loading, tokenizer ---------------------------------------------------------------


def test_the_fixtures_are_written_in_seconds_and_the_same_bytes_every_time(
    bundles: dict[str, Path], tmp_path: Path
) -> None:
    started = time.perf_counter()
    again = make_fixtures(tmp_path)
    assert time.perf_counter() - started < 10  # the head drafters are fitted in here too
    for role, path in bundles.items():
        assert again[role].read_bytes() == path.read_bytes(), role
    target, draft = read_header(bundles["target"]), read_header(bundles["draft"])
    assert (target.arch, target.quantisation, target.num_hidden_layers) == ("qwen3", "f32", 4)
    assert draft.num_hidden_layers == 1 and draft.vocab_size == target.vocab_size
    assert target.raw["source"] == {"filename": "Tiny-Qwen3-64-F32"}


def test_loading_says_once_that_the_reference_backend_runs_the_bundle(
    bundles: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="superfluid")
    BaseRTRuntime.load(bundles["target"], ctx_size=64, max_sequences=1)
    lines = [r.getMessage() for r in caplog.records if r.name == "superfluid"]
    assert lines == [f"basert: {engine_note(str(bundles['target']))}"]
    assert "reference backend (numpy)" in lines[0]


def test_a_dense_bundle_verifies_rows_and_batches_and_cuts_anywhere(
    runtime: BaseRTRuntime,
) -> None:
    caps = runtime.capabilities
    assert (caps.runtime, caps.verify_rows, caps.verify_batches) == ("basert", True, True)
    assert caps.cut_refusal is None and caps.truncate_partial
    # Every strategy but mtp-head, which needs a head inside the bundle (test_basert_heads.py).
    assert caps.strategies == ("prompt-lookup", "draft-model", "eagle3", "dflash", "dspark")
    assert (caps.max_verify_rows, caps.context_size, caps.max_sequences) == (16, 512, 4)
    ends = {runtime.tokenizer.token_id("<|im_end|>"), runtime.tokenizer.token_id("<|endoftext|>")}
    assert caps.eos_tokens == ends


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog.",
        "def f(x):\n    return x + 1\n",
        "naïve café — 日本語 😀 ünïcödé",
        "  spaces  and\ttabs\n\n",
    ],
)
def test_text_survives_a_round_trip_and_any_split_of_its_tokens(
    runtime: BaseRTRuntime, text: str
) -> None:
    tokens = runtime.tokenize(text, add_special=False)
    whole = runtime.detokenize(tokens)
    assert whole == text.encode("utf-8")
    for cut in range(len(tokens) + 1):
        assert runtime.detokenize(tokens[:cut]) + runtime.detokenize(tokens[cut:]) == whole


def test_chat_prompts_use_chatml_turn_markers_that_tokenize_as_special_tokens(
    runtime: BaseRTRuntime,
) -> None:
    text = runtime.chat_prompt(CHAT)
    assert text == (
        "<|im_start|>user\nPlease write a short summary of the text.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    tokens = runtime.tokenize(text, add_special=True)
    start, end = (runtime.tokenizer.token_id(t) for t in ("<|im_start|>", "<|im_end|>"))
    assert tokens.count(start) == 2 and tokens.count(end) == 1
    # Special tokens render as nothing, like llama.cpp's pieces without its special flag.
    assert runtime.detokenize(tokens) == text.replace("<|im_start|>", "").replace(
        "<|im_end|>", ""
    ).encode("utf-8")


# -- batch invariance, cuts, taps ------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7, 8, 11, 13, 16])
def test_rows_are_bit_identical_however_many_tokens_and_lanes_share_the_step(
    runtime: BaseRTRuntime, count: int
) -> None:
    head = prompt(runtime, TEXTS[0])
    continuation = runtime.tokenize(
        " jumps over the lazy dog. The lazy dog sleeps in the sun, and", add_special=False
    )
    assert len(continuation) >= 16
    tokens = continuation[:count]
    seq = prefilled(runtime, head)
    alone = one_at_a_time(runtime, seq, tokens)
    runtime.cut(seq, len(head))
    # The same tokens in one feed, beside a lane decoding one token and a lane prefilling.
    other_prompt, third_prompt = prompt(runtime, TEXTS[1]), prompt(runtime, TEXTS[2])
    other = prefilled(runtime, other_prompt[:-1])
    third = runtime.new_sequence()
    rows = runtime.step(
        [
            Feed(other, other_prompt[-1:], len(other_prompt) - 1),
            Feed(seq, tokens, len(head), all_rows=True),
            Feed(third, third_prompt, 0),
        ]
    )
    assert np.array_equal(rows[1], alone)
    assert rows[1].shape == (count, runtime.model.config.vocab_size)
    assert rows[1].dtype == np.float32
    # The neighbours got exactly what they would have got alone, too.
    lone = runtime.new_sequence()
    assert np.array_equal(runtime.step([Feed(lone, third_prompt, 0)])[0], rows[2])
    runtime.cut(other, len(other_prompt) - 1)
    assert np.array_equal(
        runtime.step([Feed(other, other_prompt[-1:], len(other_prompt) - 1)])[0], rows[0]
    )


def test_a_prompt_fed_in_chunks_leaves_the_kv_it_leaves_when_fed_whole(
    runtime: BaseRTRuntime,
) -> None:
    tokens = prompt(runtime, CORPUS[:400])
    whole = prefilled(runtime, tokens)
    chunked = runtime.new_sequence()
    for start in range(0, len(tokens), 37):
        last = runtime.step([Feed(chunked, tokens[start : start + 37], start)])[0]
    probe = runtime.tokenize(" the town", add_special=False)
    a = runtime.step([Feed(whole, probe, len(tokens), all_rows=True)])[0]
    b = runtime.step([Feed(chunked, probe, len(tokens), all_rows=True)])[0]
    assert np.array_equal(a, b)
    assert last.shape[0] == 1


def test_cutting_back_and_feeding_again_gives_the_rows_of_before(runtime: BaseRTRuntime) -> None:
    head = prompt(runtime, TEXTS[3])
    seq = prefilled(runtime, head)
    tail = runtime.tokenize(" blue, yellow, black, white.", add_special=False)
    before = runtime.step([Feed(seq, tail, len(head), all_rows=True)])[0]
    runtime.cut(seq, len(head) + 2)
    assert runtime.length(seq) == len(head) + 2
    # A rejected draft in between changes nothing once it is cut off.
    runtime.step([Feed(seq, [5, 6, 7], len(head) + 2, all_rows=True)])
    runtime.cut(seq, len(head) + 2)
    again = runtime.step([Feed(seq, tail[2:], len(head) + 2, all_rows=True)])[0]
    assert np.array_equal(again, before[2:])
    runtime.cut(seq, 0)
    assert np.array_equal(
        runtime.step([Feed(seq, head + tail, 0, all_rows=True)])[0][len(head) :], before
    )


def test_hidden_state_taps_are_the_residual_stream_and_batch_invariant(
    runtime: BaseRTRuntime,
) -> None:
    model = runtime.model
    layers = model.config.num_layers
    head = prompt(runtime, TEXTS[4])
    seq = runtime.new_sequence()
    logits, hidden = runtime.forward([Feed(seq, head, 0, all_rows=True)], taps=[0, 2, layers])
    (taps,) = hidden
    assert sorted(taps) == [0, 2, layers]
    assert all(rows.shape == (len(head), model.config.hidden_size) for rows in taps.values())
    assert np.array_equal(taps[0], model._embed[head])
    final = linear(rms_norm(taps[layers], model._norm, model.config.rms_norm_eps), model._head)
    assert np.array_equal(final, logits[0])
    other = runtime.new_sequence()
    for i, token in enumerate(head):
        _, (single,) = runtime.forward([Feed(other, [token], i)], taps=[2])
        assert np.array_equal(single[2][0], taps[2][i])


def test_broken_promises_fail_the_step_and_change_nothing(runtime: BaseRTRuntime) -> None:
    seq = prefilled(runtime, [10, 11, 12])
    with pytest.raises(RuntimeFault, match="starts at 2, but it holds 3 positions"):
        runtime.step([Feed(seq, [1], 2)])
    with pytest.raises(RuntimeFault, match="fed twice in one step"):
        runtime.step([Feed(seq, [1], 3), Feed(seq, [2], 3)])
    with pytest.raises(RuntimeFault, match="outside the vocabulary"):
        runtime.step([Feed(seq, [runtime.model.config.vocab_size], 3)])
    with pytest.raises(RuntimeFault, match="would pass the context size"):
        runtime.step([Feed(seq, [1] * 510, 3)])
    with pytest.raises(RuntimeFault, match="cannot cut sequence"):
        runtime.cut(seq, 4)
    assert runtime.length(seq) == 3
    for _ in range(3):
        runtime.new_sequence()
    with pytest.raises(RuntimeFault, match="all 4 sequences"):
        runtime.new_sequence()
    runtime.free_sequence(seq)
    with pytest.raises(RuntimeFault, match="not in use"):
        runtime.free_sequence(seq)
    assert runtime.new_sequence() == seq and runtime.length(seq) == 0


# -- through the executor ----------------------------------------------------------------------


def run(
    runtime: BaseRTRuntime,
    prompts: Sequence[Sequence[int]],
    *,
    drafter: Drafter | None,
    lanes: int,
    params: SamplingParams = GREEDY,
    max_tokens: int = 48,
) -> tuple[list[list[int]], float, float]:
    """Outputs per prompt, acceptance (accepted / proposed) and tokens per second."""
    policy = (
        SpecPolicy(
            SpecSettings(throughput_gate=False, min_yield=0.0), default_depth=4, depth_cap=15
        )
        if drafter is not None
        else None
    )
    executor = Executor(
        runtime, max_lanes=lanes, clock=time.perf_counter, drafter=drafter, policy=policy
    )
    requests = [GenerationRequest(list(p), params, max_tokens) for p in prompts]
    for request in requests:
        executor.submit(request)
    out: dict[int, list[int]] = {r.id: [] for r in requests}
    proposed = accepted = 0
    started = time.perf_counter()
    while not executor.idle:
        for event in executor.tick():
            out[event.request_id].extend(event.tokens)
            if event.finish is not None:
                assert event.finish in (Finish.STOP, Finish.LENGTH), event.error
                proposed += event.spec.proposed
                accepted += event.spec.accepted
    seconds = time.perf_counter() - started
    executor.release_parked()
    assert runtime.open_sequences == 0, "a sequence leaked"
    produced = sum(len(tokens) for tokens in out.values())
    return [out[r.id] for r in requests], accepted / max(proposed, 1), produced / seconds


def workload(runtime: BaseRTRuntime) -> list[list[int]]:
    return [prompt(runtime, text) for text in TEXTS] + [prompt(runtime, runtime.chat_prompt(CHAT))]


@pytest.mark.parametrize("lanes", [1, 2, 3])
def test_speculative_greedy_output_is_plain_greedy_output_with_either_drafter(
    runtime: BaseRTRuntime, bundles: dict[str, Path], lanes: int
) -> None:
    prompts = workload(runtime)
    plain, _, _ = run(runtime, prompts, drafter=None, lanes=lanes)
    looked_up, lookup_rate, _ = run(runtime, prompts, drafter=PromptLookupDrafter(), lanes=lanes)
    drafter = runtime.drafter(Strategy("draft-model"), bundles["draft"])
    drafted, draft_rate, _ = run(runtime, prompts, drafter=drafter, lanes=lanes)
    assert looked_up == plain
    assert drafted == plain
    assert lookup_rate > 0 and draft_rate > 0
    assert any(len(set(tokens)) > 8 for tokens in plain), "the fixture model only repeats itself"


def test_a_sampling_lane_drafts_from_the_draft_models_distribution(
    runtime: BaseRTRuntime, bundles: dict[str, Path]
) -> None:
    """Sampled drafts are verified by rejection sampling: drafts are accepted, the output stays
    in the vocabulary and within max_tokens (its distribution is tested in test_basert_heads;
    with adaptive depth the seeded text depends on the depths timing chose, so it is not
    compared with a second run here)."""
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=7)
    prompts = workload(runtime)[:4]
    drafter = DraftModelDrafter.load(bundles["draft"], target=runtime)
    assert isinstance(drafter.open(prompts[0], seq=0), SampledDraftState)
    drafted, rate, _ = run(runtime, prompts, drafter=drafter, lanes=2, params=params)
    assert rate > 0
    vocab = runtime.model.config.vocab_size
    assert all(0 <= t < vocab for tokens in drafted for t in tokens)
    assert all(0 < len(tokens) <= 48 for tokens in drafted)


def test_the_fixture_draft_model_accepts_at_least_thirty_percent_greedily(
    runtime: BaseRTRuntime, bundles: dict[str, Path]
) -> None:
    prompts = workload(runtime)
    _, _, plain_speed = run(runtime, prompts, drafter=None, lanes=1)
    drafter = DraftModelDrafter.load(bundles["draft"], target=runtime)
    _, rate, speed = run(runtime, prompts, drafter=drafter, lanes=1)
    _, lookup_rate, lookup_speed = run(runtime, prompts, drafter=PromptLookupDrafter(), lanes=1)
    print(
        f"\nbasert reference backend, fixture workload, 1 lane, greedy: plain {plain_speed:.0f} tok/s;"
        f" draft-model acceptance {rate:.0%} at {speed:.0f} tok/s;"
        f" prompt-lookup acceptance {lookup_rate:.0%} at {lookup_speed:.0f} tok/s"
    )
    assert rate >= 0.30


# -- the draft model drafter -------------------------------------------------------------------


def test_a_draft_lane_proposes_what_a_fresh_one_proposes_after_any_commits(
    runtime: BaseRTRuntime, bundles: dict[str, Path]
) -> None:
    drafter = DraftModelDrafter.load(bundles["draft"], target=runtime)
    history = prompt(runtime, TEXTS[5])
    lane = drafter.open(history, seq=0)
    rng = np.random.default_rng(3)
    for round_ in range(12):
        k = int(rng.integers(1, 6))
        draft = lane.propose(k)
        assert draft == drafter.open(history, seq=0).propose(k)
        assert lane.propose(k) == draft, "proposing again without a commit changed the draft"
        # Commit an accepted prefix and a correction, or (now and then) nothing drafted at all.
        kept = int(rng.integers(0, len(draft) + 1))
        committed = [*draft[:kept], int(rng.integers(3, 500))]
        if round_ % 4 == 3:
            committed = [int(rng.integers(3, 500)) for _ in range(3)]
        lane.commit(committed)
        history += committed


def test_the_runtime_builds_drafters_and_refuses_what_it_cannot_run(
    runtime: BaseRTRuntime, bundles: dict[str, Path]
) -> None:
    assert isinstance(runtime.drafter(Strategy("prompt-lookup"), None), PromptLookupDrafter)
    assert runtime.drafter(Strategy("draft-model"), bundles["draft"]).strategy == "draft-model"
    with pytest.raises(EngineRefusal, match="is a qwen3 bundle, not dflash"):
        runtime.drafter(Strategy("dflash"), bundles["draft"])
    with pytest.raises(EngineRefusal, match="no such file"):
        runtime.drafter(Strategy("draft-model"), bundles["draft"].with_name("absent.base"))


def test_a_draft_model_with_another_vocabulary_or_tokenizer_or_recurrent_state_is_refused(
    runtime: BaseRTRuntime, tmp_path: Path
) -> None:
    config = dict(read_header(runtime.path).raw["config"])
    tokenizer_json = train_tokenizer().to_str()
    other_json = train_tokenizer(corpus=CORPUS.upper()).to_str()
    cases = [
        (
            "small.base",
            "qwen3",
            {**config, "vocab_size": 300},
            tokenizer_json,
            r"has a vocabulary of 300 tokens and the target 512; a draft model must share the target's tokenizer",
        ),
        (
            "other.base",
            "qwen3",
            config,
            other_json,
            r"other.base's tokenizer is not the target's \(token .* is .* in the draft and .* in the target\)",
        ),
        (
            "mamba.base",
            "mamba",
            config,
            tokenizer_json,
            r"keeps recurrent state, which cannot be cut back",
        ),
    ]
    for name, arch, cfg, tok, message in cases:
        path = tmp_path / name
        write_model_bundle(path, arch=arch, config=cfg, tensors={}, tokenizer_json=tok)
        with pytest.raises(EngineRefusal, match=message):
            DraftModelDrafter.load(path, target=runtime)


def test_bf16_and_f16_bundles_run_close_to_the_f32_one(
    runtime: BaseRTRuntime, bundles: dict[str, Path], tmp_path: Path
) -> None:
    from superfluid.adapters.basert.bundle import Bundle

    with Bundle.open(bundles["target"]) as bundle:
        tensors = {name: bundle.tensor(name) for name in bundle.names()}
        raw = bundle.header.raw
    head = prompt(runtime, TEXTS[0])
    reference = runtime.step([Feed(runtime.new_sequence(), head, 0)])[0]
    for dtype in ("bf16", "f16"):
        path = tmp_path / f"tiny-{dtype}.base"
        write_model_bundle(
            path,
            arch="qwen3",
            config=raw["config"],
            tensors=tensors,
            tokenizer_json=raw["tokenizer"]["tokenizer_json"],
            dtype=dtype,
        )
        assert read_header(path).quantisation == dtype
        other = BaseRTRuntime.load(path, ctx_size=64, max_sequences=1)
        rows = other.step([Feed(other.new_sequence(), head, 0)])[0]
        assert np.abs(rows - reference).max() < 0.1 * np.abs(reference).max()


@pytest.mark.parametrize("layout", ["llama-tied", "qwen2-biases", "k-norm-only"])
def test_other_layouts_run_and_stay_batch_invariant(
    runtime: BaseRTRuntime, bundles: dict[str, Path], tmp_path: Path, layout: str
) -> None:
    from superfluid.adapters.basert.bundle import Bundle

    with Bundle.open(bundles["target"]) as bundle:
        tensors = {name: bundle.tensor(name) for name in bundle.names()}
        raw = bundle.header.raw
    config = dict(raw["config"])
    rng = np.random.default_rng(0)
    arch = "qwen3"
    if layout == "llama-tied":
        arch, config["tie_word_embeddings"] = "llama", True
        tensors = {
            n: t for n, t in tensors.items() if "_norm.weight" not in n or "mlp" in n or "attn" in n
        }
        del tensors["lm_head.weight"]
    elif layout == "qwen2-biases":
        arch = "qwen2"
        for i in range(config["num_hidden_layers"]):
            for proj, size in (("q", 64), ("k", 32), ("v", 32)):
                tensors[f"layers.{i}.{proj}_proj.bias"] = rng.standard_normal(size).astype(
                    np.float32
                )
    else:
        tensors = {n: t for n, t in tensors.items() if not n.endswith("q_norm.weight")}
    path = tmp_path / f"{layout}.base"
    tokenizer_json = raw["tokenizer"]["tokenizer_json"]
    write_model_bundle(
        path, arch=arch, config=config, tensors=tensors, tokenizer_json=tokenizer_json
    )
    other = BaseRTRuntime.load(path, ctx_size=128, max_sequences=2)
    head = prompt(other, TEXTS[0])
    tail = other.tokenize(" jumps over the lazy dog", add_special=False)
    seq = prefilled(other, head)
    alone = one_at_a_time(other, seq, tail)
    other.cut(seq, len(head))
    neighbour = other.new_sequence()
    rows = other.step([Feed(neighbour, head, 0), Feed(seq, tail, len(head), all_rows=True)])
    assert np.array_equal(rows[1], alone)
    reference = runtime.step([Feed(runtime.new_sequence(), head, 0)])[0]
    assert not np.array_equal(rows[0], reference), "the layout change was not read"

"""The llamacpp runtime on the real demo model (Gemma 3 270M, Q4_K_M).

The model is assembled once per machine under ~/.cache/superfluid/models (XDG_CACHE_HOME
respected); SUPERFLUID_HOME is not needed. Outside CI a missing llama-cpp-python or demo extra
skips these tests with the reason; in CI it fails them.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from superfluid.adapters.llamacpp.demo_model import DemoModelMissing, demo_model_path
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime, cheap_logit_rows
from superfluid.application.ports import Feed, RuntimeFault

pytestmark = pytest.mark.slow

PROMPT = "The river runs past the old mill, under the stone bridge and out to the sea."
DRAFT = " Every spring the water rises"


def _cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "superfluid"


@pytest.fixture(scope="session")
def demo_model() -> Path:
    try:
        importlib.import_module("llama_cpp")
        return demo_model_path(_cache_home())
    except (ImportError, DemoModelMissing) as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"needs the llamacpp and demo extras (scripts/install.sh): {exc}")


@pytest.fixture(params=["demo", "instruct"])
def real_model(request: pytest.FixtureRequest, demo_model: Path) -> Path:
    """Each real model in turn: Gemma 3 270M (one K/V head for 4 query heads, head size 256)
    and SmolLM2-135M-Instruct (3 K/V heads for 9, head size 64, Q4_1 weights)."""
    if request.param == "demo":
        return demo_model
    return Path(request.getfixturevalue("instruct_gguf"))


@pytest.fixture(scope="session")
def runtime(demo_model: Path) -> Iterator[LlamaCppRuntime]:
    with LlamaCppRuntime.load(demo_model, ctx_size=512, max_sequences=4) as rt:
        yield rt


@pytest.fixture
def seqs(runtime: LlamaCppRuntime) -> Iterator[list[int]]:
    """Three fresh sequences, freed after the test whatever it did to them."""
    ids = [runtime.new_sequence() for _ in range(3)]
    yield ids
    for seq in ids:
        runtime.free_sequence(seq)


def _greedy(rt: LlamaCppRuntime, seq: int, prompt: list[int], n: int) -> list[int]:
    row = rt.step([Feed(seq, prompt, 0)])[0][-1]
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(row)))
        row = rt.step([Feed(seq, out[-1:], len(prompt) + len(out) - 1)])[0][-1]
    return out


def test_the_demo_model_loads_able_to_verify_and_cut(runtime: LlamaCppRuntime) -> None:
    caps = runtime.capabilities
    assert runtime.name == caps.runtime == "llamacpp"
    assert caps.verify_rows and caps.verify_batches and caps.truncate_partial
    assert caps.cut_refusal is None
    assert caps.strategies == ("prompt-lookup",)
    assert caps.max_verify_rows == 65
    assert (caps.context_size, caps.max_sequences) == (512, 4)
    assert runtime.sliding_window() > 0


def test_end_of_turn_ends_generation(runtime: LlamaCppRuntime) -> None:
    (end_of_turn,) = runtime.tokenize("<end_of_turn>", add_special=False)
    assert end_of_turn in runtime.capabilities.eos_tokens
    assert runtime.vocab.eos in runtime.capabilities.eos_tokens


def test_text_survives_a_tokenize_detokenize_round_trip(runtime: LlamaCppRuntime) -> None:
    text = "Héllo wörld — naïve 日本語 🙂\n  indented\ttab"
    tokens = runtime.tokenize(text, add_special=False)
    assert runtime.detokenize(tokens) == text.encode()
    with_bos = runtime.tokenize(text, add_special=True)
    assert with_bos[0] == runtime.vocab.bos and with_bos[1:] == tokens
    assert runtime.detokenize(with_bos) == text.encode()


def test_detokenizing_concatenates_pieces_so_it_can_stream(runtime: LlamaCppRuntime) -> None:
    tokens = runtime.tokenize("日本語 🙂 streaming", add_special=False)
    pieces = b"".join(runtime.detokenize([t]) for t in tokens)
    assert pieces == runtime.detokenize(tokens)


def test_one_step_packs_three_sequences(runtime: LlamaCppRuntime, seqs: list[int]) -> None:
    prompt = runtime.tokenize(PROMPT, add_special=True)
    draft = runtime.tokenize(DRAFT, add_special=False)
    vocab = runtime.vocab.size
    rows = runtime.step(
        [Feed(seqs[0], prompt, 0), Feed(seqs[1], prompt[:5], 0), Feed(seqs[2], prompt[:3], 0)]
    )
    assert [r.shape for r in rows] == [(1, vocab)] * 3
    assert all(r.dtype == np.float32 for r in rows)
    rows = runtime.step(
        [
            Feed(seqs[0], draft, len(prompt), all_rows=True),
            Feed(seqs[1], prompt[5:6], 5),
            Feed(seqs[2], prompt[3:4], 3, all_rows=True),
        ]
    )
    assert [r.shape for r in rows] == [(len(draft), vocab), (1, vocab), (1, vocab)]
    assert [runtime.length(s) for s in seqs] == [len(prompt) + len(draft), 6, 4]


def test_an_all_rows_feed_returns_a_row_per_token(
    runtime: LlamaCppRuntime, seqs: list[int]
) -> None:
    prompt = runtime.tokenize(PROMPT, add_special=True)
    (rows,) = runtime.step([Feed(seqs[0], prompt, 0, all_rows=True)])
    assert rows.shape == (len(prompt), runtime.vocab.size)
    assert np.isfinite(rows).all()
    # Row i is the prediction after token i: the same as feeding only the first i + 1 tokens.
    (fourth,) = runtime.step([Feed(seqs[1], prompt[:4], 0)])
    (last,) = runtime.step([Feed(seqs[2], prompt, 0)])
    assert rows[3].argmax() == fourth[0].argmax()
    assert rows[-1].argmax() == last[0].argmax()


def test_a_step_longer_than_a_batch_runs_as_several_decodes(
    runtime: LlamaCppRuntime, seqs: list[int]
) -> None:
    tokens = runtime.tokenize((PROMPT + " ") * 40, add_special=True)[:500]
    assert 300 + len(tokens) > runtime.tokens_per_decode
    first = runtime.step([Feed(seqs[0], tokens[:300], 0), Feed(seqs[1], tokens, 0)])
    (second,) = runtime.step([Feed(seqs[0], tokens[300:], 300)])
    assert [runtime.length(s) for s in seqs[:2]] == [500, 500]
    # The kernels are batch-invariant: how a prompt is cut into decodes changes no bit.
    np.testing.assert_array_equal(second, first[1])


def test_a_cut_then_refeed_gives_the_same_last_row(
    runtime: LlamaCppRuntime, seqs: list[int]
) -> None:
    prompt = runtime.tokenize(PROMPT, add_special=True)
    draft = runtime.tokenize(DRAFT, add_special=False)
    runtime.step([Feed(seqs[0], prompt, 0)])
    before = runtime.step([Feed(seqs[0], draft, len(prompt), all_rows=True)])[0]
    runtime.cut(seqs[0], len(prompt) + 1)
    assert runtime.length(seqs[0]) == len(prompt) + 1
    after = runtime.step([Feed(seqs[0], draft[1:], len(prompt) + 1)])[0]
    np.testing.assert_array_equal(after[-1], before[-1])


def test_verify_rows_equal_one_at_a_time_rows(runtime: LlamaCppRuntime) -> None:
    rt = runtime
    prompt = rt.tokenize(PROMPT, add_special=True)
    draft = rt.tokenize(DRAFT, add_special=False)
    seq = rt.new_sequence()
    try:
        rt.step([Feed(seq, prompt, 0)])
        before = rt.step([Feed(seq, draft, len(prompt), all_rows=True)])[0]
        rt.cut(seq, len(prompt))
        one_by_one = [rt.step([Feed(seq, [t], len(prompt) + i)])[0][0] for i, t in enumerate(draft)]
    finally:
        rt.free_sequence(seq)
    np.testing.assert_array_equal(np.stack(one_by_one), before)


def _one_at_a_time(rt: LlamaCppRuntime, seq: int, held: int, tokens: list[int]) -> np.ndarray:
    rows = [rt.step([Feed(seq, [t], held + i)])[0][0] for i, t in enumerate(tokens)]
    rt.cut(seq, held)
    return np.stack(rows)


# Past 512 KV cells llama.cpp takes other attention paths for some cache types and batch shapes;
# 16 rows is the deepest verify step; lanes that feed different lengths are split by llama.cpp.
@pytest.mark.parametrize(
    ("context", "third", "rows"),
    [(40, 20, 6), (40, 30, 16), (300, 250, 9), (700, 650, 16)],
    ids=["short-6", "short-16", "past-512-kv-cells-9", "long-16"],
)
def test_verify_rows_equal_plain_rows_whatever_the_other_lanes_do(
    real_model: Path, context: int, third: int, rows: int
) -> None:
    with LlamaCppRuntime.load(real_model, ctx_size=1024, max_sequences=4) as rt:
        text = rt.tokenize((PROMPT + DRAFT) * 60, add_special=True)
        held = [context, context - 5, third]
        verify = text[context : context + rows]
        seqs = [rt.new_sequence() for _ in held]
        for seq, n in zip(seqs, held, strict=True):
            rt.step([Feed(seq, text[:n], 0)])
        plain = _one_at_a_time(rt, seqs[0], held[0], verify)
        packed = rt.step(
            [
                Feed(seqs[2], [42], held[2]),
                Feed(seqs[0], verify, held[0], all_rows=True),
                Feed(seqs[1], text[held[1] : held[1] + 4], held[1], all_rows=True),
            ]
        )
    assert rt.capabilities.max_verify_rows == 65
    assert [len(r) for r in packed] == [1, rows, 4]
    np.testing.assert_array_equal(packed[1], plain)


def test_a_lane_s_rows_do_not_depend_on_cells_other_lanes_freed(demo_model: Path) -> None:
    # With one cache shared by every lane, cells one lane's cut frees are taken by the next
    # lane to append, and attention then sums that lane's cells in another order.
    with LlamaCppRuntime.load(demo_model, ctx_size=512, max_sequences=2) as rt:
        text = rt.tokenize((PROMPT + DRAFT) * 20, add_special=True)
        alone = rt.new_sequence()
        rt.step([Feed(alone, text[:100], 0)])
        expected = _one_at_a_time(rt, alone, 100, text[100:110])
        rt.free_sequence(alone)
        a, b = rt.new_sequence(), rt.new_sequence()
        rt.step([Feed(a, text[:60], 0), Feed(b, text[:95], 0)])
        rt.cut(a, 10)  # frees 50 cells, placed before b's
        got = []
        for i in range(15):
            feed = [Feed(b, [text[95 + i]], 95 + i)]
            got.append(rt.step(feed)[0][0])
    np.testing.assert_array_equal(np.stack(got[5:]), expected)


def test_a_feed_must_start_where_its_sequence_ends(
    runtime: LlamaCppRuntime, seqs: list[int]
) -> None:
    runtime.step([Feed(seqs[0], [2, 100, 200], 0)])
    with pytest.raises(RuntimeFault, match="holds 3 positions"):
        runtime.step([Feed(seqs[0], [5], 2)])
    with pytest.raises(RuntimeFault, match="context size"):
        runtime.step([Feed(seqs[0], [5] * 510, 3)])
    with pytest.raises(RuntimeFault, match="holds 3 positions"):
        runtime.cut(seqs[0], 4)


def test_sequences_are_bounded_and_freed_once(runtime: LlamaCppRuntime) -> None:
    ids = [runtime.new_sequence() for _ in range(4)]
    assert sorted(ids) == [0, 1, 2, 3]
    with pytest.raises(RuntimeFault, match="in use"):
        runtime.new_sequence()
    for seq in ids:
        runtime.free_sequence(seq)
    with pytest.raises(RuntimeFault, match="not in use"):
        runtime.free_sequence(ids[0])


def test_without_the_full_swa_cache_the_model_refuses_to_cut(demo_model: Path) -> None:
    with LlamaCppRuntime.load(demo_model, ctx_size=256, max_sequences=1, swa_full=False) as rt:
        caps = rt.capabilities
        assert caps.cut_refusal == "sliding-window state cuts only at its head"
        assert not caps.truncate_partial
        assert caps.strategies == ()
        seq = rt.new_sequence()
        rt.step([Feed(seq, rt.tokenize(PROMPT, add_special=True), 0)])
        with pytest.raises(RuntimeFault, match="sliding-window state cuts only at its head"):
            rt.cut(seq, 3)


def test_the_gemma_chat_template_renders_a_two_turn_conversation(
    runtime: LlamaCppRuntime,
) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ]
    prompt = runtime.chat_prompt(messages)
    assert prompt == (
        "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nHow are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    tokens = runtime.tokenize(prompt, add_special=True)
    (start_of_turn,) = runtime.tokenize("<start_of_turn>", add_special=False)
    assert tokens[0] == runtime.vocab.bos and tokens[1] == start_of_turn
    assert tokens.count(start_of_turn) == 4


def test_greedy_decoding_is_deterministic(runtime: LlamaCppRuntime, seqs: list[int]) -> None:
    prompt = runtime.tokenize(PROMPT, add_special=True)
    first = _greedy(runtime, seqs[0], prompt, 8)
    second = _greedy(runtime, seqs[1], prompt, 8)
    assert first == second
    assert len(runtime.detokenize(first)) > 0


def test_an_unloaded_model_refuses_calls_instead_of_crashing(demo_model: Path) -> None:
    rt = LlamaCppRuntime.load(demo_model, ctx_size=64, max_sequences=1)
    seq = rt.new_sequence()
    rt.close()
    with pytest.raises(RuntimeFault, match="unloaded"):
        rt.tokenize("hello", add_special=True)
    with pytest.raises(RuntimeFault, match="unloaded"):
        rt.step([Feed(seq, [2], 0)])
    rt.close()


def test_lanes_with_a_parked_or_free_sequence_between_them_keep_their_rows(
    demo_model: Path,
) -> None:
    # Sequence ids 0 and 2 step together while 1 holds a parked prefix, and 0 and 3 while 1 and
    # 2 are in use and free: throwaway tokens fill the gaps and are cut off again.
    with LlamaCppRuntime.load(demo_model, ctx_size=512, max_sequences=4) as rt:
        text = rt.tokenize((PROMPT + DRAFT) * 10, add_special=True)
        seqs = [rt.new_sequence() for _ in range(3)]
        for seq, n in zip(seqs, (60, 50, 40), strict=True):
            rt.step([Feed(seq, text[:n], 0)])
        alone_0 = _one_at_a_time(rt, seqs[0], 60, text[60:63])
        alone_2 = _one_at_a_time(rt, seqs[2], 40, text[40:43])
        parked_next = _one_at_a_time(rt, seqs[1], 50, text[50:53])
        for i in range(3):
            rows = rt.step(
                [Feed(seqs[2], [text[40 + i]], 40 + i), Feed(seqs[0], [text[60 + i]], 60 + i)]
            )
            np.testing.assert_array_equal(rows[0][0], alone_2[i])
            np.testing.assert_array_equal(rows[1][0], alone_0[i])
        assert rt.length(seqs[1]) == 50
        np.testing.assert_array_equal(_one_at_a_time(rt, seqs[1], 50, text[50:53]), parked_next)
        rt.free_sequence(seqs[2])
        two, three = rt.new_sequence(), rt.new_sequence()
        assert (two, three) == (2, 3)
        rt.free_sequence(two)
        rt.step([Feed(three, text[:40], 0)])
        rows = rt.step([Feed(three, [text[40]], 40), Feed(seqs[0], [text[63]], 63)])
        np.testing.assert_array_equal(rows[0][0], alone_2[0])
        assert [rt.length(s) for s in (seqs[0], seqs[1], three)] == [64, 50, 41]
        assert int(rt._lib.llama_memory_seq_pos_max(rt._mem, two)) == -1  # the free one is empty


def test_cheap_logit_rows_rounds_up_to_the_counts_the_head_runs_cheaply() -> None:
    assert [cheap_logit_rows(r) for r in range(1, 18)] == [
        1, 2, 4, 4, 8, 8, 8, 8, 10, 10, 12, 12, 14, 14, 16, 16, 18,
    ]  # fmt: skip


# Four lanes drafting different depths: pad into one pass where the measured padding rows cost
# less than the passes saved (bench/llamacpp_padding_cost.py, ADR 0008), else let llama.cpp split.
@pytest.mark.parametrize(
    ("widths", "pads"),
    [
        ((4, 2, 4, 4), True),
        ((4, 1, 1, 1), True),
        ((8, 8, 8, 1), True),
        ((4, 2, 8, 4), True),
        ((8, 4, 4, 4), False),
        ((8, 1, 1, 1), False),
        ((16, 4, 4, 4), False),
        ((32, 1, 1, 1), False),  # past the widest padded step
    ],
)
def test_unequal_verify_feeds_are_padded_into_one_pass_where_it_is_cheaper(
    runtime: LlamaCppRuntime, widths: tuple[int, ...], pads: bool
) -> None:
    feeds = [Feed(seq, [7] * width, 100) for seq, width in enumerate(widths)]
    padded = runtime._padded_widths(feeds)
    assert padded == ([max(widths)] * len(widths) if pads else list(widths))


@pytest.mark.parametrize("rows", [3, 5, 7, 9])
def test_throwaway_logits_rows_after_a_lone_verify_feed_change_nothing(
    runtime: LlamaCppRuntime, rows: int
) -> None:
    rt = runtime
    text = rt.tokenize((PROMPT + DRAFT) * 4, add_special=True)
    seq = rt.new_sequence()
    try:
        rt.step([Feed(seq, text[:30], 0)])
        feed = Feed(seq, text[30 : 30 + rows], 30, all_rows=True)
        assert rt._logit_padding([feed], [rows], [])[1] == [cheap_logit_rows(rows) - rows]
        alone = _one_at_a_time(rt, seq, 30, text[30 : 30 + rows])
        packed = rt.step([Feed(seq, text[30 : 30 + rows], 30, all_rows=True)])[0]
        held = rt.length(seq)
        last = int(rt._lib.llama_memory_seq_pos_max(rt._mem, seq))
    finally:
        rt.free_sequence(seq)
    np.testing.assert_array_equal(packed, alone)
    assert held == last + 1 == 30 + rows  # the padding was cut off


@pytest.mark.parametrize("fourth", ["parked", "free"])
def test_three_plain_lanes_get_a_throwaway_fourth_row_that_changes_nothing(
    demo_model: Path, fourth: str
) -> None:
    with LlamaCppRuntime.load(demo_model, ctx_size=512, max_sequences=4) as rt:
        text = rt.tokenize((PROMPT + DRAFT) * 10, add_special=True)
        seqs = [rt.new_sequence() for _ in range(4)]
        for seq, n in zip(seqs, (60, 50, 40, 30), strict=True):
            rt.step([Feed(seq, text[:n], 0)])
        if fourth == "free":
            rt.free_sequence(seqs[3])
        lanes = list(zip(seqs[:3], (60, 50, 40), strict=True))
        alone = [_one_at_a_time(rt, s, n, text[n : n + 3]) for s, n in lanes]
        feeds = [Feed(s, [text[n]], n) for s, n in lanes]
        _, _, fillers = rt._logit_padding(feeds, [1, 1, 1], [])
        assert [(filler.seq, logits) for filler, logits in fillers] == [(seqs[3], 1)]
        for i in range(3):
            rows = rt.step([Feed(s, [text[n + i]], n + i) for s, n in lanes])
            for lane in range(3):
                np.testing.assert_array_equal(rows[lane][0], alone[lane][i])
        fourth_last = int(rt._lib.llama_memory_seq_pos_max(rt._mem, seqs[3]))
        assert [rt.length(s) for s in seqs[:3]] == [63, 53, 43]
        assert fourth_last == (29 if fourth == "parked" else -1)


def test_the_installed_llama_cpp_carries_the_patches(runtime: LlamaCppRuntime) -> None:
    # scripts/install.sh builds llama.cpp with scripts/patches/; without them models fall back
    # to a BF16 cache and unrepacked weights (exact, slower to prefill), and every row test
    # below would still pass.
    from superfluid.adapters.llamacpp.kernels import (
        BATCH_INVARIANT,
        has_float_one_row,
        has_offset_dot,
        has_q0_prefetch,
        has_repacked_gemm,
        has_tiled_attention,
        has_tiled_row_order,
    )
    from superfluid.adapters.llamacpp.native import llama

    assert has_tiled_attention(llama()), "llama-cpp-python was built without scripts/patches/"
    assert has_repacked_gemm(llama()), "llama-cpp-python lacks scripts/patches/0002-*"
    native = llama().llama_cpp._lib
    assert hasattr(native, "ggml_cpu_tiled_row_order_enabled"), "it lacks scripts/patches/0003-*"
    # The tiled kernel's row order is an x86 mode (AVX2 and FMA, AVX-512 VNNI builds too); a build
    # without it serves K-quants on the dot product at every row count.
    expected = (
        BATCH_INVARIANT if has_tiled_row_order(llama()) else BATCH_INVARIANT.without_tiled_kquants()
    )
    # tinyBLAS's offset dot product (0006) is an AVX-512 VNNI mode; elsewhere the stock tiles.
    assert hasattr(native, "ggml_cpu_q0_offset_dot_enabled"), "it lacks scripts/patches/0006-*"
    if not has_offset_dot(llama()):
        expected = dataclasses.replace(expected, offset_dot=False)
    assert bool(native.ggml_cpu_q0_offset_dot_enabled()) == expected.offset_dot
    # tinyBLAS's prefetching tiles (0007) need AVX2; elsewhere the stock tiles.
    assert hasattr(native, "ggml_cpu_q0_prefetch_enabled"), "it lacks scripts/patches/0007-*"
    if not has_q0_prefetch(llama()):
        expected = dataclasses.replace(expected, q0_prefetch=False)
    assert bool(native.ggml_cpu_q0_prefetch_enabled()) == expected.q0_prefetch
    # Float and IQ4_NL weights through tinyBLAS at one row (0009): an x86 mode.
    assert hasattr(native, "ggml_cpu_sgemm_one_row_enabled"), "it lacks scripts/patches/0009-*"
    if not has_float_one_row(llama()):
        expected = dataclasses.replace(expected, float_one_row=False)
    assert bool(native.ggml_cpu_sgemm_one_row_enabled()) == expected.float_one_row
    assert runtime.kernels == expected and runtime.kernels.repack_weights


# Run in a subprocess: llama.cpp reads its switches once per process. "padded" reads
# GGML_CPU_REPACK_GEMM as 2 before the runtime sets it, which pads the rows a repacked gemm group
# leaves over for every type.
_ROWS_AGAINST_ONE_AT_A_TIME = """
import dataclasses, os, sys
import numpy as np
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.adapters.llamacpp.kernels import served_kernels
from superfluid.adapters.llamacpp.native import llama
from superfluid.application.ports import Feed

model, variant, prompt = sys.argv[1:]
if variant == "padded":
    os.environ["GGML_CPU_REPACK_GEMM"] = "2"
    assert llama().llama_cpp._lib.ggml_cpu_repack_gemm_enabled() == 2
served = served_kernels(llama())
# Without the row-order mode every build repacks Q4_K (on AVX-512 the mode leaves it to tiling).
repacked = served.without_tiled_kquants()
kernels = {
    "served": served,
    "padded": repacked,
    "stock repacked": dataclasses.replace(repacked, repacked_gemm=False),
    "stock tiled": dataclasses.replace(served, tiled_kquants=True, tiled_row_order=False),
}[variant]
with LlamaCppRuntime.load(model, ctx_size=256, max_sequences=1, kernels=kernels) as rt:
    text = rt.tokenize(prompt, add_special=True)
    seq = rt.new_sequence()
    rt.step([Feed(seq, text[:40], 0)])
    alone = [rt.step([Feed(seq, [t], 40 + i)])[0][0] for i, t in enumerate(text[40:50])]
    rt.cut(seq, 40)
    same = []
    for n in (5, 6, 7, 8, 9, 10):
        rows = rt.step([Feed(seq, text[40 : 40 + n], 40, all_rows=True)])[0]
        rt.cut(seq, 40)
        same.append(np.array_equal(rows, np.stack(alone[:n])))
print("same" if all(same) else "differ", same)
"""


@pytest.mark.parametrize(
    ("variant", "rows"),
    [
        ("served", "same"),
        ("padded", "same"),
        ("stock repacked", "differ"),
        ("stock tiled", "differ"),
    ],
)
def test_the_demo_model_s_weight_kernels_need_the_patches_row_orders(
    demo_model: Path, variant: str, rows: str
) -> None:
    # Repacked (without the row-order mode), the demo model's Q4_K tensors make stock llama.cpp
    # compute 5-7 rows as a gemm group of 4 and 1-3 gemv rows; its Q6_K tensors take the tiled
    # kernel from 8 rows and a dot product below. Either way stock rows differ from the same
    # tokens decoded one at a time. With the patches' switches the row paths sum in their group
    # kernels' order ("served"), or the rows a repacked gemm group leaves over are padded into
    # one ("padded", the path of types without a gemv in the gemm's order), and 5-10 rows equal
    # the one-at-a-time rows. (This also shows the exactness tests run these kernels, not a
    # model without any.)
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _ROWS_AGAINST_ONE_AT_A_TIME, str(demo_model), variant, PROMPT * 4],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    ).stdout
    assert out.splitlines()[-1].split()[0] == rows, out.splitlines()[-1]


# 65 rows: the deepest verify step a 64-token draft needs, and past llama.cpp's 64-query switch to its
# tiled attention; 8 lanes: the widest step the benches serve (8 clients, `--max-lanes 8`).
@pytest.mark.parametrize(("lanes", "rows"), [(1, 65), (8, 9)], ids=["65-rows", "8-lanes"])
def test_deep_and_wide_steps_past_512_cells_equal_plain_rows(
    real_model: Path, lanes: int, rows: int
) -> None:
    # Past 512 cells a row sums 3 KV segments: a one-row step splits them over the threads, a
    # deep or wide one folds them in its own loop (scripts/patches/0008).
    with LlamaCppRuntime.load(real_model, ctx_size=1024, max_sequences=lanes) as rt:
        text = rt.tokenize((PROMPT + DRAFT) * 60, add_special=True)
        held = [700 - 3 * i for i in range(lanes)]
        seqs = [rt.new_sequence() for _ in held]
        for seq, n in zip(seqs, held, strict=True):
            rt.step([Feed(seq, text[:n], 0)])
        plain = [
            _one_at_a_time(rt, seqs[i], held[i], text[held[i] : held[i] + rows]) for i in (0, -1)
        ]
        packed = rt.step(
            [Feed(s, text[n : n + rows], n, all_rows=True) for s, n in zip(seqs, held, strict=True)]
        )
    np.testing.assert_array_equal(packed[0], plain[0])
    np.testing.assert_array_equal(packed[-1], plain[1])


def test_a_1000_token_prompt_computes_the_same_however_it_is_split(real_model: Path) -> None:
    # A reused prefix was prefilled in other pieces than a fresh prompt: its KV must not care.
    with LlamaCppRuntime.load(real_model, ctx_size=1100, max_sequences=2) as rt:
        text = rt.tokenize((PROMPT + DRAFT) * 80, add_special=True)[:1010]
        prompt, after = text[:1000], text[1000:1004]
        whole = rt.new_sequence()
        last = rt.step([Feed(whole, prompt, 0)])[0][-1]
        expected = _one_at_a_time(rt, whole, 1000, after)
        for cuts in ([1, 600], [63, 64, 129], [511, 999]):
            split = rt.new_sequence()
            bounds = [0, *cuts, 1000]
            for start, end in itertools.pairwise(bounds):
                row = rt.step([Feed(split, prompt[start:end], start)])[0][-1]
            np.testing.assert_array_equal(row, last, err_msg=f"split at {cuts}")
            np.testing.assert_array_equal(_one_at_a_time(rt, split, 1000, after), expected)
            rt.free_sequence(split)

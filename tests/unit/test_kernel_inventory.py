"""What the startup log says each weight of a GGUF runs on, and when speculation is refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from superfluid.adapters.llamacpp import gguf_layout as g
from superfluid.adapters.llamacpp.gguf_layout import Layout, TensorInfo
from superfluid.adapters.llamacpp.kernel_inventory import (
    DOT,
    DOT_EXPERTS,
    REPACKED,
    REPACKED_EXPERTS,
    TILED,
    TILED_EXPERTS,
    TINYBLAS,
    Build,
    fallback_line,
    inventory,
    startup_line,
    weights,
)
from superfluid.adapters.llamacpp.kernels import (
    BATCH_INVARIANT,
    BF16_BATCH_INVARIANT,
    LLAMACPP_DEFAULT,
)

AVX512 = Build(avx2=True, avx512=True)
AVX2 = Build(avx2=True, avx512=False)
#: The served kernels of a build without the row-order mode (not x86 with AVX2 and FMA, or no
#: patch): no tiled K-quants.
SERVED = BATCH_INVARIANT.without_tiled_kquants()
#: The served kernels of a patched x86 build: tiled K-quants with the rows below in their order.
ROW_ORDER = BATCH_INVARIANT
IQ2_XXS = 16
IQ4_NL = 20


def layout(*tensors: tuple[str, tuple[int, ...], int]) -> Layout:
    infos = tuple(TensorInfo(name.encode(), dims, kind, 0) for name, dims, kind in tensors)
    return Layout(3, 0, b"", 32, infos, 0)


def dense(kind: int, *, head: int = g.Q8_0, tied: bool = False) -> Layout:
    """A two-layer model whose matmul weights are `kind`, norms F32, the head `head`."""
    tensors = [("token_embd.weight", (256, 512), head if tied else kind)]
    if not tied:
        tensors.append(("output.weight", (256, 512), head))
    for i in range(2):
        tensors += [
            (f"blk.{i}.attn_norm.weight", (256,), g.F32),
            (f"blk.{i}.attn_q.weight", (256, 256), kind),
            (f"blk.{i}.ffn_down.weight", (768, 256), kind),
        ]
    return layout(*tensors)


def moe(kind: int) -> Layout:
    return layout(
        ("token_embd.weight", (256, 512), kind),
        ("output.weight", (256, 512), kind),
        ("blk.0.attn_q.weight", (256, 256), kind),
        ("blk.0.ffn_gate_inp.weight", (256, 8), g.F32),
        ("blk.0.ffn_up_exps.weight", (256, 256, 8), kind),
    )


def test_norms_and_untied_embeddings_are_no_matmul_weights() -> None:
    found = weights(dense(g.Q6_K))
    assert [w.type for w in found] == ["Q8_0", "Q6_K", "Q6_K", "Q6_K", "Q6_K"]
    tied = weights(dense(g.Q6_K, tied=True))
    assert tied[0].type == "Q8_0" and len(tied) == 5  # the embeddings are the head


def test_with_the_row_order_k_quants_run_tiled_and_nothing_falls_back() -> None:
    inv = inventory(dense(g.Q4_K, head=g.Q6_K), ROW_ORDER, AVX512)
    # AVX-512: the repacked gemm would pad a decode's row into four, so Q4_K is left to tiling.
    assert inv.by_kernel == {TILED: {"Q4_K": 4, "Q6_K": 1}}
    assert inv.untiled == () and fallback_line(inv) is None
    assert inventory(dense(g.Q4_K, head=g.Q6_K), ROW_ORDER, AVX2).by_kernel == {
        REPACKED: {"Q4_K": 4},
        TILED: {"Q6_K": 1},
    }


def test_grid_types_without_a_row_order_mode_fall_back_to_the_dot_product() -> None:
    inv = inventory(dense(IQ2_XXS), ROW_ORDER, AVX512)
    assert inv.by_kernel[DOT] == {"IQ2_XXS": 4} and inv.untiled == ("IQ2_XXS",)


def test_gathered_tables_are_no_matmul_weights() -> None:
    model = layout(
        ("position_embd.weight", (256, 2048), g.F16),
        ("output.weight", (256, 512), g.Q8_0),
    )
    inv = inventory(model, replace(SERVED, float_one_row=False), AVX512)
    assert inv.by_kernel == {TINYBLAS: {"Q8_0": 1}} and inv.refusal is None


def test_q4_k_is_repacked_and_q6_k_falls_back_to_the_dot_product_without_the_row_order() -> None:
    inv = inventory(dense(g.Q4_K, head=g.Q6_K), SERVED, AVX512)
    assert inv.by_kernel == {REPACKED: {"Q4_K": 4}, DOT: {"Q6_K": 1}}
    assert inv.refusal is None and inv.untiled == ("Q6_K",)
    line = startup_line(inv, SERVED)
    assert line.startswith("runs on batch-invariant kernels: repacked gemm (4 Q4_K); ")
    assert "dot product (1 Q6_K); tiled attention on an F16 cache, a KV stream per lane" in line
    fallback = fallback_line(inv)
    assert fallback is not None and fallback.startswith("Q6_K weights run on the one-row dot")


def test_rows_that_8_does_not_divide_are_not_repacked() -> None:
    model = layout(
        ("output.weight", (256, 100), g.Q4_0), ("blk.0.attn_q.weight", (256, 256), g.Q4_0)
    )
    assert inventory(model, SERVED, AVX512).by_kernel == {
        TINYBLAS: {"Q4_0": 1},
        REPACKED: {"Q4_0": 1},
    }


def test_q2_k_is_repacked_only_on_avx512() -> None:
    assert REPACKED in inventory(dense(g.Q2_K), SERVED, AVX512).by_kernel
    assert inventory(dense(g.Q2_K), SERVED, AVX2).by_kernel[DOT] == {"Q2_K": 4}


def test_without_repacking_q4_k_takes_the_tiled_kernel_where_it_is_served() -> None:
    kernels = BATCH_INVARIANT.without_repacking()
    inv = inventory(dense(g.Q4_K), kernels, AVX2)
    assert inv.by_kernel["tiled K-quant matmul"] == {"Q4_K": 4} and not inv.untiled


def test_experts_run_tiled_repacked_or_one_row_at_a_time() -> None:
    plain = inventory(moe(g.Q6_K), SERVED, AVX512)
    assert plain.by_kernel[DOT_EXPERTS] == {"Q6_K": 1} and plain.untiled == ("Q6_K",)
    assert plain.by_kernel[TINYBLAS] == {"F32": 1}  # the router
    assert inventory(moe(g.Q4_K), SERVED, AVX512).by_kernel[REPACKED_EXPERTS] == {"Q4_K": 1}
    assert inventory(moe(g.Q6_K), ROW_ORDER, AVX512).by_kernel[TILED_EXPERTS] == {"Q6_K": 1}


@pytest.mark.parametrize("kind", [g.F16, g.BF16])
def test_float_weights_are_exact_with_tinyblas_at_one_row(kind: int) -> None:
    inv = inventory(dense(kind), SERVED, AVX512)
    assert inv.refusal is None and inv.by_kernel[TINYBLAS][g_name(kind)] == 4


def g_name(kind: int) -> str:
    return {g.F16: "F16", g.BF16: "BF16"}[kind]


def test_iq4_nl_rows_the_repacked_kernels_do_not_take_run_on_tinyblas() -> None:
    model = layout(
        ("output.weight", (256, 100), IQ4_NL), ("blk.0.attn_q.weight", (256, 256), IQ4_NL)
    )
    inv = inventory(model, SERVED, AVX512)
    assert inv.by_kernel == {TINYBLAS: {"IQ4_NL": 1}, REPACKED: {"IQ4_NL": 1}}
    assert inv.refusal is None
    assert inventory(model, replace(SERVED, float_one_row=False), AVX512).refusal is not None


@pytest.mark.parametrize("model", [dense(g.F16), moe(g.Q4_K)])
def test_float_weights_without_the_patch_refuse_speculation_and_say_why(model: Layout) -> None:
    # A mixture-of-experts model's F32 router is a float weight too.
    kernels = replace(SERVED, float_one_row=False)
    inv = inventory(model, kernels, AVX512)
    assert inv.refusal is not None
    assert "weights sum in another order alone (the dot product) than beside other rows" in (
        inv.refusal
    )
    assert startup_line(inv, kernels).startswith("runs on kernels that are not batch-invariant")


def test_llama_cpps_defaults_are_not_called_invariant() -> None:
    inv = inventory(dense(g.Q8_0), LLAMACPP_DEFAULT, AVX512)
    assert startup_line(inv, LLAMACPP_DEFAULT).startswith("runs on kernels that are not batch")


def test_an_unpatched_llama_cpp_serves_quantized_weights_exactly_on_a_bf16_cache() -> None:
    inv = inventory(dense(g.Q8_0), BF16_BATCH_INVARIANT, AVX512)
    line = startup_line(inv, BF16_BATCH_INVARIANT)
    assert line.startswith("runs on batch-invariant kernels: ")
    assert line.endswith("per-row attention on a BF16 cache, a KV stream per lane")

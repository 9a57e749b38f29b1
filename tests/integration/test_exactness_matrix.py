"""Every architecture x weight type is exact on the served kernels (docs/exactness-matrix.md).

The models are tiny random-weight GGUFs made here (`bench/synthetic_gguf.py`): six
architectures, seventeen weight types, quantized by the installed llama.cpp. A subset that
reaches every kernel family (repacked gemm, tinyBLAS, the one-row dot product, experts repacked
and not, F32/F16/BF16 weights) runs the row check and the speculative-vs-plain server check; the
full matrix (marked slow) runs both on every cell.
"""

from __future__ import annotations

import os

import pytest

if not os.environ.get("CI"):  # in CI nothing may hide: a missing extra fails
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")

from bench import exactness_matrix, synthetic_gguf

from superfluid.adapters.llamacpp import kernel_inventory as ki
from superfluid.adapters.llamacpp.gguf_layout import read_layout
from superfluid.adapters.llamacpp.kernels import served_kernels
from superfluid.adapters.llamacpp.native import llama

SERVED = "served (batch-invariant)"
#: One cell per kernel family and per shape class (rows 256 wide, and 320/384 wide with the
#: quantizer's legacy fallbacks).
FAMILIES = [
    ("llama", "Q4_K"),  # tiled (AVX-512) or repacked (AVX2) Q4_K
    ("llama", "Q4_0"),  # repacked gemm, the rows a group leaves over on its stock gemv
    ("qwen3", "Q8_0"),  # tinyBLAS's quantized tiles, head size 128
    ("gemma3", "Q5_0"),  # tinyBLAS, 320-wide rows, a sliding window below the context
    ("phi3", "Q6_K"),  # tiled with the rows below in its order, multi-head attention
    ("phi3", "IQ4_NL"),  # a 500-row head the repacked kernels leave to tinyBLAS
    ("qwen2", "Q4_K_M"),  # a mixed recipe with legacy fallbacks, 384-wide rows, QKV biases
    ("qwen2", "Q4_1"),  # the dot product
    ("qwen3moe", "Q4_0"),  # repacked experts, the F32 router through tinyBLAS
    ("qwen3moe", "Q6_K"),  # tiled experts
    ("qwen3moe", "Q5_1"),  # experts one row at a time
    ("llama", "F16"),  # float weights through tinyBLAS at every row count
    ("qwen3", "BF16"),
    ("gemma3", "F32"),
]


def _families(cells: list[tuple[str, str]]) -> set[str]:
    kernels = served_kernels(llama())
    build = ki.Build.of(llama())
    reached: set[str] = set()
    for cell in cells:
        with synthetic_gguf.model(*cell).open("rb") as handle:
            reached |= set(ki.inventory(read_layout(handle), kernels, build).by_kernel)
    return reached


def test_the_subset_reaches_every_kernel_family_the_matrix_does() -> None:
    every = list(synthetic_gguf.each(synthetic_gguf.ARCHITECTURES, synthetic_gguf.WEIGHT_TYPES))
    reached = _families(FAMILIES)
    assert reached == _families(every)
    assert {ki.TINYBLAS, ki.DOT, ki.REPACKED, ki.REPACKED_EXPERTS, ki.DOT_EXPERTS} <= reached


def test_every_kernel_family_is_exact_on_the_served_kernels() -> None:
    found = exactness_matrix.rows_in_subprocess(FAMILIES, SERVED)
    assert {cell: f for cell, f in found.items() if f} == {}


def test_the_check_fails_on_llama_cpps_own_kernels() -> None:
    # Float weights and experts' routers differ at 2+ rows there: the check can catch a regression.
    cells = [("llama", "F16"), ("qwen3moe", "Q4_K")]
    found = exactness_matrix.rows_in_subprocess(cells, "llama.cpp defaults")
    assert set(found) == set(cells) and all(found.values()), found


def test_speculative_greedy_replies_are_plain_greedy_replies_on_every_family(tmp_path) -> None:
    found = exactness_matrix.check_server(FAMILIES, tmp_path)
    assert {cell: r for cell, r in found.items() if not r.startswith("same")} == {}
    # Drafts were verified, so "same" says something: most cells accept some.
    accepting = [r for r in found.values() if not r.startswith("same (0 ")]
    assert len(accepting) >= len(FAMILIES) // 2, found


@pytest.mark.slow
def test_the_full_matrix_is_exact_on_the_served_kernels() -> None:
    # Every architecture x type: the row check and greedy replies.
    cells = list(synthetic_gguf.each(synthetic_gguf.ARCHITECTURES, synthetic_gguf.WEIGHT_TYPES))
    rows = exactness_matrix.matrix(cells, server=True, stock=False)
    assert [row.cell for row in rows if not row.exact] == []

"""Which CPU kernel each of a model's weight tensors runs on, and whether its rows stay exact.

A model is exact under speculation when every matmul it runs computes a token's row the same in
any batch (ADR 0008). Which kernel a weight takes is decided by llama.cpp from the tensor's type,
its shape, the build's vector extensions and the process-wide switches in `kernels.py`; this
module reads the same facts from the file's header and the loaded library, so the startup log can
say in one line what a model runs on, name each type served on a slower exact fallback, and
refuse speculation (never plain decoding) where no exact kernel exists on this build.

The rules are llama.cpp's own (`ggml-cpu/repack.cpp`'s repack choice, `llamafile/sgemm.cpp`'s
types, `tiled/tiled.cpp`'s gate) for x86 builds; `bench/exactness_matrix.py` checks every
architecture x type against them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from superfluid.adapters.llamacpp.gguf_layout import Layout
from superfluid.adapters.llamacpp.kernels import Kernels, native_library

#: ggml type ids and names of the weight types a GGUF holds.
TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
    19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 29: "IQ1_M", 30: "BF16",
    39: "MXFP4",
}  # fmt: skip
#: The types whose one-row dot product sums otherwise than tinyBLAS (2+ rows): exact only with
#: superfluid's patch that sends their single rows to tinyBLAS too.
ONE_ROW_TINYBLAS = frozenset({"F32", "F16", "BF16", "IQ4_NL"})
#: tinyBLAS's quantized tiles (2+ rows) sum as the one-row dot product does, bit for bit.
Q0_TINYBLAS = frozenset({"Q8_0", "Q5_0", "Q4_0"})
#: The types llama.cpp's tiled K-quant matmul takes from 8 rows (tiled/tiled.cpp).
TILED_TYPES = frozenset(
    {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS"}
    | {"IQ3_S", "IQ1_S", "IQ1_M"}
)
#: The tiled types whose rows below 8 sum in the tiled kernel's order (superfluid's patch).
ROW_ORDER_TYPES = frozenset({"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"})
#: Left unrepacked for the tiled kernel on AVX-512 builds in row order (superfluid's patch).
UNREPACKED_ON_AVX512 = frozenset({"Q2_K", "Q4_K"})

# Kernel names, as the startup line says them.
REPACKED = "repacked gemm"
REPACKED_EXPERTS = "repacked experts"
TINYBLAS = "tinyBLAS"
TILED = "tiled K-quant matmul"
DOT = "dot product"
DOT_EXPERTS = "expert dot product"
TILED_EXPERTS = "tiled experts"


@dataclass(frozen=True, slots=True)
class Build:
    """What the loaded llama.cpp was built for (the `ggml_cpu_has_*` answers)."""

    avx2: bool
    avx512: bool

    @classmethod
    def of(cls, lib: Any) -> Build:
        native = native_library(lib)

        def has(name: str) -> bool:
            return hasattr(native, name) and bool(getattr(native, name)())

        return cls(avx2=has("ggml_cpu_has_avx2"), avx512=has("ggml_cpu_has_avx512"))


@dataclass(frozen=True, slots=True)
class Weight:
    """A tensor some matmul reads: ggml type name, output rows, experts (MUL_MAT_ID) or not."""

    type: str
    rows: int
    experts: bool


#: Tables a graph gathers rows from and never multiplies by.
GATHERED = frozenset(
    {b"position_embd.weight", b"token_types.weight", b"per_layer_token_embd.weight"}
)


def weights(layout: Layout) -> list[Weight]:
    """The matmul weights of a GGUF: 2-D and 3-D tensors but the gathered tables, the token
    embeddings only when tied to the output head (they are otherwise only gathered too)."""
    names = {t.name for t in layout.tensors}
    tied = b"output.weight" not in names
    found = []
    for t in layout.tensors:
        gathered = t.name in GATHERED or (t.name == b"token_embd.weight" and not tied)
        if len(t.dims) < 2 or gathered:
            continue
        rows = t.dims[1]
        found.append(Weight(TYPE_NAMES.get(t.type, f"type {t.type}"), rows, len(t.dims) == 3))
    return found


def _repacked(w: Weight, kernels: Kernels, build: Build) -> bool:
    """llama.cpp's repack choice on x86 (`ggml_repack_get_optimal_repack_type`), less the
    K-quants the row-order mode leaves to the tiled kernel on AVX-512 builds."""
    if w.rows % 8:
        return False
    if kernels.tiled_row_order and build.avx512 and w.type in UNREPACKED_ON_AVX512:
        return False
    if w.type in ("Q4_0", "Q4_K", "IQ4_NL", "MXFP4"):
        return build.avx2
    return w.type == "Q2_K" and build.avx512


def kernel(w: Weight, kernels: Kernels, build: Build) -> str:
    """The kernel `w` runs on under `kernels` (decode and prefill alike: the served kernels
    take one path at every row count)."""
    if kernels.repack_weights and _repacked(w, kernels, build):
        return REPACKED_EXPERTS if w.experts else REPACKED
    tiled = kernels.tiled_kquants and (
        w.type in ROW_ORDER_TYPES if kernels.tiled_row_order else w.type in TILED_TYPES
    )
    if w.experts:
        # MUL_MAT_ID: the tiled kernel per expert from 8 routed rows, else one row at a time
        return TILED_EXPERTS if tiled else DOT_EXPERTS
    if w.type in ONE_ROW_TINYBLAS or w.type in Q0_TINYBLAS:
        return TINYBLAS
    return TILED if tiled else DOT


def inexact(w: Weight, kernels: Kernels) -> str | None:
    """Why `w`'s rows change with their batch under `kernels`, or None when they do not."""
    if w.type in ONE_ROW_TINYBLAS and not w.experts and not kernels.float_one_row:
        return (
            f"its {w.type} weights sum in another order alone (the dot product) than beside"
            " other rows (tinyBLAS), and this llama.cpp lacks superfluid's patch that sends"
            " both to tinyBLAS"
        )
    return None


@dataclass(frozen=True, slots=True)
class Inventory:
    """A model's weights, grouped by the kernel they run on."""

    by_kernel: dict[str, Counter[str]]
    #: Why speculation is refused; None when every row is exact.
    refusal: str | None
    #: Types on the one-row dot product where llama.cpp's defaults take the tiled kernel.
    untiled: tuple[str, ...]


def inventory(layout: Layout, kernels: Kernels, build: Build) -> Inventory:
    by_kernel: dict[str, Counter[str]] = {}
    refusal = None
    untiled: set[str] = set()
    for w in weights(layout):
        name = kernel(w, kernels, build)
        by_kernel.setdefault(name, Counter())[w.type] += 1
        refusal = refusal or inexact(w, kernels)
        if name in (DOT, DOT_EXPERTS) and w.type in TILED_TYPES:
            untiled.add(w.type)
    return Inventory(by_kernel, refusal, tuple(sorted(untiled)))


def startup_line(inv: Inventory, kernels: Kernels) -> str:
    """One line: what the model's matmuls and attention run on."""
    parts = []
    for name in (REPACKED, TINYBLAS, TILED, DOT, REPACKED_EXPERTS, TILED_EXPERTS, DOT_EXPERTS):
        if name in inv.by_kernel:
            counts = inv.by_kernel[name]
            parts.append(f"{name} ({', '.join(f'{n} {t}' for t, n in sorted(counts.items()))})")
    attention = (
        "tiled attention on an F16 cache"
        if kernels.tiled_attention
        else "per-row attention on a BF16 cache"
    )
    streams = "a KV stream per lane" if kernels.stream_per_sequence else "one shared KV cache"
    head = (
        "runs on batch-invariant kernels"
        if kernels.batch_invariant and inv.refusal is None
        else "runs on kernels that are not batch-invariant"
    )
    return f"{head}: {'; '.join(parts)}; {attention}, {streams}"


def fallback_line(inv: Inventory) -> str | None:
    """The line naming the types served on the one-row dot product instead of llama.cpp's tiled
    kernel (exact, slower to prefill); None when there are none."""
    if not inv.untiled:
        return None
    types = ", ".join(inv.untiled)
    return (
        f"{types} weights run on the one-row dot product at every row count instead of"
        " llama.cpp's tiled K-quant matmul (whose 8+ rows sum in another order, with no row"
        " mode in its order on this build): exact, but prefill slower"
        " (docs/benchmarks/kernel-cost-per-weight-type/, dot-product fallback, measures it per"
        " type)"
    )

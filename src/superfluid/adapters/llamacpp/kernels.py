"""Which llama.cpp CPU kernels a model runs on, chosen so that no row depends on its batch.

Speculative greedy output equals plain greedy output only if the logits row of a token is the
same bit for bit whether it is computed alone (plain decoding), among the k+1 rows of a verify
step, inside a 512-token prefill, or packed with other lanes' tokens. On this llama.cpp build a
row changes with its batch wherever a kernel is picked by batch shape (ADR 0008 has the
measurements, `bench/llamacpp_bitexact.py` reproduces them):

- **Tiled K-quant matmul.** From 8 rows on, Q4_K/Q6_K weights go through a tiled kernel that
  sums in another order than the one-row dot products. Switched off (`GGML_CPU_TILED_MM=0`,
  read once per process), every row takes the same dot-product kernel at every batch size.
- **Repacked weights.** The CPU "extra" buffer repacks Q4_K into interleaved blocks whose gemv
  (one row) and gemm (4+ rows) kernels disagree. Not used.
- **Attention.** Flash attention with an F16/F32 cache takes a split-KV path for one-token
  decodes past 512 cells, a per-row path (F16 sums) below 64 queries and a tiled path from 64.
  superfluid's llama.cpp patch (`scripts/patches/`) adds `GGML_CPU_FA_TILED=1`, read once per
  process: every query count takes the tiled path, whose rows sum in one order whatever the
  batch, lanes or threads. A BF16 cache stays on the per-row path at every shape, exact but slow
  to prefill; it is what a llama.cpp without the patch is served with.
- **Cell order.** Attention sums over a sequence's cells in cell order. One unified cache
  hands cells freed by one lane to another, so a lane's cells leave position order depending on
  what other requests did; one cache stream per sequence keeps every lane's cells in order.

With these, rows are identical at every depth (up to 65 rows), in prefill of any length and
with any other lanes in the step, so speculation (and a reused prefix) cannot change greedy
output. The cost is measured in ADR 0008.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger("superfluid.llamacpp")

#: ggml.h's type ids (llama-cpp-python does not export them all).
GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30

#: The process-wide switch for llama.cpp's tiled K-quant matmul (read at the first matmul).
TILED_ENV = "GGML_CPU_TILED_MM"
#: The process-wide switch superfluid's patch adds: tiled flash attention at every query count.
TILED_ATTENTION_ENV = "GGML_CPU_FA_TILED"


@dataclass(frozen=True, slots=True)
class Kernels:
    """How a context computes: the knobs that decide whether rows depend on their batch."""

    #: Tiled K-quant matmul for batches of 8+ rows (process-wide in llama.cpp).
    tiled_kquants: bool
    #: Repack weights into the CPU "extra" buffer types (interleaved blocks).
    repack_weights: bool
    #: ggml type of the KV cache (K and V alike).
    kv_type: int
    #: None lets llama.cpp decide.
    flash_attention: bool | None
    #: One KV stream per sequence instead of one cache shared by all lanes.
    stream_per_sequence: bool
    #: Flash attention on its tiled path at every query count (needs superfluid's patch).
    tiled_attention: bool = False

    @property
    def batch_invariant(self) -> bool:
        return self in (BATCH_INVARIANT, BF16_BATCH_INVARIANT)


#: The configuration every model is served with where llama.cpp carries superfluid's patch.
BATCH_INVARIANT = Kernels(
    tiled_kquants=False,
    repack_weights=False,
    kv_type=GGML_TYPE_F16,
    flash_attention=True,
    stream_per_sequence=True,
    tiled_attention=True,
)

#: Exact on an unpatched llama.cpp too (BF16 stays on one per-row path), at BF16's prefill cost.
BF16_BATCH_INVARIANT = replace(BATCH_INVARIANT, kv_type=GGML_TYPE_BF16, tiled_attention=False)

#: llama.cpp's own defaults, for the benchmarks that compare against them.
LLAMACPP_DEFAULT = Kernels(
    tiled_kquants=True,
    repack_weights=True,
    kv_type=GGML_TYPE_F16,
    flash_attention=None,
    stream_per_sequence=False,
)


class KernelConflict(RuntimeError):
    """A process-wide switch is already set the other way in this process."""


def _native(lib: Any) -> Any:
    """The ctypes library behind the `llama_cpp` module (symbols of ggml's libraries too)."""
    return lib.llama_cpp._lib


def has_tiled_attention(lib: Any) -> bool:
    """Whether the loaded llama.cpp carries superfluid's attention patch."""
    return hasattr(_native(lib), "ggml_cpu_fa_tiled_enabled")


def served_kernels(lib: Any) -> Kernels:
    """What a model is served with: F16 and tiled attention where the patch is, else BF16."""
    if has_tiled_attention(lib):
        return BATCH_INVARIANT
    log.warning(
        "this llama-cpp-python lacks superfluid's attention patch, so models are served on a BF16 "
        "KV cache: output stays exact, prefill is about 40%% slower (scripts/install.sh builds it)"
    )
    return BF16_BATCH_INVARIANT


_applied_tiled: bool | None = None
_applied_attention: bool | None = None


def apply_process_switches(lib: Any, kernels: Kernels) -> None:
    """Set the process-wide switches before llama.cpp first reads them.

    llama.cpp reads `GGML_CPU_TILED_MM` once, at the first matmul of the process, and the patch
    reads `GGML_CPU_FA_TILED` once too, so every model of a process shares one setting; asking
    for the other one later is refused rather than silently ignored. Tiled attention is then
    asked back from the library: a patch that is missing, or a switch read before we set it,
    would otherwise cost exactness without a word.
    """
    global _applied_tiled, _applied_attention
    if _applied_tiled is not None and _applied_tiled != kernels.tiled_kquants:
        raise KernelConflict(
            "tiled K-quant matmul is a process-wide llama.cpp setting and this process already uses "
            + ("it" if _applied_tiled else "the untiled kernels")
        )
    if _applied_attention is not None and _applied_attention != kernels.tiled_attention:
        raise KernelConflict(
            "tiled attention is a process-wide llama.cpp setting and this process already "
            + ("uses it" if _applied_attention else "runs without it")
        )
    patched = has_tiled_attention(lib)
    if kernels.tiled_attention and not patched:
        raise KernelConflict("this llama.cpp lacks superfluid's tiled-attention patch")
    os.environ[TILED_ENV] = "1" if kernels.tiled_kquants else "0"
    os.environ[TILED_ATTENTION_ENV] = "1" if kernels.tiled_attention else "0"
    if patched and bool(_native(lib).ggml_cpu_fa_tiled_enabled()) != kernels.tiled_attention:
        raise KernelConflict(
            f"llama.cpp read {TILED_ATTENTION_ENV} before this process set it, so attention "
            + ("cannot be tiled" if kernels.tiled_attention else "stays tiled")
        )
    _applied_tiled = kernels.tiled_kquants
    _applied_attention = kernels.tiled_attention

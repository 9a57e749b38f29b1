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
  decodes past 512 cells and a tiled path for many-token batches; a BF16 cache stays on the
  one per-row path.
- **Cell order.** Attention sums over a sequence's cells in cell order. One unified cache
  hands cells freed by one lane to another, so a lane's cells leave position order depending on
  what other requests did; one cache stream per sequence keeps every lane's cells in order.

With these, rows are identical at every depth the gates can choose (up to 16), in prefill of
any length and with any other lanes in the step, so speculation (and, later, a reused prefix)
cannot change greedy output. The cost is measured in ADR 0008.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: ggml.h's type ids (llama-cpp-python does not export them all).
GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30

#: The process-wide switch for llama.cpp's tiled K-quant matmul (read at the first matmul).
TILED_ENV = "GGML_CPU_TILED_MM"


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

    @property
    def batch_invariant(self) -> bool:
        return self == BATCH_INVARIANT


#: The configuration every model is served with.
BATCH_INVARIANT = Kernels(
    tiled_kquants=False,
    repack_weights=False,
    kv_type=GGML_TYPE_BF16,
    flash_attention=True,
    stream_per_sequence=True,
)

#: llama.cpp's own defaults, for the benchmarks that compare against them.
LLAMACPP_DEFAULT = Kernels(
    tiled_kquants=True,
    repack_weights=True,
    kv_type=GGML_TYPE_F16,
    flash_attention=None,
    stream_per_sequence=False,
)


class KernelConflict(RuntimeError):
    """The tiled-matmul switch is per process, and this process already runs the other one."""


_applied_tiled: bool | None = None


def apply_process_switches(kernels: Kernels) -> None:
    """Set the process-wide switches before llama.cpp first reads them.

    llama.cpp reads `GGML_CPU_TILED_MM` once, at the first matmul of the process, so every model
    of a process shares one setting; asking for the other one later is refused rather than
    silently ignored.
    """
    global _applied_tiled
    if _applied_tiled is not None and _applied_tiled != kernels.tiled_kquants:
        raise KernelConflict(
            "tiled K-quant matmul is a process-wide llama.cpp setting and this process already uses "
            + ("it" if _applied_tiled else "the untiled kernels")
        )
    os.environ[TILED_ENV] = "1" if kernels.tiled_kquants else "0"
    _applied_tiled = kernels.tiled_kquants

"""Which llama.cpp CPU kernels a model runs on, chosen so that no row depends on its batch.

Speculative greedy output equals plain greedy output only if the logits row of a token is the
same bit for bit whether it is computed alone (plain decoding), among the k+1 rows of a verify
step, inside a 512-token prefill, or packed with other lanes' tokens. On this llama.cpp build a
row changes with its batch wherever a kernel is picked by batch shape (ADR 0008 has the
measurements, `bench/llamacpp_bitexact.py` reproduces them):

- **Tiled K-quant matmul.** From 8 rows on, K-quant and IQ weights that are not repacked go
  through a tiled kernel that sums in another order than the one-row dot products.
  superfluid's llama.cpp patch adds `GGML_CPU_TILED_ROW_ORDER=1`, read once per process: below
  8 rows Q2_K..Q6_K and IQ4_XS sum in the tiled kernel's order (x86 with AVX2 and FMA; on AVX-512
  builds Q2_K and Q4_K are then left unrepacked for it), and the other IQ types keep the dot
  product at every row count. Where the build has no such mode the tiled kernel is switched off
  (`GGML_CPU_TILED_MM=0`). Forced on for every row count instead (`GGML_CPU_TILED_MM_FORCE=1`)
  it is exact too, but one-row decoding pays for it (ADR 0008 has the cost).
- **Float and IQ4_NL weights.** tinyBLAS takes F32, F16, BF16 and IQ4_NL weights from 2 rows
  and the dot product the single row, in another order. superfluid's patch adds
  `GGML_CPU_SGEMM_ONE_ROW=1`: one-row products of these types take tinyBLAS too. Without it a
  model holding such weights (an F16 file, a mixture-of-experts model's F32 router) is served
  plainly (`kernel_inventory`).
- **Repacked weights.** The CPU "extra" buffer repacks Q4_K weights into interleaved blocks whose
  gemm (groups of 4 activation rows) and gemv (the 1-3 rows left over) sum in different orders.
  superfluid's llama.cpp patch adds `GGML_CPU_REPACK_GEMM=1`, read once per process: Q4_K's
  AVX2 gemv then sums in the gemm's order, Q4_0, IQ4_NL and MXFP4 keep their stock gemv (it
  already does), and other types pad the rows left over into a gemm group, so every row sums in
  the gemm's one order, at the repacked kernels' speed.
- **Attention.** Flash attention with an F16/F32 cache takes a split-KV path for one-token
  decodes past 512 cells, a per-row path (F16 sums) below 64 queries and a tiled path from 64.
  superfluid's llama.cpp patch adds `GGML_CPU_FA_TILED=1`, read once per process: every query
  count takes the tiled path, whose rows sum in one order whatever the batch, lanes or threads.
  A BF16 cache stays on the per-row path at every shape, exact but slow to prefill; it is what a
  llama.cpp without the patches is served with.
- **Cell order.** Attention sums over a sequence's cells in cell order. One unified cache
  hands cells freed by one lane to another, so a lane's cells leave position order depending on
  what other requests did; one cache stream per sequence keeps every lane's cells in order.

Two switches change speed only, computing every value as before, bit for bit:
`GGML_CPU_Q0_OFFSET_DOT=1` (superfluid's patch, AVX-512 VNNI builds) takes the sign trick out of
tinyBLAS's Q0 tiles (the Q8_0 vocabulary head, Q5_0 weights), and `GGML_CPU_Q0_PREFETCH=1` (AVX2
builds) makes those tiles prefetch the next block of weight rows (ADR 0017 has what each saves).
They are switches, not changes, so that the peer llama-server built from the same tree for the
benchmarks runs llama.cpp's own kernels.

With these, rows are identical at every depth (up to 65 rows), in prefill of any length and
with any other lanes in the step, so speculation (and a reused prefix) cannot change greedy
output. The cost is measured in ADR 0008.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

# The server's own logger: `superfluid serve` quiets "superfluid.llamacpp" (llama.cpp's log), and
# a user served on the fallback kernels must still be told.
log = logging.getLogger("superfluid")

#: ggml.h's type ids (llama-cpp-python does not export them all).
GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30

#: The process-wide switch for llama.cpp's tiled K-quant matmul (read at the first matmul).
TILED_ENV = "GGML_CPU_TILED_MM"
#: llama.cpp's own switch that takes the tiled K-quant path at every row count (read once too).
TILED_FORCE_ENV = "GGML_CPU_TILED_MM_FORCE"
#: The process-wide switch superfluid's patch adds: tiled flash attention at every query count.
TILED_ATTENTION_ENV = "GGML_CPU_FA_TILED"
#: The process-wide switch superfluid's patch adds: repacked weights' gemm at every row count.
REPACK_GEMM_ENV = "GGML_CPU_REPACK_GEMM"
#: The process-wide switch superfluid's patch adds: rows below the tiled kernel in its order.
TILED_ROW_ORDER_ENV = "GGML_CPU_TILED_ROW_ORDER"
#: The process-wide switch superfluid's patch adds: tinyBLAS's Q0 tiles without the sign trick.
Q0_OFFSET_DOT_ENV = "GGML_CPU_Q0_OFFSET_DOT"
#: The process-wide switch superfluid's patch adds: tinyBLAS's Q0 tiles prefetch the next rows.
Q0_PREFETCH_ENV = "GGML_CPU_Q0_PREFETCH"
#: The process-wide switch superfluid's patch adds: float and IQ4_NL weights through tinyBLAS at
#: one row too.
SGEMM_ONE_ROW_ENV = "GGML_CPU_SGEMM_ONE_ROW"


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
    #: Repacked weights through their gemm at every row count (needs superfluid's patch).
    repacked_gemm: bool = False
    #: Tiled K-quant matmul at every row count, not from 8 rows on (process-wide).
    tiled_kquants_forced: bool = False
    #: Rows below the tiled K-quant kernel's threshold in its order, and only the types that can
    #: do so tiled (needs superfluid's patch and an AVX2 build).
    tiled_row_order: bool = False
    #: tinyBLAS's Q0 tiles (Q8_0, Q5_0, Q4_0 weights) without the sign trick: the same values,
    #: bit for bit, and wide steps cheaper (ADR 0017; needs superfluid's patch and an AVX-512
    #: VNNI build; speed only, so `batch_invariant` does not look at it).
    offset_dot: bool = False
    #: tinyBLAS's Q0 tiles prefetch the next block of weight rows: the same values, and steps of
    #: a few rows cheaper (ADR 0017; needs superfluid's patch and an AVX2 build; speed only, so
    #: `batch_invariant` does not look at it).
    q0_prefetch: bool = False
    #: F32, F16, BF16 and IQ4_NL weights through tinyBLAS at one activation row too, as from two
    #: rows on (needs superfluid's patch and an x86 build): without it a token's row sums in
    #: another order alone than beside other rows wherever a model holds such weights (an F16 or
    #: BF16 file, a mixture-of-experts model's F32 router).
    float_one_row: bool = False

    @property
    def batch_invariant(self) -> bool:
        """Whether every knob is on a setting ADR 0008's matrix found invariant."""
        return (
            (not self.tiled_kquants or self.tiled_kquants_forced or self.tiled_row_order)
            and (not self.repack_weights or self.repacked_gemm)
            and self.flash_attention is True
            and (self.tiled_attention or self.kv_type == GGML_TYPE_BF16)
            and self.stream_per_sequence
        )

    def without_repacking(self) -> Kernels:
        """These kernels with weights left in the file's layout (stock dot products)."""
        return replace(self, repack_weights=False, repacked_gemm=False)

    def without_tiled_kquants(self) -> Kernels:
        """These kernels with K-quant weights on dot products at every row count."""
        return replace(self, tiled_kquants=False, tiled_row_order=False)


#: The configuration every model is served with where llama.cpp carries superfluid's patches.
BATCH_INVARIANT = Kernels(
    tiled_kquants=True,
    repack_weights=True,
    kv_type=GGML_TYPE_F16,
    flash_attention=True,
    stream_per_sequence=True,
    tiled_attention=True,
    repacked_gemm=True,
    tiled_row_order=True,
    offset_dot=True,
    q0_prefetch=True,
    float_one_row=True,
)

#: Exact on an unpatched llama.cpp too (BF16 stays on one per-row path; stock weight kernels),
#: at BF16's prefill cost.
BF16_BATCH_INVARIANT = replace(
    BATCH_INVARIANT.without_repacking().without_tiled_kquants(),
    kv_type=GGML_TYPE_BF16,
    tiled_attention=False,
    offset_dot=False,
    q0_prefetch=False,
    float_one_row=False,
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
    """A process-wide switch is already set the other way in this process."""


@dataclass(frozen=True, slots=True)
class _Switch:
    """A process-wide llama.cpp switch: an environment variable read once, at first use."""

    env: str
    #: The `Kernels` field it follows.
    field: str
    #: What it turns on, for messages.
    what: str
    #: The patch's function that says how the library read the switch (None: stock llama.cpp).
    marker: str | None = None
    #: The patch's function that says whether this build can honour the switch at all.
    supported: str | None = None


_SWITCHES = (
    _Switch(TILED_ENV, "tiled_kquants", "tiled K-quant matmul"),
    _Switch(TILED_FORCE_ENV, "tiled_kquants_forced", "tiled K-quant matmul at every row count"),
    _Switch(TILED_ATTENTION_ENV, "tiled_attention", "tiled attention", "ggml_cpu_fa_tiled_enabled"),
    _Switch(REPACK_GEMM_ENV, "repacked_gemm", "the repacked gemm", "ggml_cpu_repack_gemm_enabled"),
    _Switch(
        TILED_ROW_ORDER_ENV,
        "tiled_row_order",
        "the tiled kernel's row order",
        "ggml_cpu_tiled_row_order_enabled",
        "ggml_cpu_tiled_row_order_supported",
    ),
    _Switch(
        Q0_OFFSET_DOT_ENV,
        "offset_dot",
        "tinyBLAS's offset dot product",
        "ggml_cpu_q0_offset_dot_enabled",
        "ggml_cpu_q0_offset_dot_supported",
    ),
    _Switch(
        Q0_PREFETCH_ENV,
        "q0_prefetch",
        "tinyBLAS's prefetch",
        "ggml_cpu_q0_prefetch_enabled",
        "ggml_cpu_q0_prefetch_supported",
    ),
    _Switch(
        SGEMM_ONE_ROW_ENV,
        "float_one_row",
        "tinyBLAS at one row for float and IQ4_NL weights",
        "ggml_cpu_sgemm_one_row_enabled",
        "ggml_cpu_sgemm_one_row_supported",
    ),
)


def native_library(lib: Any) -> Any:
    """The ctypes library behind the `llama_cpp` module (symbols of ggml's libraries too)."""
    return lib.llama_cpp._lib


def _switch(field: str) -> _Switch:
    return next(switch for switch in _SWITCHES if switch.field == field)


def _carries(lib: Any, switch: _Switch) -> bool:
    """Whether the library has the switch's patch and, where that depends on the build, can
    honour it (asked without reading the switch)."""
    if switch.marker is None:
        return True
    native = native_library(lib)
    if not hasattr(native, switch.marker):
        return False
    return switch.supported is None or bool(getattr(native, switch.supported)())


def has_tiled_attention(lib: Any) -> bool:
    """Whether the loaded llama.cpp carries superfluid's attention patch."""
    return _carries(lib, _switch("tiled_attention"))


def has_repacked_gemm(lib: Any) -> bool:
    """Whether the loaded llama.cpp carries superfluid's repacked-gemm patch."""
    return _carries(lib, _switch("repacked_gemm"))


def has_tiled_row_order(lib: Any) -> bool:
    """Whether the loaded llama.cpp sums rows below its tiled kernel in that kernel's order."""
    return _carries(lib, _switch("tiled_row_order"))


def has_offset_dot(lib: Any) -> bool:
    """Whether the loaded llama.cpp can take the sign trick out of tinyBLAS's Q0 tiles."""
    return _carries(lib, _switch("offset_dot"))


def has_q0_prefetch(lib: Any) -> bool:
    """Whether the loaded llama.cpp can make tinyBLAS's Q0 tiles prefetch the next rows."""
    return _carries(lib, _switch("q0_prefetch"))


def has_float_one_row(lib: Any) -> bool:
    """Whether the loaded llama.cpp can send one-row products of float and IQ4_NL weights to
    tinyBLAS."""
    return _carries(lib, _switch("float_one_row"))


def served_kernels(lib: Any) -> Kernels:
    """What a model is served with: each patch the library carries, exact either way."""
    if not has_tiled_attention(lib):
        log.warning(
            "this llama-cpp-python lacks superfluid's attention patch, so models are served on a "
            "BF16 KV cache: output stays exact, prefill is about 40%% slower "
            "(scripts/install.sh builds it)"
        )
        return BF16_BATCH_INVARIANT
    kernels = BATCH_INVARIANT
    if not has_repacked_gemm(lib):
        log.warning(
            "this llama-cpp-python lacks superfluid's repacked-gemm patch, so weights are not "
            "repacked: output stays exact, prefill is about 5%% slower (scripts/install.sh builds it)"
        )
        kernels = kernels.without_repacking()
    if not has_tiled_row_order(lib):
        # A build without the mode (no patch, or not x86 with AVX2 and FMA): dot products.
        kernels = kernels.without_tiled_kquants()
    if not has_offset_dot(lib):
        kernels = replace(kernels, offset_dot=False)  # the stock tiles: same values, slower
    if not has_q0_prefetch(lib):
        kernels = replace(kernels, q0_prefetch=False)  # the same values, small steps slower
    if not has_float_one_row(lib):
        kernels = replace(kernels, float_one_row=False)  # see kernel_inventory.inexact
    return kernels


_applied: dict[str, bool] = {}


def apply_process_switches(lib: Any, kernels: Kernels) -> None:
    """Set the process-wide switches before llama.cpp first reads them.

    llama.cpp reads `GGML_CPU_TILED_MM` once, at the first matmul of the process, and the
    patches read theirs once too, so every model of a process shares one setting; asking for the
    other one later is refused rather than silently ignored. A patched switch is then asked back
    from the library: a patch that is missing, or a switch read before we set it, would
    otherwise cost exactness without a word.
    """
    for switch in _SWITCHES:
        wanted: bool = getattr(kernels, switch.field)
        applied = _applied.get(switch.env)
        if applied is not None and applied != wanted:
            raise KernelConflict(
                f"{switch.what} is a process-wide llama.cpp setting and this process "
                + ("already uses it" if applied else "runs without it")
            )
        if wanted and not _carries(lib, switch):
            raise KernelConflict(f"this llama.cpp lacks superfluid's patch for {switch.what}")
    for switch in _SWITCHES:
        os.environ[switch.env] = "1" if getattr(kernels, switch.field) else "0"
    for switch in _SWITCHES:
        wanted = getattr(kernels, switch.field)
        read = _read_back(lib, switch)
        if read is not None and read != wanted:
            raise KernelConflict(
                f"llama.cpp read {switch.env} before this process set it, so "
                + (f"{switch.what} cannot be used" if wanted else f"{switch.what} stays on")
            )
    for switch in _SWITCHES:
        _applied[switch.env] = getattr(kernels, switch.field)


def _read_back(lib: Any, switch: _Switch) -> bool | None:
    """How the library read a patched switch; None where it cannot say (stock llama.cpp)."""
    if switch.marker is None or not _carries(lib, switch):
        return None
    return bool(getattr(native_library(lib), switch.marker)())

"""Which kernels a llama.cpp model is served on, and how the process-wide switches are guarded."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from superfluid.adapters.llamacpp import kernels
from superfluid.adapters.llamacpp.kernels import (
    BATCH_INVARIANT,
    BF16_BATCH_INVARIANT,
    GGML_TYPE_F16,
    LLAMACPP_DEFAULT,
    KernelConflict,
    apply_process_switches,
    served_kernels,
)


class _Native:
    """The ctypes library: each patch it carries answers whether its switch was read on."""

    def __init__(
        self,
        attention: bool | None,
        repack: bool | None,
        row_order: bool | None,
        supported: bool,
        offset: bool | None = None,
        offset_supported: bool = True,
        prefetch: bool | None = None,
        prefetch_supported: bool = True,
        one_row: bool | None = None,
        one_row_supported: bool = True,
    ) -> None:
        if one_row is not None:
            self.ggml_cpu_sgemm_one_row_enabled = lambda: int(one_row and one_row_supported)
            self.ggml_cpu_sgemm_one_row_supported = lambda: int(one_row_supported)
        if attention is not None:
            self.ggml_cpu_fa_tiled_enabled = lambda: int(attention)
        if repack is not None:
            self.ggml_cpu_repack_gemm_enabled = lambda: int(repack)
        if row_order is not None:
            self.ggml_cpu_tiled_row_order_enabled = lambda: int(row_order and supported)
            self.ggml_cpu_tiled_row_order_supported = lambda: int(supported)
        if offset is not None:
            self.ggml_cpu_q0_offset_dot_enabled = lambda: int(offset and offset_supported)
            self.ggml_cpu_q0_offset_dot_supported = lambda: int(offset_supported)
        if prefetch is not None:
            self.ggml_cpu_q0_prefetch_enabled = lambda: int(prefetch and prefetch_supported)
            self.ggml_cpu_q0_prefetch_supported = lambda: int(prefetch_supported)


def _lib(
    attention: bool | None,
    repack: bool | None = None,
    row_order: bool | None = None,
    supported: bool = True,
    offset: bool | None = None,
    offset_supported: bool = True,
    prefetch: bool | None = None,
    prefetch_supported: bool = True,
    one_row: bool | None = None,
    one_row_supported: bool = True,
) -> Any:
    """A library; None for a patch it lacks, else how it read that patch's switch. A build
    without the row-order mode (`supported=False`), the offset dot product (not AVX-512 VNNI,
    `offset_supported=False`) or the prefetching tiles (not AVX2, `prefetch_supported=False`)
    reads that switch as off."""
    native = _Native(
        attention,
        repack,
        row_order,
        supported,
        offset,
        offset_supported,
        prefetch,
        prefetch_supported,
        one_row,
        one_row_supported,
    )
    return SimpleNamespace(llama_cpp=SimpleNamespace(_lib=native))


def _patched(**read: bool) -> Any:
    """A library with every patch, each switch read on unless `read` says otherwise."""
    every = {
        "attention": True,
        "repack": True,
        "row_order": True,
        "offset": True,
        "prefetch": True,
        "one_row": True,
    }
    return _lib(**{**every, **read})


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_applied", {})
    for env in (
        kernels.TILED_ENV,
        kernels.TILED_FORCE_ENV,
        kernels.TILED_ATTENTION_ENV,
        kernels.REPACK_GEMM_ENV,
        kernels.TILED_ROW_ORDER_ENV,
        kernels.Q0_OFFSET_DOT_ENV,
        kernels.Q0_PREFETCH_ENV,
        kernels.SGEMM_ONE_ROW_ENV,
    ):
        monkeypatch.delenv(env, raising=False)


def test_a_patched_llama_cpp_serves_every_patched_kernel() -> None:
    chosen = served_kernels(_patched())
    assert chosen == BATCH_INVARIANT
    assert chosen.kv_type == GGML_TYPE_F16 and chosen.tiled_attention
    assert chosen.repack_weights and chosen.repacked_gemm
    assert chosen.tiled_kquants and chosen.tiled_row_order
    assert chosen.offset_dot and chosen.q0_prefetch and chosen.float_one_row
    assert chosen.batch_invariant


@pytest.mark.parametrize("library", [{"one_row": None}, {"one_row_supported": False}])
def test_a_build_without_float_tinyblas_at_one_row_serves_without_it(
    library: dict[str, Any],
) -> None:
    # The kernels stay invariant for quantized weights; float weights are refused per model
    # (kernel_inventory.inexact).
    chosen = served_kernels(_patched(**library))
    assert chosen == replace(BATCH_INVARIANT, float_one_row=False)


def test_a_build_without_the_row_order_mode_serves_no_tiled_k_quants() -> None:
    # Not x86 with AVX2 and FMA: dot products at every row count.
    chosen = served_kernels(_patched(supported=False))
    assert not chosen.tiled_kquants and not chosen.tiled_row_order and chosen.batch_invariant
    assert chosen.repack_weights and chosen.tiled_attention


#: The speed-only modes: each moves no value, so a build without one serves the stock tiles.
SPEED_ONLY = [
    # Not AVX-512 VNNI, or no patch 0006: tinyBLAS keeps its sign trick.
    ("offset_dot", {"offset_supported": False}),
    ("offset_dot", {"offset": None}),
    # Not AVX2, or no patch 0007: tinyBLAS leaves its weights to the hardware prefetcher.
    ("q0_prefetch", {"prefetch_supported": False}),
    ("q0_prefetch", {"prefetch": None}),
]


@pytest.mark.parametrize(("mode", "library"), SPEED_ONLY)
def test_a_build_without_a_speed_only_mode_serves_the_stock_tiles(
    mode: str, library: dict[str, Any]
) -> None:
    chosen = served_kernels(_patched(**library))
    assert not getattr(chosen, mode)
    assert chosen == replace(BATCH_INVARIANT, **{mode: False}) and chosen.batch_invariant


@pytest.mark.parametrize("mode", ["offset_dot", "q0_prefetch"])
def test_the_speed_only_modes_leave_invariance_alone(mode: str) -> None:
    # They move no value (scripts/patches/0006-*, 0007-*), so invariance does not depend on them.
    assert replace(BATCH_INVARIANT, **{mode: False}).batch_invariant
    assert not getattr(LLAMACPP_DEFAULT, mode) and not getattr(BF16_BATCH_INVARIANT, mode)


def test_an_unpatched_llama_cpp_serves_bf16_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="superfluid"):
        chosen = served_kernels(_lib(attention=None))
    assert chosen == BF16_BATCH_INVARIANT and chosen.batch_invariant
    assert not chosen.repack_weights and not chosen.tiled_kquants
    assert "lacks superfluid's attention patch" in caplog.text
    assert "\n" not in caplog.records[0].getMessage()


def test_a_llama_cpp_without_the_repack_patch_serves_unrepacked_weights(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="superfluid"):
        chosen = served_kernels(_lib(attention=True, repack=None, row_order=True))
    assert chosen.tiled_attention and not chosen.repack_weights and chosen.batch_invariant
    assert "lacks superfluid's repacked-gemm patch" in caplog.text


def test_the_server_log_shows_the_fallback_warning(capsys: pytest.CaptureFixture[str]) -> None:
    # `superfluid serve` sets up its logging this way, llama.cpp's own log quieted.
    from superfluid.entrypoints import cli

    logger = logging.getLogger("superfluid")
    native = logging.getLogger("superfluid.llamacpp")
    saved = (logger.handlers[:], logger.level, logger.propagate, native.level)
    try:
        cli._setup_logging()
        served_kernels(_lib(attention=None))
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved[:3]
        native.setLevel(saved[3])
    assert "superfluid: this llama-cpp-python lacks superfluid's attention patch" in (
        capsys.readouterr().err
    )


def test_the_defaults_are_not_batch_invariant() -> None:
    assert not LLAMACPP_DEFAULT.batch_invariant


@pytest.mark.parametrize(
    "knob",
    [
        {"tiled_row_order": False},
        {"repacked_gemm": False},
        {"tiled_attention": False},
        {"flash_attention": None},
        {"stream_per_sequence": False},
    ],
)
def test_any_knob_turned_back_to_llama_cpp_loses_invariance(knob: dict[str, Any]) -> None:
    assert not replace(BATCH_INVARIANT, **knob).batch_invariant


def test_tiled_k_quants_at_every_row_count_are_invariant_but_not_served() -> None:
    # Exact (the tiled kernel at every row count), but one-row decoding pays ~12% (ADR 0008).
    forced = replace(BATCH_INVARIANT, tiled_row_order=False, tiled_kquants_forced=True)
    assert forced.batch_invariant
    assert not BATCH_INVARIANT.tiled_kquants_forced


def test_switches_are_set_before_llama_cpp_reads_them() -> None:
    apply_process_switches(_patched(), BATCH_INVARIANT)
    assert os.environ[kernels.TILED_ENV] == "1"
    assert os.environ[kernels.TILED_ROW_ORDER_ENV] == "1"
    assert os.environ[kernels.TILED_FORCE_ENV] == "0"
    assert os.environ[kernels.TILED_ATTENTION_ENV] == "1"
    assert os.environ[kernels.REPACK_GEMM_ENV] == "1"
    assert os.environ[kernels.Q0_OFFSET_DOT_ENV] == "1"
    assert os.environ[kernels.Q0_PREFETCH_ENV] == "1"


def test_tiled_attention_without_the_patch_is_refused() -> None:
    with pytest.raises(KernelConflict, match="lacks superfluid's patch for tiled attention"):
        apply_process_switches(_patched(attention=None), BATCH_INVARIANT)


def test_the_repacked_gemm_without_the_patch_is_refused_and_nothing_is_set() -> None:
    with pytest.raises(KernelConflict, match="lacks superfluid's patch for the repacked gemm"):
        apply_process_switches(_patched(repack=None), BATCH_INVARIANT)
    assert kernels.TILED_ATTENTION_ENV not in os.environ


@pytest.mark.parametrize(
    ("patch", "env"),
    [
        ("attention", "GGML_CPU_FA_TILED"),
        ("repack", "GGML_CPU_REPACK_GEMM"),
        ("row_order", "GGML_CPU_TILED_ROW_ORDER"),
        ("offset", "GGML_CPU_Q0_OFFSET_DOT"),
        ("prefetch", "GGML_CPU_Q0_PREFETCH"),
    ],
)
def test_a_switch_llama_cpp_already_read_the_other_way_is_refused(patch: str, env: str) -> None:
    # llama.cpp reads each switch once: had something computed before we set it, asking the
    # library back is the only way to know.
    with pytest.raises(KernelConflict, match=f"read {env} before"):
        apply_process_switches(_patched(**{patch: False}), BATCH_INVARIANT)


def test_a_second_model_cannot_ask_for_the_other_attention() -> None:
    apply_process_switches(_patched(), BATCH_INVARIANT)
    with pytest.raises(KernelConflict, match="is a process-wide"):
        apply_process_switches(_patched(), BF16_BATCH_INVARIANT)

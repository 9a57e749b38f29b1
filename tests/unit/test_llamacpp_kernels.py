"""Which kernels a llama.cpp model is served on, and how the process-wide switches are guarded."""

from __future__ import annotations

import logging
import os
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
    """The ctypes library: with the patch it answers whether the switch was read on."""

    def __init__(self, reads_on: bool | None) -> None:
        if reads_on is not None:
            self.ggml_cpu_fa_tiled_enabled = lambda: int(reads_on)


def _lib(reads_on: bool | None) -> Any:
    return SimpleNamespace(llama_cpp=SimpleNamespace(_lib=_Native(reads_on)))


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_applied_tiled", None)
    monkeypatch.setattr(kernels, "_applied_attention", None)
    monkeypatch.delenv(kernels.TILED_ENV, raising=False)
    monkeypatch.delenv(kernels.TILED_ATTENTION_ENV, raising=False)


def test_a_patched_llama_cpp_serves_f16_with_tiled_attention() -> None:
    chosen = served_kernels(_lib(reads_on=True))
    assert chosen == BATCH_INVARIANT
    assert chosen.kv_type == GGML_TYPE_F16 and chosen.tiled_attention
    assert chosen.batch_invariant


def test_an_unpatched_llama_cpp_serves_bf16_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="superfluid.llamacpp"):
        chosen = served_kernels(_lib(reads_on=None))
    assert chosen == BF16_BATCH_INVARIANT and chosen.batch_invariant
    assert "lacks superfluid's attention patch" in caplog.text
    assert "\n" not in caplog.records[0].getMessage()


def test_the_defaults_are_not_batch_invariant() -> None:
    assert not LLAMACPP_DEFAULT.batch_invariant


def test_switches_are_set_before_llama_cpp_reads_them() -> None:
    apply_process_switches(_lib(reads_on=True), BATCH_INVARIANT)
    assert os.environ[kernels.TILED_ENV] == "0"
    assert os.environ[kernels.TILED_ATTENTION_ENV] == "1"


def test_tiled_attention_without_the_patch_is_refused() -> None:
    with pytest.raises(KernelConflict, match="lacks superfluid's tiled-attention patch"):
        apply_process_switches(_lib(reads_on=None), BATCH_INVARIANT)


def test_a_switch_llama_cpp_already_read_the_other_way_is_refused() -> None:
    # llama.cpp reads the switch once: had something computed attention before we set it,
    # asking the library back is the only way to know.
    with pytest.raises(KernelConflict, match="read GGML_CPU_FA_TILED before"):
        apply_process_switches(_lib(reads_on=False), BATCH_INVARIANT)


def test_a_second_model_cannot_ask_for_the_other_attention() -> None:
    apply_process_switches(_lib(reads_on=True), BATCH_INVARIANT)
    with pytest.raises(KernelConflict, match="tiled attention is a process-wide"):
        apply_process_switches(_lib(reads_on=True), BF16_BATCH_INVARIANT)

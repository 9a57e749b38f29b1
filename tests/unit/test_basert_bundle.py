"""Opening `.base` bundles for their weights: dtypes, and one clear refusal for every damage."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from superfluid.adapters.basert.bundle import (
    Bundle,
    BundleError,
    bf16_to_f32,
    canonical_dtype,
    f32_to_bf16,
)
from superfluid.adapters.basert.model_config import ModelConfig, cut_refusal
from superfluid.adapters.bundle_files import read_header, write_bundle
from superfluid.domain.bundle_header import header_from_json, weights_offset
from superfluid.domain.errors import SuperfluidError


def tensor_bundle(path: Path, tensors: list[dict[str, object]], weights: bytes) -> Path:
    write_bundle(path, {"schema": 1, "arch": "qwen3", "tensors": tensors}, weights=weights)
    return path


def entry(name: str, dtype: str, shape: list[int], offset: int, length: int) -> dict[str, object]:
    return {"name": name, "dtype": dtype, "shape": shape, "offset": offset, "length": length}


def test_f32_f16_and_bf16_tensors_read_as_float32(tmp_path: Path) -> None:
    values = np.array([[1.0, -2.5], [0.15625, 384.0]], dtype=np.float32)
    f32 = values.astype("<f4").tobytes()
    f16 = values.astype("<f2").tobytes()
    bf16 = f32_to_bf16(values).astype("<u2").tobytes()
    blob = f32 + f16 + bf16
    path = tensor_bundle(
        tmp_path / "m.base",
        [
            entry("a", "F32", [2, 2], 0, 16),
            entry("b", "float16", [2, 2], 16, 8),
            entry("c", "bf16", [2, 2], 24, 8),
        ],
        blob,
    )
    with Bundle.open(path) as bundle:
        for name in "abc":
            got = bundle.tensor(name)
            assert got.dtype == np.float32 and got.shape == (2, 2)
            np.testing.assert_array_equal(got, values)


def test_bf16_is_the_high_half_of_an_f32() -> None:
    bits = np.array([0x3F80, 0xC020, 0x0000, 0x8000, 0x4049], dtype=np.uint16)
    np.testing.assert_array_equal(
        bf16_to_f32(bits), np.array([1.0, -2.5, 0.0, -0.0, 3.140625], dtype=np.float32)
    )


def test_rounding_to_bf16_goes_to_the_nearest_even() -> None:
    # 1 + 2^-8 lies exactly between two bf16 values; the even one is 1.0.
    halfway = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9], dtype=np.float32)
    np.testing.assert_array_equal(
        bf16_to_f32(f32_to_bf16(halfway)), np.array([1.0, 1.0 + 2**-6, 1.0], dtype=np.float32)
    )


def test_dtype_names_are_read_in_any_case() -> None:
    assert [canonical_dtype(d) for d in ("F32", "fp16", "BF16", "bfloat16", "base_q4")] == [
        "f32",
        "f16",
        "bf16",
        "bf16",
        None,
    ]


@pytest.mark.parametrize(
    ("tensors", "weights", "message"),
    [
        (
            [entry("w", "f32", [2, 2], 0, 12)],
            bytes(16),
            r"tensor w: f32 \[2, 2\] takes 16 bytes, but its length is 12",
        ),
        (
            [entry("w", "f32", [4], 8, 16)],
            bytes(16),
            r"tensor w runs past the end of the weights \(8 \+ 16 bytes > 16\)",
        ),
        (
            [entry("w", "f16", [2], 0, 4), entry("w", "f16", [2], 4, 4)],
            bytes(8),
            r"tensor w is listed twice",
        ),
        ([entry("w", "bf16", [3], 0, 6)], b"", r"tensor w runs past the end"),
    ],
)
def test_a_damaged_tensor_table_is_one_error_naming_file_and_tensor(
    tmp_path: Path, tensors: list[dict[str, object]], weights: bytes, message: str
) -> None:
    path = tensor_bundle(tmp_path / "bad.base", tensors, weights)
    with pytest.raises(BundleError, match=message) as caught:
        Bundle.open(path)
    assert caught.value.message.startswith(str(path))
    assert isinstance(caught.value, SuperfluidError)


def test_a_truncated_bundle_is_refused_at_every_length_never_with_a_crash(tmp_path: Path) -> None:
    values = np.arange(32, dtype=np.float32)
    whole = tensor_bundle(
        tmp_path / "whole.base",
        [entry("a", "f32", [16], 0, 64), entry("b", "f16", [16], 64, 32)],
        values[:16].tobytes() + values[16:].astype("<f2").tobytes(),
    )
    data = whole.read_bytes()
    start = weights_offset(struct.unpack_from("<4sIQ", data)[2])
    cuts = [0, 3, 16, 40, start - 1, start, start + 1, start + 63, start + 64, start + 95]
    for cut in cuts:
        path = tmp_path / f"cut{cut}.base"
        path.write_bytes(data[:cut])
        with pytest.raises(BundleError) as caught, Bundle.open(path) as bundle:
            bundle.tensor("a")
            bundle.tensor("b")
        assert str(path) in caught.value.message
    with Bundle.open(whole) as bundle:
        np.testing.assert_array_equal(bundle.tensor("b"), values[16:])


def test_a_quantised_tensor_opens_but_is_refused_when_read(tmp_path: Path) -> None:
    path = tensor_bundle(
        tmp_path / "q.base", [entry("layers.0.q.weight", "BASE_Q4", [4, 4], 0, 8)], bytes(8)
    )
    with (
        Bundle.open(path) as bundle,
        pytest.raises(
            BundleError, match=r"is BASE_Q4; the reference backend reads f32, f16 and bf16"
        ),
    ):
        bundle.tensor("layers.0.q.weight")


def test_missing_tensors_wrong_shapes_and_non_finite_values_are_named(tmp_path: Path) -> None:
    blob = np.array([1.0, np.inf], dtype=np.float32).tobytes()
    path = tensor_bundle(tmp_path / "m.base", [entry("a", "f32", [2], 0, 8)], blob)
    with Bundle.open(path) as bundle:
        with pytest.raises(BundleError, match="has no tensor b"):
            bundle.tensor("b")
        with pytest.raises(
            BundleError, match=r"tensor a has shape \[2\], the model's config needs \[3\]"
        ):
            bundle.tensor("a", (3,))
        with pytest.raises(BundleError, match="tensor a holds NaN or infinite values"):
            bundle.tensor("a")


def test_what_is_not_a_bundle_is_a_bundle_error(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such file"):
        Bundle.open(tmp_path / "absent.base")
    junk = tmp_path / "junk.base"
    junk.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(BundleError, match="is a GGUF model"):
        Bundle.open(junk)
    bad_header = tmp_path / "bad-header.base"
    body = b"{not json"
    bad_header.write_bytes(struct.pack("<4sIQ", b"BASE", 1, len(body)) + body)
    with pytest.raises(BundleError, match="not valid JSON"):
        Bundle.open(bad_header)


def test_a_bundle_without_weights_opens(tmp_path: Path) -> None:
    path = tensor_bundle(tmp_path / "empty.base", [entry("z", "f32", [0, 4], 0, 0)], b"")
    with Bundle.open(path) as bundle:
        assert bundle.tensor("z").shape == (0, 4)
        assert list(bundle.names()) == ["z"]


# -- what the reference backend reads from a header's config ----------------------------------


def config_header(arch: str = "qwen3", **config: object) -> dict[str, object]:
    base: dict[str, object] = {
        "hidden_size": 64,
        "vocab_size": 100,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
    }
    return {"arch": arch, "config": {**base, **config}}


def test_config_defaults_follow_hf() -> None:
    config = ModelConfig.from_header(header_from_json(config_header("llama")), "m.base")
    assert (config.head_dim, config.rms_norm_eps, config.rope_theta) == (16, 1e-6, 10000.0)
    assert not config.tie_word_embeddings


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (config_header("gemma3"), r"arch gemma3 is not one the reference backend runs"),
        (config_header("mamba"), r"arch mamba keeps recurrent state"),
        (config_header(rope_scaling={"rope_type": "llama3"}), r"config.rope_scaling \(llama3\)"),
        (config_header(use_sliding_window=True), r"use_sliding_window is on"),
        (config_header(num_key_value_heads=3), r"not a multiple of config.num_key_value_heads"),
        (config_header(hidden_size=None), r"config has no hidden_size"),
        (config_header(rms_norm_eps="small"), r"config.rms_norm_eps must be a number"),
    ],
)
def test_configs_the_reference_backend_cannot_run_are_refused_in_one_line(
    document: dict[str, object], message: str
) -> None:
    with pytest.raises(BundleError, match=message):
        ModelConfig.from_header(header_from_json(document), "m.base")


def test_recurrent_and_hybrid_models_cannot_cut_their_state() -> None:
    assert cut_refusal(header_from_json(config_header("qwen3"))) is None
    assert (
        cut_refusal(header_from_json(config_header("rwkv7")))
        == "recurrent state cuts only at its head"
    )
    hybrid = config_header("qwen3", layer_types=["linear_attention", "full_attention"])
    assert cut_refusal(header_from_json(hybrid)) == "recurrent state cuts only at its head"


def test_the_header_still_reads_with_the_domain_reader(tmp_path: Path) -> None:
    # The tensor naming keeps the domain's storage-quantisation rule working.
    tensors = [
        entry("embed_tokens.weight", "f32", [2, 2], 0, 16),
        entry("layers.0.q_proj.weight", "bf16", [2, 2], 16, 8),
    ]
    path = tensor_bundle(tmp_path / "m.base", tensors, bytes(24))
    assert read_header(path).quantisation == "bf16"


def test_the_engine_line_is_true_on_the_platform_it_runs_on() -> None:
    from superfluid.adapters.basert.runtime import engine_note

    linux = engine_note("t.base", "Linux", "x86_64")
    assert linux.startswith("the libbaseRT engine has no build for Linux x86_64")
    mac = engine_note("t.base", "Darwin", "arm64")
    assert "no build" not in mac and mac.startswith("running t.base on the reference backend")

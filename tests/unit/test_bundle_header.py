import json
import struct
from typing import Any

import pytest

from superfluid.domain.bundle_header import (
    MAX_HEADER_LEN,
    PREFIX_SIZE,
    BundleHeader,
    TensorEntry,
    header_from_json,
    parse_header,
    parse_prefix,
    weights_offset,
)
from superfluid.domain.errors import HeaderError


def prefix(header_len: int, *, magic: bytes = b"BASE", version: int = 1) -> bytes:
    return magic + struct.pack("<IQ", version, header_len)


def bundle_bytes(document: Any) -> bytes:
    body = json.dumps(document).encode()
    return prefix(len(body)) + body


def read(document: Any) -> BundleHeader:
    return parse_header(bundle_bytes(document))


FULL_TARGET = {
    "schema": 1,
    "arch": "qwen35",
    "quant_scheme": "default-q4",
    "min_hw": "m1",
    "created": 1_750_000_000,
    "baserT_version": "0.2.5",
    "source": {"filename": "Qwen3.8-27B", "repo": "Qwen/Qwen3.8-27B"},
    "tokenizer": {"kind": "bpe"},
    "target_backend": "cuda_sm121",
    "speculator": {"config": {"kind": "mtp", "depth": 3}},
    "config": {
        "hidden_size": 5120,
        "vocab_size": 248320,
        "num_hidden_layers": 64,
        "block_size": 16,
        "rope_theta": 1e7,
    },
    "tensors": [
        {"name": "embed.weight", "dtype": "F16", "shape": [248320, 5120], "offset": 0, "length": 8},
        {"name": "layers.0.input_norm.weight", "dtype": "F32", "shape": [5120], "offset": 8},
        {
            "name": "layers.0.attn.q.weight",
            "dtype": "BASE_Q4",
            "shape": [5120, 5120],
            "offset": 16,
            "length": 32,
            "scales": "q4",
        },
    ],
    "flags": ["tiled"],
}


# --- the prefix ----------------------------------------------------------------------------


def test_the_prefix_is_sixteen_bytes_of_magic_version_and_length() -> None:
    assert PREFIX_SIZE == 16
    assert parse_prefix(prefix(1234)) == 1234


def test_a_prefix_shorter_than_sixteen_bytes_is_too_short() -> None:
    with pytest.raises(HeaderError, match=r"too short .*: 10 bytes"):
        parse_prefix(prefix(5)[:10])


def test_a_wrong_magic_is_refused_and_shown() -> None:
    with pytest.raises(HeaderError, match=r"bad magic b'GGUF'"):
        parse_prefix(prefix(5, magic=b"GGUF"))


@pytest.mark.parametrize("version", [0, 2, 0xFFFFFFFF])
def test_any_version_other_than_one_is_refused_by_number(version: int) -> None:
    with pytest.raises(HeaderError, match=rf"version {version} is not supported"):
        parse_prefix(prefix(5, version=version))


def test_a_header_length_of_zero_is_refused() -> None:
    with pytest.raises(HeaderError, match=r"header length is 0"):
        parse_prefix(prefix(0))


def test_a_header_length_over_256_mib_is_refused() -> None:
    with pytest.raises(HeaderError, match=r"header length 268435457 is over 256 MiB"):
        parse_prefix(prefix(MAX_HEADER_LEN + 1))
    with pytest.raises(HeaderError, match=r"over 256 MiB"):
        parse_prefix(prefix(2**64 - 1))


def test_a_header_of_exactly_256_mib_is_not_over_the_limit() -> None:
    assert parse_prefix(prefix(256 * 1024 * 1024)) == 256 * 1024 * 1024


# --- where the weights start ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("header_len", "offset"),
    [(1, 65536), (65536 - 16 - 1, 65536), (65536 - 16, 65536), (65536 - 15, 131072)],
)
def test_the_weights_start_at_the_next_64_kib_boundary(header_len: int, offset: int) -> None:
    assert weights_offset(header_len) == offset


# --- the JSON body -------------------------------------------------------------------------


def test_a_full_header_reads_into_typed_fields() -> None:
    header = read(FULL_TARGET)
    assert header.arch == "qwen35"
    assert (header.hidden_size, header.vocab_size, header.num_hidden_layers) == (5120, 248320, 64)
    assert header.num_target_layers is None
    assert header.target_layer_ids == ()
    assert header.aux_layer_ids == ()
    assert header.target_backend == "cuda_sm121"
    assert header.quantisation == "q4"
    assert header.created == 1_750_000_000
    assert header.speculator_kind == "mtp"
    assert header.has_mtp_head
    assert header.baserT_version == "0.2.5"
    assert header.source_filename == "Qwen3.8-27B"
    assert header.block_size == 16
    assert header.tensors[2] == TensorEntry(
        name="layers.0.attn.q.weight", dtype="BASE_Q4", shape=(5120, 5120), offset=16, length=32
    )
    assert header.raw["tokenizer"] == {"kind": "bpe"}


def test_a_drafter_header_reads_its_target_layer_taps() -> None:
    header = read(
        {
            "arch": "eagle3",
            "config": {
                "hidden_size": 2560,
                "vocab_size": 151936,
                "num_hidden_layers": 1,
                "num_target_layers": 36,
                "target_layer_ids": [1, 17, 33],
                "aux_layer_ids": [2, 3],
            },
        }
    )
    assert header.num_target_layers == 36
    assert header.target_layer_ids == (1, 17, 33)
    assert header.aux_layer_ids == (2, 3)


def test_a_minimal_header_takes_the_documented_defaults() -> None:
    header = read({"arch": "qwen3"})
    assert header.arch == "qwen3"
    assert header.hidden_size is header.vocab_size is header.num_hidden_layers is None
    assert header.target_backend == "metal"
    assert header.backend_class == "metal"
    assert header.quantisation is None
    assert header.created == 0
    assert header.speculator_kind is None
    assert not header.has_mtp_head
    assert header.baserT_version is None
    assert header.source_filename is None
    assert header.block_size is None
    assert header.tensors == ()


def test_an_empty_object_reads_with_an_empty_arch() -> None:
    assert read({}).arch == ""


def test_null_values_read_as_absent() -> None:
    header = read({"arch": "x", "config": None, "target_backend": None, "created": None})
    assert header.target_backend == "metal"
    assert header.created == 0


def test_unknown_keys_are_ignored() -> None:
    document = {"arch": "qwen3", "shiny_new_key": [1, {"x": None}], "config": {"novel": "yes"}}
    assert read(document).arch == "qwen3"


def test_bytes_after_the_header_are_ignored() -> None:
    assert parse_header(bundle_bytes({"arch": "qwen3"}) + b"\x00" * 100).arch == "qwen3"


def test_header_from_json_reads_an_already_decoded_object() -> None:
    assert header_from_json(FULL_TARGET) == read(FULL_TARGET)


# --- header errors -------------------------------------------------------------------------


def test_parse_header_applies_every_prefix_check() -> None:
    with pytest.raises(HeaderError, match="bad magic"):
        parse_header(b"GGUF" + bundle_bytes({})[4:])


def test_a_header_length_past_the_end_of_the_file_is_refused() -> None:
    data = bundle_bytes({"arch": "qwen3"})
    with pytest.raises(HeaderError, match=r"runs past the end of the file \(20 bytes\)"):
        parse_header(data, file_size=20)


def test_a_header_ending_exactly_at_the_end_of_the_file_reads() -> None:
    data = bundle_bytes({"arch": "qwen3"})
    assert parse_header(data, file_size=len(data)).arch == "qwen3"


def test_a_header_cut_short_is_refused() -> None:
    data = bundle_bytes({"arch": "qwen3"})
    with pytest.raises(HeaderError, match=r"cut short: 3 of 17 bytes"):
        parse_header(data[: PREFIX_SIZE + 3])


def test_a_header_that_is_not_utf8_is_refused() -> None:
    body = b'{"arch": "\xff"}'
    with pytest.raises(HeaderError, match=r"not UTF-8 \(byte 10\)"):
        parse_header(prefix(len(body)) + body)


def test_a_header_that_is_not_json_is_refused() -> None:
    body = b'{"arch": '
    with pytest.raises(HeaderError, match=r"not valid JSON \(Expecting value at line 1"):
        parse_header(prefix(len(body)) + body)


def test_nan_and_infinity_are_not_json() -> None:
    body = b'{"created": NaN}'
    with pytest.raises(HeaderError, match=r"not valid JSON \(NaN is not JSON\)"):
        parse_header(prefix(len(body)) + body)


def test_deeply_nested_json_is_refused_not_crashed_on() -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(HeaderError, match="not valid JSON"):
        parse_header(prefix(len(body)) + body)


@pytest.mark.parametrize(
    ("document", "shown"),
    [
        ([1, 2], "an array"),
        ("hi", "a string"),
        (3, "a number"),
        (None, "null"),
        (True, "a boolean"),
    ],
)
def test_a_header_that_is_not_a_json_object_is_refused(document: Any, shown: str) -> None:
    with pytest.raises(HeaderError, match=rf"is JSON {shown}, not an object"):
        read(document)


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"arch": 3}, "arch"),
        ({"target_backend": ["metal"]}, "target_backend"),
        ({"quant_scheme": 4}, "quant_scheme"),
        ({"baserT_version": 0.2}, "baserT_version"),
        ({"config": []}, "config"),
        ({"config": {"hidden_size": "2560"}}, "config.hidden_size"),
        ({"config": {"vocab_size": 1.5}}, "config.vocab_size"),
        ({"config": {"num_hidden_layers": True}}, "config.num_hidden_layers"),
        ({"config": {"num_target_layers": -1}}, "config.num_target_layers"),
        ({"config": {"block_size": "16"}}, "config.block_size"),
        ({"config": {"target_layer_ids": 3}}, "config.target_layer_ids"),
        ({"config": {"target_layer_ids": [1, "2"]}}, "config.target_layer_ids"),
        ({"config": {"aux_layer_ids": [-1]}}, "config.aux_layer_ids"),
        ({"speculator": "mtp"}, "speculator"),
        ({"speculator": {"config": 1}}, "speculator.config"),
        ({"speculator": {"config": {"kind": 1}}}, "speculator.config.kind"),
        ({"source": "hf"}, "source"),
        ({"source": {"filename": ["a"]}}, "source.filename"),
        ({"created": [2024]}, "created"),
        ({"created": True}, "created"),
        ({"tensors": {}}, "tensors"),
        ({"tensors": ["x"]}, r"tensors\[0\]"),
        ({"tensors": [{"name": "a"}, {"dtype": "f16"}]}, r"tensors\[1\] has no name"),
        ({"tensors": [{"name": 7}]}, r"tensors\[0\]\.name"),
        ({"tensors": [{"name": "a", "dtype": 16}]}, r"tensors\[0\]\.dtype"),
        ({"tensors": [{"name": "a", "shape": [2, -2]}]}, r"tensors\[0\]\.shape"),
        ({"tensors": [{"name": "a", "offset": "0"}]}, r"tensors\[0\]\.offset"),
        ({"tensors": [{"name": "a", "length": 1.0}]}, r"tensors\[0\]\.length"),
    ],
)
def test_a_key_of_the_wrong_type_is_refused_by_name(document: dict[str, Any], key: str) -> None:
    with pytest.raises(HeaderError, match=rf"header's {key}"):
        read(document)


# --- backend -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "backend_class"),
    [("metal", "metal"), ("cuda", "cuda"), ("cuda_sm121", "cuda"), ("rocm", "rocm")],
)
def test_cuda_and_cuda_sm121_are_one_backend_class(backend: str, backend_class: str) -> None:
    header = read({"target_backend": backend})
    assert header.target_backend == backend
    assert header.backend_class == backend_class


# --- storage quantisation ------------------------------------------------------------------


def test_storage_quantisation_is_the_first_two_d_layer_weight_dtype() -> None:
    header = read(
        {
            "quant_scheme": "default-q4",
            "tensors": [
                {"name": "tok_embeddings.weight", "dtype": "f16", "shape": [10, 4]},
                {"name": "layers.0.norm.weight", "dtype": "f32", "shape": [4]},
                {"name": "layers.0.mlp.up.bias", "dtype": "f32", "shape": [4, 4]},
                {"name": "layers.0.mlp.up.weight", "dtype": "Q8_0", "shape": [4, 4]},
                {"name": "layers.1.mlp.up.weight", "dtype": "q4", "shape": [4, 4]},
            ],
        }
    )
    assert header.quantisation == "q8_0"


def test_storage_quantisation_falls_back_to_the_quant_scheme() -> None:
    header = read(
        {
            "quant_scheme": "BASE_Q4",
            "tensors": [{"name": "layers.0.norm.weight", "dtype": "f32", "shape": [4]}],
        }
    )
    assert header.quantisation == "q4"


def test_a_layer_weight_without_a_dtype_defers_to_the_quant_scheme() -> None:
    header = read(
        {"quant_scheme": "q8", "tensors": [{"name": "layers.0.w.weight", "shape": [2, 2]}]}
    )
    assert header.quantisation == "q8"


def test_the_base_prefix_is_stripped_only_at_the_start() -> None:
    assert read({"quant_scheme": "base_q4"}).quantisation == "q4"
    assert read({"quant_scheme": "q4_base_"}).quantisation == "q4_base_"


# --- created -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("created", "seconds"),
    [
        (1_700_000_000, 1_700_000_000),
        (1_700_000_000.5, 1_700_000_000.5),
        ("1700000000", 1_700_000_000),
        (" 1700000000 ", 1_700_000_000),
        ("2024-01-02T03:04:05Z", 1_704_164_645),
        ("2024-01-02t03:04:05z", 1_704_164_645),
        ("2024-01-02 03:04:05Z", 1_704_164_645),
        ("2024-01-02T03:04:05.25Z", 1_704_164_645.25),
        ("2024-01-02T05:04:05+02:00", 1_704_164_645),
        ("2024-01-01T22:04:05-05:00", 1_704_164_645),
        ("2024-01-02T03:04:05", 1_704_164_645),
        ("2016-12-31T23:59:60Z", 1_483_228_800),
        ("last tuesday", 0),
        ("2024-13-02T03:04:05Z", 0),
        ("2024-01-02", 0),
        ("2024-01-02T03:04:05+24:00", 0),
        ("", 0),
        ("inf", 0),
    ],
)
def test_created_is_epoch_seconds_from_a_number_or_rfc3339(created: Any, seconds: float) -> None:
    assert read({"created": created}).created == seconds


# --- the MTP head --------------------------------------------------------------------------


def glm(layers: int, *, tensor_layer: int, kind: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "arch": "glm_dsa",
        "config": {"num_hidden_layers": layers},
        "tensors": [
            {"name": "layers.0.self_attn.q_a_proj.weight"},
            {"name": f"layers.{tensor_layer}.eh_proj.weight"},
        ],
    }
    if kind is not None:
        document["speculator"] = {"config": {"kind": kind}}
    return document


def test_a_speculator_of_kind_mtp_is_an_mtp_head() -> None:
    assert read({"arch": "qwen35", "speculator": {"config": {"kind": "mtp"}}}).has_mtp_head


def test_a_speculator_of_another_kind_is_not_an_mtp_head() -> None:
    header = read({"arch": "qwen35", "speculator": {"config": {"kind": "eagle3"}}})
    assert header.speculator_kind == "eagle3"
    assert not header.has_mtp_head


def test_a_glm_dsa_nextn_layer_past_the_last_hidden_layer_is_an_mtp_head() -> None:
    assert read(glm(2, tensor_layer=2)).has_mtp_head


def test_a_glm_dsa_eh_proj_inside_the_hidden_layers_is_not_an_mtp_head() -> None:
    assert not read(glm(3, tensor_layer=2)).has_mtp_head


def test_an_eh_proj_tensor_counts_only_for_glm_dsa() -> None:
    document = glm(2, tensor_layer=2)
    document["arch"] = "qwen35"
    assert not read(document).has_mtp_head


def test_a_glm_dsa_without_a_layer_count_has_no_nextn_head() -> None:
    document = glm(2, tensor_layer=2)
    document["config"] = {}
    assert not read(document).has_mtp_head


def test_a_declared_speculator_kind_outranks_the_glm_tensor_probe() -> None:
    assert not read(glm(2, tensor_layer=2, kind="eagle3")).has_mtp_head


# --- value semantics -----------------------------------------------------------------------


def test_headers_compare_and_hash_without_their_raw_json() -> None:
    plain = read({"arch": "qwen3"})
    decorated = read({"arch": "qwen3", "metadata": {"note": "ignored"}})
    assert plain == decorated
    assert hash(plain) == hash(decorated)
    assert plain.raw != decorated.raw
    assert read({"arch": "qwen3"}) != read({"arch": "llama"})


def test_headers_are_immutable() -> None:
    header = read({"arch": "qwen3"})
    with pytest.raises(AttributeError):
        header.arch = "llama"  # type: ignore[misc]

import pytest

from superfluid.domain.naming import (
    bundle_names,
    is_artifact_tag,
    model_name_for_path,
    normalise_name,
)


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        # The contract's own examples.
        ("Qwen3.8-27B-mtpq4-Q4", "qwen3.8-27b"),
        ("qwen3-4b-iq4_xs", "qwen3-4b"),
        ("Qwen3.8-27B-DFlash2-Q4-tiled", "qwen3.8-27b-dflash2"),
        # File extensions go, repeatedly and wherever a tag cut exposes one.
        ("Qwen3-4B-Q4.base", "qwen3-4b"),
        ("Qwen3-4B.gguf", "qwen3-4b"),
        ("Qwen3-4B.safetensors", "qwen3-4b"),
        ("qwen3-4b-fp8.gguf.base", "qwen3-4b"),
        ("qwen3-4b.gguf-q4", "qwen3-4b"),
        # Any of the three separators leads a tag.
        ("gemma-3-1b-it.Q8_0.gguf", "gemma-3-1b-it"),
        ("gemma-3-1b-it_Q4_K_M.gguf", "gemma-3-1b-it"),
        ("Llama-3.1-8B-Instruct-Q4_K_M", "llama-3.1-8b-instruct"),
        ("Qwen3-4B-DFlash-b16-bf16", "qwen3-4b-dflash-b16"),
        # Letters, digits and `.` stay; other characters separate.
        ("Qwen3 4B Instruct", "qwen3-4b-instruct"),
        ("Qwen3_4B__Instruct", "qwen3-4b-instruct"),
        ("Qwen3 4B Q4", "qwen3-4b"),
        ("Qwen3(4B)!", "qwen3-4b"),
        ("foo.base_", "foo"),
        # Not artifact tags: these parts say what the model is.
        ("whisper-large-v3-turbo", "whisper-large-v3-turbo"),
        ("Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b-instruct-2507"),
        ("gemma-4-E2B-it", "gemma-4-e2b-it"),
        ("Muse-Glimmer-30B-kquant-17gb", "muse-glimmer-30b-kquant-17gb"),
        ("qwen3-4b-q4x", "qwen3-4b-q4x"),
        ("qwen3-4b-q", "qwen3-4b-q"),
        ("qwen3-4b-q4_z", "qwen3-4b-q4-z"),
        ("qwen3-4b-f64", "qwen3-4b-f64"),
        ("qwen3-4b-mtp", "qwen3-4b-mtp"),
    ],
)
def test_a_name_is_lowercased_and_loses_its_artifact_tags(raw: str, normalised: str) -> None:
    assert normalise_name(raw) == normalised


@pytest.mark.parametrize(
    "tag",
    [
        "tiled",
        "f16",
        "bf16",
        "f32",
        "fp16",
        "fp8",
        "int4",
        "int8",
        "mxfp4",
        "nvfp4",
        "4bit",
        "8bit",
    ],
)
def test_every_storage_word_is_an_artifact_tag(tag: str) -> None:
    assert is_artifact_tag(tag)
    assert normalise_name(f"Qwen3-4B-{tag.upper()}") == "qwen3-4b"


@pytest.mark.parametrize(
    "tag",
    [
        "q4",
        "q8",
        "q16",
        "iq4",
        "mtpq4",
        "mtpiq2",
        "q8_0",
        "q4_1",
        "q4_k",
        "q4_k_m",
        "q4_k_s",
        "q3_k_l",
        "iq4_xs",
        "iq2_xxs",
        "iq3_xl",
        "mtpiq3_k_s",
    ],
)
def test_a_quantisation_label_is_an_artifact_tag(tag: str) -> None:
    assert is_artifact_tag(tag)


@pytest.mark.parametrize(
    "part",
    ["q", "qk", "iq", "mtp", "q4x", "q4_z", "q4_", "q4__k", "xq4", "imtpq4", "f64", "tiles", "-q4"],
)
def test_other_parts_are_not_artifact_tags(part: str) -> None:
    assert not is_artifact_tag(part)


@pytest.mark.parametrize(
    "generic",
    [
        "model.base",
        "MODEL.gguf",
        "models",
        "model-q4.base",
        "model2",
        "model1of2",
        "model-00001-of-00002.safetensors",
        "pytorch_model-q4",
        "pytorch_model-00003-of-00004",
        "weights",
        "weights.safetensors",
        "weight3",
        "checkpoint",
        "checkpoints",
        "ckpt",
        "consolidated",
        "consolidated.00",
        "adapter",
        "adapter_model.safetensors",
    ],
)
def test_a_generic_file_name_names_nothing(generic: str) -> None:
    assert normalise_name(generic) is None


@pytest.mark.parametrize("short", ["", "  ", "ab", "a-b-", "Q4.base", "x-q4_k_m"])
def test_a_name_under_three_characters_names_nothing(short: str) -> None:
    assert normalise_name(short) is None


@pytest.mark.parametrize("only_tags", ["Q4_K_M.gguf", "IQ4_XS", "bf16.safetensors", "q8-tiled"])
def test_a_name_made_only_of_artifact_tags_names_nothing(only_tags: str) -> None:
    assert normalise_name(only_tags) is None


def test_a_generic_word_inside_a_real_name_is_kept() -> None:
    assert normalise_name("my-model-7b") == "my-model-7b"
    assert normalise_name("modelnet") == "modelnet"


def test_a_pulled_bundle_is_named_by_its_repository() -> None:
    parts = ("home", "me", ".cache", "baseRT", "models", "basecompute", "Qwen3-4B", "default-q4")
    assert model_name_for_path((*parts, "model.base")) == "Qwen3-4B"


def test_any_other_file_is_named_by_its_file_name() -> None:
    assert model_name_for_path(("models", "Qwen3-4B-Q4.base")) == "Qwen3-4B-Q4.base"
    assert model_name_for_path(("a", "b", "c", "weights.base")) == "weights.base"


def test_a_model_base_without_repository_directories_is_named_by_its_file_name() -> None:
    assert model_name_for_path(("model.base",)) == "model.base"
    assert model_name_for_path(("v", "model.base")) == "model.base"
    assert model_name_for_path(()) == ""


def test_a_bundle_answers_to_its_path_name_and_its_header_source_name() -> None:
    parts = ("drafters", "Qwen3-4B-DFlash-Q4.base")
    assert bundle_names(parts, "Qwen/Qwen3-4B-DFlash") == (
        "qwen3-4b-dflash",
        "qwen-qwen3-4b-dflash",
    )


def test_a_bundle_drops_names_that_name_nothing_and_duplicates() -> None:
    assert bundle_names(("x", "model.base"), None) == ()
    assert bundle_names(("x", "model.base"), "Qwen3-4B") == ("qwen3-4b",)
    assert bundle_names(("Qwen3-4B-Q8.base",), "qwen3-4b-bf16") == ("qwen3-4b",)

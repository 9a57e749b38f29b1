"""A model's own sampling defaults: read from its file, applied to requests that set nothing.

Precedence (docs/contract.md §8): the request's value, then `--temperature`, then the model's
default; `--spec-max-temperature` caps only the model's default temperature.
"""

from __future__ import annotations

import json
import time

import pytest

from superfluid.adapters.llamacpp.sampling_defaults import gguf_sampling_defaults
from superfluid.adapters.mlx.record import RECORD as MLX
from superfluid.application.executor import Executor
from superfluid.application.ports import ModelFile
from superfluid.application.registration import Registration
from superfluid.application.request_defaults import RequestDefaults, SamplingAsked
from superfluid.application.service import ModelHost
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling_defaults import (
    BUILT_IN_SAMPLING,
    SamplingDefaults,
    from_generation_config,
    sampling_defaults,
)
from superfluid.domain.strategies import Strategy
from tests.fakes import FakeRuntime


def model_sampling_defaults(kind, path, runtime):
    assert kind == "mlx"
    return MLX.sampling_defaults(ModelFile(path, kind), runtime)


QWEN_LIKE = {
    "general.sampling.temp": "0.600000",
    "general.sampling.top_k": "20",
    "general.sampling.top_p": "0.950000",
    "general.sampling.min_p": "0.000000",
    "general.architecture": "qwen3",
}


def test_gguf_sampling_keys_become_the_models_defaults() -> None:
    found, notes = gguf_sampling_defaults(QWEN_LIKE.get)
    assert notes == []
    assert found == SamplingDefaults(
        temperature=0.6,
        top_k=20,
        top_p=0.95,
        min_p=0.0,
        repeat_penalty=None,
        source="GGUF general.sampling.*",
    )
    assert found.describe() == "temperature 0.6, top_k 20, top_p 0.95, min_p 0"


def test_a_gguf_without_sampling_keys_sets_no_defaults() -> None:
    assert gguf_sampling_defaults({"general.architecture": "gemma3"}.get) == (None, [])


def test_a_bad_value_is_ignored_with_its_reason_and_the_others_kept() -> None:
    found, notes = sampling_defaults({"temperature": "hot", "top_p": "0", "top_k": 40}, "x")
    assert found is not None and found.top_k == 40 and found.temperature == 0.8
    assert found.top_p is None
    assert notes == [
        "temperature 'hot' (expected a number in [0, 2])",
        "top_p '0' (expected a number in (0, 1])",
    ]


def test_generation_config_names_map_onto_ours() -> None:
    config = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    found, _ = from_generation_config(config, "generation_config.json")
    assert found is not None
    assert (found.temperature, found.top_p, found.top_k, found.repeat_penalty) == (
        0.7,
        0.8,
        20,
        1.05,
    )


def test_an_mlx_directorys_generation_config_is_read(tmp_path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.3}))
    found, notes = model_sampling_defaults("mlx", tmp_path, object())
    assert found is not None and found.temperature == 0.3
    assert found.source == "generation_config.json" and notes == []


def test_a_broken_generation_config_leaves_the_built_in_defaults_with_a_note(tmp_path) -> None:
    (tmp_path / "generation_config.json").write_text("{not json")
    found, notes = model_sampling_defaults("mlx", tmp_path, object())
    assert found is None and len(notes) == 1 and "does not read as JSON" in notes[0]
    assert model_sampling_defaults("mlx", tmp_path / "absent", object()) == (None, [])


# -- applying them -----------------------------------------------------------------------------


def host(sampling: SamplingDefaults, *, speculates: bool = True) -> ModelHost:
    runtime = FakeRuntime()
    drafter = PromptLookupDrafter() if speculates else None
    executor = Executor(runtime, max_lanes=1, clock=time.perf_counter, drafter=drafter)
    registration = Registration(Strategy.PROMPT_LOOKUP if speculates else None, drafter, ())
    return ModelHost("m", runtime, registration, None, executor, sampling=sampling)


def params(body: dict, model: SamplingDefaults, **server: float | None):
    return RequestDefaults(**server).sampling(SamplingAsked(**body), host(model))  # type: ignore[arg-type]


MODEL = SamplingDefaults(
    temperature=1.0, top_k=20, top_p=0.9, min_p=0.05, repeat_penalty=1.1, source="x"
)


def test_a_request_that_sets_nothing_gets_the_models_defaults() -> None:
    got = params({}, MODEL)
    assert (got.temperature, got.top_k, got.top_p, got.min_p, got.repeat_penalty) == (
        1.0,
        20,
        0.9,
        0.05,
        1.1,
    )


def test_the_requests_own_values_win() -> None:
    got = params({"temperature": 0.2, "top_p": 1.0, "top_k": 0, "min_p": 0.0}, MODEL)
    assert (got.temperature, got.top_k, got.top_p, got.min_p) == (0.2, 0, 1.0, 0.0)


def test_the_command_lines_temperature_wins_over_the_models() -> None:
    assert params({}, MODEL, temperature=0.4).temperature == 0.4


def test_the_speculation_cap_applies_to_the_models_default_only() -> None:
    assert params({}, MODEL, max_temperature=0.5).temperature == 0.5
    assert params({"temperature": 0.9}, MODEL, max_temperature=0.5).temperature == 0.9
    assert params({}, MODEL, temperature=0.9, max_temperature=0.5).temperature == 0.9


def test_without_model_defaults_the_built_in_ones_apply() -> None:
    got = params({}, BUILT_IN_SAMPLING)
    assert (got.temperature, got.top_k, got.top_p, got.min_p) == (0.8, 0, 1.0, 0.0)


@pytest.mark.parametrize("raw", ["nan", "-1", "3"])
def test_an_out_of_range_temperature_is_not_a_default(raw: str) -> None:
    assert sampling_defaults({"temperature": raw}, "x")[0] is None

from dataclasses import replace
from typing import Any

import pytest

from superfluid.domain.bundle_header import BundleHeader, header_from_json
from superfluid.domain.drafters import (
    Candidate,
    auto_eligible,
    fit_problem,
    fits,
    is_named_for,
    is_named_for_any,
    kind_of,
    rank_candidates,
    rank_key,
    same_quantisation,
)
from superfluid.domain.strategies import Strategy


def target(**overrides: Any) -> BundleHeader:
    document: dict[str, Any] = {
        "arch": "qwen3",
        "quant_scheme": "base_q4",
        "config": {"hidden_size": 2560, "vocab_size": 151936, "num_hidden_layers": 36},
    }
    document.update(overrides)
    return header_from_json(document)


def drafter(
    arch: str = "dflash", *, config: dict[str, Any] | None = None, **top: Any
) -> BundleHeader:
    shape: dict[str, Any] = {
        "hidden_size": 2560,
        "vocab_size": 151936,
        "num_hidden_layers": 5,
        "num_target_layers": 36,
        "target_layer_ids": [1, 9, 17, 25, 35],
    }
    shape.update(config or {})
    return header_from_json({"arch": arch, "quant_scheme": "base_q4", "config": shape, **top})


# --- kinds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "kind"),
    [
        ("dspark", Strategy.DSPARK),
        ("dflash", Strategy.DFLASH),
        ("eagle3", Strategy.EAGLE3),
        ("qwen3", Strategy.DRAFT_MODEL),
        ("DFlash", Strategy.DRAFT_MODEL),
        ("", Strategy.DRAFT_MODEL),
    ],
)
def test_the_drafter_kind_comes_from_the_header_arch(arch: str, kind: Strategy) -> None:
    assert kind_of(header_from_json({"arch": arch})) is kind


def test_the_drafter_kinds_are_the_directive_prefixes() -> None:
    assert [k.value for k in Strategy if k.needs_file] == [
        "dflash",
        "dspark",
        "eagle3",
        "draft-model",
    ]


def test_auto_prefers_dspark_then_dflash_then_eagle3_and_never_a_draft_model() -> None:
    by_auto = sorted((k for k in Strategy if k.by_auto), key=lambda k: k.auto_rank or 0)
    assert by_auto == [Strategy.DSPARK, Strategy.DFLASH, Strategy.EAGLE3]


@pytest.mark.parametrize(
    ("arch", "eligible"), [("dspark", True), ("dflash", True), ("eagle3", True)]
)
def test_dspark_dflash_and_eagle3_drafters_are_auto_candidates(arch: str, eligible: bool) -> None:
    assert auto_eligible(drafter(arch)) is eligible


def test_a_plain_draft_model_is_never_an_auto_candidate_even_when_it_fits() -> None:
    small = drafter("qwen3")
    assert fits(target(), small)
    assert not auto_eligible(small)


# --- fit -----------------------------------------------------------------------------------


def test_a_drafter_with_the_targets_shape_fits() -> None:
    assert fit_problem(target(), drafter()) is None
    assert fits(target(), drafter())


def test_a_different_hidden_size_does_not_fit() -> None:
    assert fit_problem(target(), drafter(config={"hidden_size": 4096})) == (
        "hidden size 4096, not the target's 2560"
    )


def test_a_different_vocab_size_does_not_fit() -> None:
    assert fit_problem(target(), drafter(config={"vocab_size": 151665})) == (
        "vocab size 151665, not the target's 151936"
    )


def test_an_unknown_shape_on_either_side_does_not_fit() -> None:
    assert fit_problem(target(config={"vocab_size": 1}), drafter()) == (
        "the target's header gives no hidden size"
    )
    assert fit_problem(target(), drafter(config={"vocab_size": None})) == (
        "the drafter's header gives no vocab size (the target's is 151936)"
    )


def test_num_target_layers_must_be_the_targets_layer_count() -> None:
    assert fit_problem(target(), drafter(config={"num_target_layers": 28})) == (
        "num_target_layers 28, not the target's 36 layers"
    )


def test_num_target_layers_cannot_match_a_target_without_a_layer_count() -> None:
    no_layers = target(config={"hidden_size": 2560, "vocab_size": 151936})
    assert fit_problem(no_layers, drafter()) == (
        "num_target_layers 36, but the target's header gives no layer count"
    )


def test_a_drafter_without_num_target_layers_is_not_held_to_one() -> None:
    assert fits(target(), drafter(config={"num_target_layers": None}))


def test_a_target_layer_id_must_be_below_the_targets_layer_count() -> None:
    taps = {"num_target_layers": None, "target_layer_ids": [1, 36, 40]}
    assert fit_problem(target(), drafter(config=taps)) == (
        "target_layer_ids entry 36 is not below the target's 36 layers"
    )


def test_an_aux_layer_id_must_be_below_the_targets_layer_count() -> None:
    taps = {"aux_layer_ids": [0, 99]}
    assert fit_problem(target(), drafter(config=taps)) == (
        "aux_layer_ids entry 99 is not below the target's 36 layers"
    )


def test_layer_ids_are_unchecked_against_a_target_of_unknown_depth() -> None:
    no_layers = target(config={"hidden_size": 2560, "vocab_size": 151936})
    assert fits(no_layers, drafter(config={"num_target_layers": None, "target_layer_ids": [99]}))


def test_a_drafter_for_another_backend_class_does_not_fit() -> None:
    assert fit_problem(target(), drafter(target_backend="cuda")) == (
        "backend cuda, not the target's metal (a different backend class)"
    )


def test_a_missing_backend_is_metal() -> None:
    assert fits(target(target_backend="metal"), drafter())
    assert not fits(target(target_backend="cuda"), drafter())


def test_cuda_and_cuda_sm121_drafters_fit_each_others_targets() -> None:
    assert fits(target(target_backend="cuda"), drafter(target_backend="cuda_sm121"))
    assert fits(target(target_backend="cuda_sm121"), drafter(target_backend="cuda"))


# --- naming and quantisation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("drafter_name", "target_name", "named"),
    [
        ("Qwen3-4B-DFlash-Q4.base", "Qwen3-4B-Q4.base", True),
        ("Qwen3.8-27B-DFlash2-Q4-tiled", "Qwen3.8-27B-mtpq4-Q4", True),
        ("qwen3-4b-eagle3-iq4_xs.base", "Qwen3-4B", True),
        ("Qwen3-4B-DFlash-Q4.base", "Qwen3-8B-Q4.base", False),
        ("Qwen3-4B-DFlash-Q4.base", "Qwen3-4B-Instruct-2507-Q4.base", False),
        ("Qwen3-14B-DFlash.base", "Qwen3-4B.base", False),
        ("model.base", "model.base", False),
        ("Qwen3-4B-DFlash.base", "model.base", False),
        ("ab", "ab", False),
    ],
)
def test_a_drafter_is_named_for_a_target_whose_normalised_name_it_contains(
    drafter_name: str, target_name: str, named: bool
) -> None:
    assert is_named_for(drafter_name, target_name) is named


def test_any_drafter_name_may_match_any_target_name() -> None:
    assert is_named_for_any(["model.base", "Qwen3-4B-DSpark"], ["weights", "Qwen3-4B-Q4"])
    assert not is_named_for_any(["model.base"], ["Qwen3-4B-Q4"])
    assert not is_named_for_any([], ["Qwen3-4B-Q4"])


def test_same_storage_quantisation_compares_the_normalised_quantisation() -> None:
    q4 = target(quant_scheme="BASE_Q4")
    assert same_quantisation(q4, drafter())
    assert not same_quantisation(q4, drafter(quant_scheme="base_q8"))


def test_an_unknown_quantisation_is_never_the_same() -> None:
    unknown = target(quant_scheme=None)
    assert not same_quantisation(unknown, header_from_json({"arch": "dflash"}))


# --- order ---------------------------------------------------------------------------------

HEADER = drafter()


def candidate(path: str = "/d/x.base", **facts: Any) -> Candidate:
    defaults: dict[str, Any] = {
        "kind": Strategy.DFLASH,
        "catalog_paired": False,
        "speculator_rank": None,
        "named_for_target": False,
        "same_quantisation": False,
        "created": 0.0,
    }
    defaults.update(facts)
    return Candidate(path=path, header=HEADER, **defaults)


def picked(*candidates: Candidate) -> str:
    return rank_candidates(candidates)[0].path


def test_a_catalog_paired_drafter_comes_first() -> None:
    paired = candidate("/z", catalog_paired=True, kind=Strategy.EAGLE3, created=0)
    other = candidate(
        "/a",
        speculator_rank=0,
        named_for_target=True,
        kind=Strategy.DSPARK,
        same_quantisation=True,
        created=9e9,
    )
    assert picked(other, paired) == "/z"


def test_a_lower_speculator_rank_comes_before_a_higher_one() -> None:
    first = candidate("/z", catalog_paired=True, speculator_rank=1)
    second = candidate("/a", catalog_paired=True, speculator_rank=2, named_for_target=True)
    assert picked(second, first) == "/z"


def test_no_speculator_rank_comes_after_any_rank() -> None:
    ranked = candidate("/z", catalog_paired=True, speculator_rank=10**9)
    unranked = candidate("/a", catalog_paired=True, named_for_target=True)
    assert picked(unranked, ranked) == "/z"


def test_auto_prefers_a_drafter_named_for_the_target_over_a_same_shape_one() -> None:
    named = candidate("/z", named_for_target=True, kind=Strategy.EAGLE3)
    unnamed = candidate("/a", kind=Strategy.DSPARK, same_quantisation=True, created=9e9)
    assert picked(unnamed, named) == "/z"


def test_dspark_comes_before_dflash_before_eagle3() -> None:
    eagle = candidate("/a", kind=Strategy.EAGLE3, same_quantisation=True, created=9e9)
    dflash = candidate("/b", kind=Strategy.DFLASH, same_quantisation=True)
    dspark = candidate("/c", kind=Strategy.DSPARK)
    assert [c.path for c in rank_candidates([eagle, dflash, dspark])] == ["/c", "/b", "/a"]


def test_the_targets_storage_quantisation_comes_first_among_equals() -> None:
    same = candidate("/z", same_quantisation=True)
    newer = candidate("/a", created=9e9)
    assert picked(newer, same) == "/z"


def test_the_newest_drafter_comes_first_among_equals() -> None:
    assert picked(candidate("/a", created=1.0), candidate("/z", created=2.0)) == "/z"


def test_the_path_settles_a_tie() -> None:
    assert picked(candidate("/b"), candidate("/a")) == "/a"


def test_the_rank_key_reads_the_facts_in_the_contracts_order() -> None:
    best = candidate(
        "/p",
        catalog_paired=True,
        speculator_rank=3,
        named_for_target=True,
        kind=Strategy.DSPARK,
        same_quantisation=True,
        created=5.0,
    )
    assert rank_key(best) == (False, False, 3, False, 0, False, -5.0, "/p")


def test_every_key_matters_on_its_own() -> None:
    base = candidate("/same")
    better = [
        replace(base, catalog_paired=True),
        replace(base, speculator_rank=7),
        replace(base, named_for_target=True),
        replace(base, kind=Strategy.DSPARK),
        replace(base, same_quantisation=True),
        replace(base, created=1.0),
        replace(base, path="/earlier"),
    ]
    for improved in better:
        assert rank_key(improved) < rank_key(base), improved


def test_a_candidate_writes_its_directive() -> None:
    assert str(candidate("/m/d.base", kind=Strategy.DSPARK).pick) == "dspark:/m/d.base"

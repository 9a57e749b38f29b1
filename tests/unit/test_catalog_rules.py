import json
from pathlib import Path
from typing import Any

import pytest

from superfluid.domain.catalog import (
    CatalogRow,
    catalog_id_of,
    digest_verdict,
    is_paired,
    needs_sha256,
    parse_catalog,
    pinned_row,
    sha_problem,
    size_problem,
)

HUB_CATALOG = Path(__file__).parents[2].parent / "shared" / "data" / "hub-catalog.json"

PULLED = ("home", "me", ".cache", "baseRT", "models")
SHA_A = "a" * 64
SHA_B = "b" * 64


@pytest.fixture(scope="module")
def hub_rows() -> tuple[CatalogRow, ...]:
    if not HUB_CATALOG.is_file():
        pytest.skip(f"the real hub catalog copy is not at {HUB_CATALOG}")
    return parse_catalog(json.loads(HUB_CATALOG.read_text()))


def row(**fields: Any) -> CatalogRow:
    defaults: dict[str, Any] = {
        "id": "basecompute/Qwen3-4B-DFlash",
        "file": "Qwen3-4B-DFlash-Q4.base",
        "quant": "default-q4",
        "size": 1000,
        "sha256": SHA_A,
        "speculator_for": None,
        "speculator_rank": None,
    }
    defaults.update(fields)
    return CatalogRow(**defaults)


# --- reading the real catalog --------------------------------------------------------------


def test_every_row_of_the_real_hub_catalog_reads(hub_rows: tuple[CatalogRow, ...]) -> None:
    document = json.loads(HUB_CATALOG.read_text())
    assert len(hub_rows) == len(document["models"]) > 0
    assert all(r.id and r.file and r.quant and r.size and r.sha256 for r in hub_rows)
    assert all(r.pins_bytes for r in hub_rows)


def test_the_real_catalog_lists_one_row_per_variant(hub_rows: tuple[CatalogRow, ...]) -> None:
    qwen = [r for r in hub_rows if r.id == "basecompute/Qwen3-4B"]
    assert {r.quant: r.file for r in qwen} == {
        "default-q4": "Qwen3-4B-Q4.base",
        "default-q8": "Qwen3-4B-Q8.base",
    }


def test_a_pulled_bundle_is_pinned_to_its_ids_variant_row(hub_rows: tuple[CatalogRow, ...]) -> None:
    parts = (*PULLED, "basecompute", "Qwen3-4B", "default-q8", "model.base")
    assert catalog_id_of(parts, hub_rows) == "basecompute/Qwen3-4B"
    pinned = pinned_row(parts, hub_rows)
    assert pinned is not None
    assert (pinned.file, pinned.size) == ("Qwen3-4B-Q8.base", 4155544576)


def test_a_file_under_a_catalog_file_name_claims_that_row(hub_rows: tuple[CatalogRow, ...]) -> None:
    parts = ("models", "Qwen3.8-27B-Q4.base")
    assert catalog_id_of(parts, hub_rows) == "basecompute/Qwen3.8-27B"
    pinned = pinned_row(parts, hub_rows)
    assert pinned is not None
    assert pinned.quant == "default-q4"


def test_a_file_the_catalog_does_not_list_is_not_checked(hub_rows: tuple[CatalogRow, ...]) -> None:
    parts = ("models", "My-Own-Qwen3-4B-DFlash.base")
    assert catalog_id_of(parts, hub_rows) is None
    assert pinned_row(parts, hub_rows) is None


def test_a_pulled_bundle_keeps_its_id_when_the_catalog_does_not_list_it(
    hub_rows: tuple[CatalogRow, ...],
) -> None:
    parts = (*PULLED, "someone", "Qwen3-4B-DSpark", "q4", "model.base")
    assert catalog_id_of(parts, hub_rows) == "someone/Qwen3-4B-DSpark"
    assert pinned_row(parts, hub_rows) is None


def test_a_pulled_bundle_of_an_unlisted_variant_is_not_pinned(
    hub_rows: tuple[CatalogRow, ...],
) -> None:
    parts = (*PULLED, "basecompute", "Qwen3-4B", "cuda-q8", "model.base")
    assert catalog_id_of(parts, hub_rows) == "basecompute/Qwen3-4B"
    assert pinned_row(parts, hub_rows) is None


def test_the_real_catalog_pairs_no_drafter_yet(hub_rows: tuple[CatalogRow, ...]) -> None:
    assert all(r.speculator_for is None and r.speculator_rank is None for r in hub_rows)
    assert is_paired("basecompute/Qwen3-0.6B", "basecompute/Qwen3-4B", hub_rows) == (False, None)


def test_a_real_row_mismatch_reads_as_the_contract_says(hub_rows: tuple[CatalogRow, ...]) -> None:
    parts = (*PULLED, "basecompute", "Qwen3-4B", "default-q4", "model.base")
    pinned = pinned_row(parts, hub_rows)
    assert pinned is not None
    path = "/".join(("", *parts))
    assert size_problem(path, pinned, 12) == (
        f"{path} is not the catalog's basecompute/Qwen3-4B default-q4 (12 bytes, not 2270401536); "
        "pull it again, or rename it if it is a conversion of your own"
    )


# --- catalog shapes ------------------------------------------------------------------------


def test_the_hub_shape_and_a_bare_list_read_the_same_rows() -> None:
    rows = [{"id": "o/r", "file": "r.base", "quant": "q4", "size": 1, "sha256": SHA_A}]
    assert parse_catalog({"schema": 1, "models": rows}) == parse_catalog(rows)
    assert parse_catalog(rows) == (
        CatalogRow(
            id="o/r",
            file="r.base",
            quant="q4",
            size=1,
            sha256=SHA_A,
            speculator_for=None,
            speculator_rank=None,
        ),
    )


@pytest.mark.parametrize("not_a_catalog", [None, "models", 3, {}, {"models": {"id": "o/r"}}])
def test_something_that_is_not_a_catalog_has_no_rows(not_a_catalog: object) -> None:
    assert parse_catalog(not_a_catalog) == ()


def test_a_drafter_row_reads_its_pairing() -> None:
    rows = parse_catalog(
        [{"id": "o/d", "speculator_for": "o/t", "speculator_rank": 2, "unknown": {"x": 1}}]
    )
    assert rows[0].speculator_for == "o/t"
    assert rows[0].speculator_rank == 2


def test_absent_fields_read_as_empty_and_a_row_without_a_digest_pins_nothing() -> None:
    (only_id,) = parse_catalog([{"id": "o/r"}])
    assert (only_id.file, only_id.quant, only_id.size, only_id.sha256) == ("", "", None, None)
    assert not only_id.pins_bytes
    assert pinned_row(("x", "o", "r", "", "model.base"), [only_id]) is None


def test_a_digest_is_kept_in_lowercase() -> None:
    (upper,) = parse_catalog([{"id": "o/r", "sha256": SHA_A.upper()}])
    assert upper.sha256 == SHA_A


@pytest.mark.parametrize(
    "malformed",
    [
        "o/r",
        ["o/r"],
        {},
        {"id": ""},
        {"id": 3},
        {"id": "o/r", "file": 1},
        {"id": "o/r", "quant": ["q4"]},
        {"id": "o/r", "size": "100"},
        {"id": "o/r", "size": -1},
        {"id": "o/r", "size": 1.5},
        {"id": "o/r", "size": True},
        {"id": "o/r", "sha256": 0},
        {"id": "o/r", "speculator_for": {"id": "o/t"}},
        {"id": "o/r", "speculator_rank": "1"},
    ],
)
def test_a_malformed_row_is_skipped_and_the_rest_still_read(malformed: object) -> None:
    good = {"id": "o/good", "file": "good.base"}
    rows = parse_catalog({"models": [good, malformed, good]})
    assert [r.id for r in rows] == ["o/good", "o/good"]


# --- which row a file claims ---------------------------------------------------------------


def test_a_pulled_bundle_needs_org_repo_and_variant_directories() -> None:
    rows = [row(id="o/r", quant="v", file="r.base")]
    assert catalog_id_of(("r", "v", "model.base"), rows) is None
    assert pinned_row(("r", "v", "model.base"), rows) is None
    assert catalog_id_of(("o", "r", "v", "model.base"), rows) == "o/r"


def test_the_first_listing_of_a_file_name_decides() -> None:
    rows = [row(id="o/first", file="x.base"), row(id="o/second", file="x.base")]
    assert catalog_id_of(("x.base",), rows) == "o/first"
    assert pinned_row(("x.base",), rows) == rows[0]


def test_a_row_without_a_file_name_claims_no_file() -> None:
    rows = [row(id="o/r", file="")]
    assert catalog_id_of(("",), rows) is None
    assert catalog_id_of((), rows) is None
    assert pinned_row(("",), rows) is None


def test_the_pinned_row_skips_rows_with_neither_size_nor_digest() -> None:
    rows = [row(id="o/r", file="x.base", sha256=None, size=None), row(id="o/r2", file="x.base")]
    pinned = pinned_row(("x.base",), rows)
    assert pinned is not None
    assert pinned.id == "o/r2"


# --- digests -------------------------------------------------------------------------------


def test_a_file_of_the_wrong_size_is_refused_without_hashing() -> None:
    pinned = row()
    message = (
        "/d/x.base is not the catalog's basecompute/Qwen3-4B-DFlash default-q4 "
        "(999 bytes, not 1000); pull it again, or rename it if it is a conversion of your own"
    )
    assert not needs_sha256(pinned, 999)
    assert size_problem("/d/x.base", pinned, 999) == message
    assert digest_verdict("/d/x.base", pinned, 999, None) == message
    assert digest_verdict("/d/x.base", pinned, 999, SHA_A) == message


def test_a_file_of_the_right_size_is_hashed_and_compared() -> None:
    pinned = row()
    assert needs_sha256(pinned, 1000)
    assert size_problem("/d/x.base", pinned, 1000) is None
    assert digest_verdict("/d/x.base", pinned, 1000, SHA_A) is None
    assert digest_verdict("/d/x.base", pinned, 1000, SHA_B) == (
        f"/d/x.base is not the catalog's basecompute/Qwen3-4B-DFlash default-q4 "
        f"(sha256 {SHA_B}, not {SHA_A}); "
        "pull it again, or rename it if it is a conversion of your own"
    )


def test_digests_compare_without_regard_to_case() -> None:
    assert sha_problem("/d/x.base", row(), SHA_A.upper()) is None
    mismatch = sha_problem("/d/x.base", row(), "ABC")
    assert mismatch is not None
    assert "(sha256 abc, not " in mismatch


def test_a_row_without_a_variant_is_named_by_its_file() -> None:
    message = size_problem("/m/x.base", row(quant=""), 1)
    assert message is not None
    assert "the catalog's basecompute/Qwen3-4B-DFlash Qwen3-4B-DFlash-Q4.base (1 bytes" in message


def test_a_row_without_a_size_is_decided_by_its_digest_alone() -> None:
    sizeless = row(size=None)
    assert size_problem("/d/x.base", sizeless, 5) is None
    assert needs_sha256(sizeless, 5)
    assert digest_verdict("/d/x.base", sizeless, 5, SHA_A) is None


def test_a_verdict_that_needs_the_digest_cannot_be_given_without_it() -> None:
    with pytest.raises(ValueError, match="needs the file's sha256"):
        digest_verdict("/d/x.base", row(), 1000, None)


def test_a_row_without_a_digest_checks_only_the_size() -> None:
    unpinned = row(sha256=None)
    assert not needs_sha256(unpinned, 1000)
    assert digest_verdict("/d/x.base", unpinned, 1000, None) is None
    assert sha_problem("/d/x.base", unpinned, SHA_B) is None


# --- pairing -------------------------------------------------------------------------------


def test_a_row_with_the_drafters_id_and_the_targets_id_pairs_them() -> None:
    rows = [row(id="o/d", speculator_for="o/t", speculator_rank=3)]
    assert is_paired("o/d", "o/t", rows) == (True, 3)


def test_a_pairing_without_a_rank_has_no_rank() -> None:
    rows = [row(id="o/d", speculator_for="o/t")]
    assert is_paired("o/d", "o/t", rows) == (True, None)


def test_a_drafter_paired_with_another_target_is_not_paired() -> None:
    rows = [row(id="o/d", speculator_for="o/other", speculator_rank=1)]
    assert is_paired("o/d", "o/t", rows) == (False, None)


def test_another_drafters_pairing_does_not_pair_this_one() -> None:
    rows = [row(id="o/other", speculator_for="o/t", speculator_rank=1)]
    assert is_paired("o/d", "o/t", rows) == (False, None)


def test_the_best_rank_among_a_drafters_variants_is_the_pairings_rank() -> None:
    rows = [
        row(id="o/d", quant="q8", speculator_for="o/t", speculator_rank=4),
        row(id="o/d", quant="q4", speculator_for="o/t", speculator_rank=2),
        row(id="o/d", quant="f16", speculator_for="o/t"),
        row(id="o/d", quant="bf16", speculator_for="o/elsewhere", speculator_rank=0),
    ]
    assert is_paired("o/d", "o/t", rows) == (True, 2)


def test_a_file_without_a_catalog_id_is_never_paired() -> None:
    rows = [row(id="o/d", speculator_for="o/t", speculator_rank=1)]
    assert is_paired(None, "o/t", rows) == (False, None)
    assert is_paired("o/d", None, rows) == (False, None)

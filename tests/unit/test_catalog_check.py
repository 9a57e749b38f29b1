"""A drafter the hub catalog lists must be the catalog's bytes (§5), checked cheaply on real files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from superfluid.adapters.catalog_check import check_against_catalog
from superfluid.adapters.digests import DigestCache
from superfluid.domain.catalog import CatalogRow, parse_catalog

REAL_CATALOG = Path(__file__).parents[2].parent / "shared" / "data" / "hub-catalog.json"
ADVICE = "pull it again, or rename it if it is a conversion of your own"

# In the real catalog: the smallest pinned bundle (52 MiB), so a sparse copy hashes quickly.
WHISPER_ID = "basecompute/whisper-tiny.en"
WHISPER_FILE = "whisper-tiny.en-Q4.base"
WHISPER_SIZE = 54821632
WHISPER_SHA = "55859049a1"  # prefix; the full digest comes from the catalog


@pytest.fixture
def real_rows() -> tuple[CatalogRow, ...]:
    if not REAL_CATALOG.is_file():
        pytest.skip(f"no hub catalog at {REAL_CATALOG}")
    return parse_catalog(json.loads(REAL_CATALOG.read_text()))


@pytest.fixture
def digests(tmp_path: Path) -> DigestCache:
    return DigestCache(tmp_path / "home")


def row(file: str, data: bytes, *, quant: str = "default-q4", size: bool = True) -> CatalogRow:
    return CatalogRow(
        id="basecompute/Tiny-DFlash",
        file=file,
        quant=quant,
        size=len(data) if size else None,
        sha256=hashlib.sha256(data).hexdigest(),
        speculator_for="basecompute/Tiny",
        speculator_rank=1,
    )


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


# --- real catalog rows -------------------------------------------------------------------------


def test_a_file_the_catalog_does_not_list_is_never_read(
    tmp_path: Path, real_rows: tuple[CatalogRow, ...], digests: DigestCache
) -> None:
    mine = write(tmp_path / "my-own-Qwen3-4B-DFlash.base", b"a conversion of my own")
    assert check_against_catalog(mine, real_rows, digests) is None
    unlisted_variant = write(tmp_path / WHISPER_ID / "my-variant" / "model.base", b"mine")
    assert check_against_catalog(unlisted_variant, real_rows, digests) is None
    assert digests.computed == 0
    assert not digests.directory.exists()


def test_a_pulled_bundle_of_the_wrong_size_is_refused_without_hashing(
    tmp_path: Path, real_rows: tuple[CatalogRow, ...], digests: DigestCache
) -> None:
    path = write(tmp_path / WHISPER_ID / "default-q4" / "model.base", b"partial")
    assert check_against_catalog(path, real_rows, digests) == (
        f"{path} is not the catalog's {WHISPER_ID} default-q4 (7 bytes, not {WHISPER_SIZE}); "
        f"{ADVICE}"
    )
    assert digests.computed == 0


def test_a_file_under_a_catalog_file_name_is_checked_too(
    tmp_path: Path, real_rows: tuple[CatalogRow, ...], digests: DigestCache
) -> None:
    path = write(tmp_path / "downloads" / WHISPER_FILE, b"0123456789")
    assert check_against_catalog(path, real_rows, digests) == (
        f"{path} is not the catalog's {WHISPER_ID} default-q4 (10 bytes, not {WHISPER_SIZE}); "
        f"{ADVICE}"
    )


def test_the_right_size_with_the_wrong_bytes_is_refused_by_sha256(
    tmp_path: Path, real_rows: tuple[CatalogRow, ...], digests: DigestCache
) -> None:
    path = sparse(tmp_path / WHISPER_ID / "default-q4" / "model.base", WHISPER_SIZE)
    want = next(r.sha256 for r in real_rows if r.id == WHISPER_ID and r.quant == "default-q4")
    assert want is not None and want.startswith(WHISPER_SHA)
    got = hashlib.sha256(bytes(WHISPER_SIZE)).hexdigest()
    assert check_against_catalog(path, real_rows, digests) == (
        f"{path} is not the catalog's {WHISPER_ID} default-q4 (sha256 {got}, not {want}); {ADVICE}"
    )
    assert digests.computed == 1
    # The next start answers from the digest cache.
    again = DigestCache(digests.directory.parent.parent)
    assert check_against_catalog(path, real_rows, again) is not None
    assert again.computed == 0


# --- synthetic rows for small files ------------------------------------------------------------


def test_the_catalogs_bytes_pass(tmp_path: Path, digests: DigestCache) -> None:
    data = b"the drafter the catalog lists"
    path = write(tmp_path / "basecompute" / "Tiny-DFlash" / "default-q4" / "model.base", data)
    rows = [row("Tiny-DFlash-Q4.base", data)]
    assert check_against_catalog(path, rows, digests) is None
    assert check_against_catalog(path, rows, digests) is None
    assert digests.computed == 1


def test_a_wrong_digest_is_refused_in_the_catalogs_words(
    tmp_path: Path, digests: DigestCache
) -> None:
    data = b"the drafter the catalog lists"
    tampered = b"the drafter the catalog LISTS"
    path = write(tmp_path / "Tiny-DFlash-Q4.base", tampered)
    listed = row("Tiny-DFlash-Q4.base", data)
    assert check_against_catalog(path, [listed], digests) == (
        f"{path} is not the catalog's basecompute/Tiny-DFlash default-q4 "
        f"(sha256 {hashlib.sha256(tampered).hexdigest()}, not {listed.sha256}); {ADVICE}"
    )


def test_a_row_without_a_variant_is_named_by_its_file(tmp_path: Path, digests: DigestCache) -> None:
    path = write(tmp_path / "Tiny-DFlash.base", b"short")
    rows = [row("Tiny-DFlash.base", b"longer bytes", quant="")]
    assert check_against_catalog(path, rows, digests) == (
        f"{path} is not the catalog's basecompute/Tiny-DFlash Tiny-DFlash.base "
        f"(5 bytes, not 12); {ADVICE}"
    )


def test_a_row_without_a_size_is_decided_by_sha256(tmp_path: Path, digests: DigestCache) -> None:
    path = write(tmp_path / "Tiny-DFlash.base", b"other bytes")
    rows = [row("Tiny-DFlash.base", b"listed bytes", size=False)]
    problem = check_against_catalog(path, rows, digests)
    assert problem is not None and "(sha256 " in problem
    assert digests.computed == 1


def test_a_row_with_a_size_but_no_digest_is_checked_by_size_alone(
    tmp_path: Path, digests: DigestCache
) -> None:
    sized = CatalogRow("basecompute/Tiny-DFlash", "Tiny-DFlash.base", "", 8, None, None, None)
    path = write(tmp_path / "Tiny-DFlash.base", b"whatever")  # 8 bytes
    assert check_against_catalog(path, [sized], digests) is None
    path.write_bytes(b"whatever and more")
    problem = check_against_catalog(path, [sized], digests)
    assert problem is not None and "17 bytes, not 8" in problem
    assert digests.computed == 0  # nothing to hash against


def test_a_row_with_neither_size_nor_digest_pins_nothing(
    tmp_path: Path, digests: DigestCache
) -> None:
    path = write(tmp_path / "Tiny-DFlash.base", b"whatever")
    bare = CatalogRow("basecompute/Tiny-DFlash", "Tiny-DFlash.base", "", None, None, None, None)
    assert check_against_catalog(path, [bare], digests) is None


def test_a_listed_file_that_cannot_be_read_is_refused(
    tmp_path: Path, digests: DigestCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"listed"
    path = write(tmp_path / "Tiny-DFlash.base", data)

    def denied(self: DigestCache, path: Path, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(DigestCache, "sha256", denied)
    assert check_against_catalog(path, [row("Tiny-DFlash.base", data)], digests) == (
        f"{path} cannot be read to check it against the catalog's basecompute/Tiny-DFlash "
        "default-q4 (Permission denied)"
    )


def test_a_listed_file_that_is_gone_is_refused(tmp_path: Path, digests: DigestCache) -> None:
    path = tmp_path / "Tiny-DFlash.base"
    problem = check_against_catalog(path, [row("Tiny-DFlash.base", b"x")], digests)
    assert problem is not None and problem.startswith(f"{path} cannot be read")

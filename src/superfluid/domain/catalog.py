"""The hub catalog's rules: which row a local file claims to be, and whether its bytes are that row.

Catalog id of a file (docs/contract.md §5): a pulled bundle `…/<org>/<repo>/<variant>/model.base`
is `<org>/<repo>` by where it lies, and its row is the one with that id and `quant == <variant>`;
any other file is the row whose `file` equals its file name. A file the catalog lists must have
the row's size and sha256. Size is compared first because it is free, so callers hash a file
(gigabytes) only when its size already matches.

Rows come from JSON the project does not control (the hub's catalog, baseRT's cache): a malformed
row is skipped, never fatal, and unknown fields are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from superfluid.domain.naming import PULLED_BUNDLE_FILE

_MISMATCH_ADVICE = "pull it again, or rename it if it is a conversion of your own"


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One catalog entry: a model variant, and for a drafter the target it is made for."""

    id: str
    file: str
    quant: str
    size: int | None
    sha256: str | None  # lowercase hex
    speculator_for: str | None
    speculator_rank: int | None

    @property
    def pins_bytes(self) -> bool:
        """Whether a file claiming this row is checked: the row gives its size, its sha256 or
        both, and the file must match what it gives (a row with a size but no digest is checked
        by size alone; docs/adr/0002)."""
        return self.sha256 is not None or self.size is not None

    @property
    def variant_or_file(self) -> str:
        """How the mismatch message names the row: its variant, else its file name."""
        return self.quant or self.file


def parse_catalog(obj: object) -> tuple[CatalogRow, ...]:
    """Rows of a decoded catalog: the hub's `{"models": [...]}` or a bare list of rows."""
    if isinstance(obj, Mapping):
        obj = obj.get("models")
    if not isinstance(obj, list):
        return ()
    rows = (_row(item) for item in obj)
    return tuple(row for row in rows if row is not None)


class _MalformedRow(Exception):
    """A catalog row field of the wrong type: the row cannot be trusted for anything."""


def _row(item: object) -> CatalogRow | None:
    if not isinstance(item, Mapping):
        return None
    try:
        row_id = _text(item, "id")
        if not row_id:
            return None
        sha256 = _text(item, "sha256")
        return CatalogRow(
            id=row_id,
            file=_text(item, "file"),
            quant=_text(item, "quant"),
            size=_count(item, "size"),
            sha256=sha256.lower() if sha256 else None,
            speculator_for=_text(item, "speculator_for") or None,
            speculator_rank=_count(item, "speculator_rank"),
        )
    except _MalformedRow:
        return None


def _text(item: Mapping[str, Any], key: str) -> str:
    """The string at `key`; empty when absent or null."""
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _MalformedRow(key)
    return value


def _count(item: Mapping[str, Any], key: str) -> int | None:
    """The non-negative integer at `key`; None when absent or null."""
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _MalformedRow(key)
    return value


def _pulled_layout(parts: Sequence[str]) -> tuple[str, str] | None:
    """`(<org>/<repo>, <variant>)` for `…/<org>/<repo>/<variant>/model.base`, else None."""
    if len(parts) >= 4 and parts[-1] == PULLED_BUNDLE_FILE:
        org, repo, variant = parts[-4], parts[-3], parts[-2]
        if org and repo and variant:
            return f"{org}/{repo}", variant
    return None


def catalog_id_of(parts: Sequence[str], rows: Iterable[CatalogRow]) -> str | None:
    """The catalog id a file claims, from its path components (last one the file name).

    A pulled bundle's id is where it lies, whether or not the catalog still lists it: the id is
    what pairs it with a target, and a stale catalog should not unpair an installed drafter.
    """
    pulled = _pulled_layout(parts)
    if pulled is not None:
        return pulled[0]
    if not parts or not parts[-1]:
        return None
    return next((row.id for row in rows if row.file == parts[-1]), None)


def pinned_row(parts: Sequence[str], rows: Iterable[CatalogRow]) -> CatalogRow | None:
    """The row whose size and sha256 the file must match, or None when the catalog pins nothing.

    Only rows with a size or a digest pin; a row with neither gives nothing to check against.
    """
    pinning = [row for row in rows if row.pins_bytes]
    pulled = _pulled_layout(parts)
    if pulled is not None:
        row_id, variant = pulled
        return next((r for r in pinning if r.id == row_id and r.quant == variant), None)
    if not parts or not parts[-1]:
        return None
    return next((r for r in pinning if r.file == parts[-1]), None)


def _mismatch(path: str, row: CatalogRow, got: str) -> str:
    return f"{path} is not the catalog's {row.id} {row.variant_or_file} ({got}); {_MISMATCH_ADVICE}"


def size_problem(path: str, row: CatalogRow, size: int) -> str | None:
    """The mismatch message when the file's size is not the row's; None when it is (or unknown)."""
    if row.size is None or row.size == size:
        return None
    return _mismatch(path, row, f"{size} bytes, not {row.size}")


def needs_sha256(row: CatalogRow, size: int) -> bool:
    """Whether the file must be hashed to decide: the row has a digest and the size passed."""
    return row.sha256 is not None and size_problem("", row, size) is None


def sha_problem(path: str, row: CatalogRow, sha256: str) -> str | None:
    """The mismatch message when the file's digest is not the row's; None when it is."""
    want = row.sha256
    got = sha256.lower()
    if want is None or got == want:
        return None
    return _mismatch(path, row, f"sha256 {got}, not {want}")


def digest_verdict(path: str, row: CatalogRow, size: int, sha256: str | None) -> str | None:
    """Why the file is not the row's bytes, or None when it is.

    Pass `sha256=None` when the file has not been hashed: a size mismatch is decided without it,
    and asking for a verdict that needs the digest without one is a programming error.
    """
    by_size = size_problem(path, row, size)
    if by_size is not None:
        return by_size
    if sha256 is None:
        if needs_sha256(row, size):
            raise ValueError("digest_verdict needs the file's sha256 once its size matches")
        return None
    return sha_problem(path, row, sha256)


def is_paired(
    drafter_id: str | None, target_id: str | None, rows: Iterable[CatalogRow]
) -> tuple[bool, int | None]:
    """Whether the catalog pairs the drafter with the target, and the pairing's rank.

    With several pairing rows (one per variant) the best, lowest, rank is the pairing's.
    """
    if not drafter_id or not target_id:
        return False, None
    pairing = [r for r in rows if r.id == drafter_id and r.speculator_for == target_id]
    if not pairing:
        return False, None
    ranks = [r.speculator_rank for r in pairing if r.speculator_rank is not None]
    return True, min(ranks) if ranks else None

"""Whether a drafter file is the bytes the hub catalog lists for it (docs/contract.md §5).

The rules are the domain's (`domain.catalog`); this adapter supplies the file's size and digest,
in the order that keeps a start fast: a file the catalog does not pin is never read, the size is
compared before anything is hashed, and the hash comes from the digest cache when the file has
not changed since it was last hashed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TextIO

from superfluid.adapters.digests import DigestCache, Progress, tty_progress
from superfluid.domain.catalog import (
    CatalogRow,
    needs_sha256,
    pinned_row,
    sha_problem,
    size_problem,
)


def check_against_catalog(
    path: Path,
    rows: Iterable[CatalogRow],
    digests: DigestCache,
    *,
    progress: Progress | None = None,
) -> str | None:
    """Why `path` is not the catalog's file it claims to be, or None (also when it claims none).

    The row is found from the path as given: a pulled `<org>/<repo>/<variant>/model.base` by
    where it lies, any other file by its name. A pinned file that cannot be read is refused,
    since its bytes cannot be shown to be the catalog's.
    """
    row = pinned_row(path.parts, rows)
    if row is None:
        return None
    shown = str(path)
    try:
        size = os.stat(path).st_size
    except OSError as err:
        return _unreadable(shown, row, err)
    problem = size_problem(shown, row, size)
    if problem is not None or not needs_sha256(row, size):
        return problem
    try:
        digest = digests.sha256(path, progress=progress)
    except OSError as err:
        return _unreadable(shown, row, err)
    return sha_problem(shown, row, digest)


def _unreadable(shown: str, row: CatalogRow, err: OSError) -> str:
    reason = err.strerror or type(err).__name__
    return (
        f"{shown} cannot be read to check it against the catalog's {row.id} "
        f"{row.variant_or_file} ({reason})"
    )


class CatalogDigests:
    """The `Digests` port: sizes from the filesystem, sha256 digests from the digest cache under
    `home` (made on first use), with progress on `progress_to` when that is a terminal."""

    def __init__(self, home: Path, *, progress_to: TextIO | None = None) -> None:
        self._home = home
        self._progress_to = progress_to

    @cached_property
    def cache(self) -> DigestCache:
        return DigestCache(self._home)

    def catalog_problem(self, path: Path, rows: Sequence[CatalogRow]) -> str | None:
        progress = tty_progress(self._progress_to) if self._progress_to is not None else None
        return check_against_catalog(path, rows, self.cache, progress=progress)

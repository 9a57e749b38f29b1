"""A `.base` bundle opened for its weights: the header, and each tensor as a float32 array.

The header is read by `bundle_files.read_header` (which never touches the weights); the weights
blob, at the 64 KiB boundary after the header, is memory-mapped read-only. Every tensor entry is
checked against the blob when the bundle opens — a known dtype, a shape whose byte count is the
entry's `length`, and `offset + length` inside the blob — so a damaged or truncated file is one
`BundleError` naming the file and the tensor, never an IndexError deep inside numpy later.

dtypes read (case-insensitive, as converters spell them differently): `f32`/`float32`,
`f16`/`float16`, `bf16`/`bfloat16`, all little-endian. bf16 is the top half of an f32, so it is
widened by a 16-bit shift, which is exact. Quantised dtypes (`base_q4`, `base_q8`, …) are the
closed engine's own formats and are not read here: such a bundle opens (its header is useful to
the drafter search), and asking for one of those tensors says so.

`tensor()` returns a float32 copy, never a view into the map: the reference backend runs tiny
models, converts once at load, and can then close the file.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from superfluid.adapters.bundle_files import read_header
from superfluid.adapters.closing import ClosedOnExit
from superfluid.domain.bundle_header import (
    PREFIX_SIZE,
    BundleHeader,
    TensorEntry,
    parse_prefix,
    weights_offset,
)
from superfluid.domain.errors import HeaderError, SuperfluidError

F32 = npt.NDArray[np.float32]

# Canonical dtype name → (numpy dtype as stored, bytes per element).
_STORED: dict[str, np.dtype[np.generic]] = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": np.dtype("<u2"),
}
_ALIASES = {
    "f32": "f32",
    "float32": "f32",
    "fp32": "f32",
    "f16": "f16",
    "float16": "f16",
    "fp16": "f16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}


class BundleError(SuperfluidError):
    """A `.base` bundle whose weights cannot be used; the message names the file and tensor."""


def canonical_dtype(dtype: str) -> str | None:
    """`f32`, `f16` or `bf16` for a dtype this module reads, else None."""
    return _ALIASES.get(dtype.strip().lower())


def bf16_to_f32(raw: npt.NDArray[np.uint16]) -> F32:
    """Widen bf16 bit patterns to float32 (exact: bf16 is the high half of an f32)."""
    return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """Round float32 to bf16 bit patterns, to nearest even (for writing fixtures and tests)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


class Bundle(ClosedOnExit):
    """An open `.base` bundle. Use as a context manager, or call `close()`."""

    def __init__(
        self, path: Path, header: BundleHeader, blob: mmap.mmap | None, blob_offset: int
    ) -> None:
        self.path = path
        self.header = header
        self._blob = blob
        self._blob_offset = blob_offset
        self._entries = {entry.name: entry for entry in header.tensors}

    @classmethod
    def open(cls, path: Path | str) -> Bundle:
        """Open the bundle at `path`; a BundleError says which file and what is wrong."""
        path = Path(path).expanduser()
        shown = _shown(path)
        try:
            header = read_header(path)
        except HeaderError as err:
            raise BundleError(err.message) from None
        try:
            with path.open("rb") as handle:
                header_len = parse_prefix(handle.read(PREFIX_SIZE))
                offset = weights_offset(header_len)
                size = os.fstat(handle.fileno()).st_size
                blob_size = max(0, size - offset)
                _check_entries(shown, header.tensors, blob_size)
                blob = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if blob_size else None
        except OSError as err:
            raise BundleError(f"{shown}: cannot read its weights ({err.strerror})") from None
        except HeaderError as err:  # the file changed under us between the two reads
            raise BundleError(f"{shown}: {err.message}") from None
        return cls(path, header, blob, offset)

    def close(self) -> None:
        if self._blob is not None:
            self._blob.close()
            self._blob = None

    @property
    def shown(self) -> str:
        return _shown(self.path)

    def names(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def entry(self, name: str) -> TensorEntry:
        found = self._entries.get(name)
        if found is None:
            raise BundleError(f"{self.shown}: the bundle has no tensor {name}")
        return found

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> F32:
        """Tensor `name` as a new float32 array; with `shape`, it must have exactly that shape."""
        entry = self.entry(name)
        if shape is not None and entry.shape != shape:
            raise BundleError(
                f"{self.shown}: tensor {name} has shape {list(entry.shape)}, "
                f"the model's config needs {list(shape)}"
            )
        dtype = canonical_dtype(entry.dtype)
        if dtype is None:
            raise BundleError(
                f"{self.shown}: tensor {name} is {entry.dtype or 'without a dtype'}; the reference "
                "backend reads f32, f16 and bf16 tensors (convert the model unquantised)"
            )
        count = math.prod(entry.shape)
        if count == 0:
            return np.zeros(entry.shape, dtype=np.float32)
        assert self._blob is not None, "a non-empty tensor implies a non-empty blob (checked)"
        raw = np.frombuffer(
            self._blob, dtype=_STORED[dtype], count=count, offset=self._blob_offset + entry.offset
        )
        try:
            # astype copies, so the map can close
            values = bf16_to_f32(raw.view(np.uint16)) if dtype == "bf16" else raw.astype(np.float32)
        finally:
            del raw  # release the buffer export before anyone closes the map
        if not np.all(np.isfinite(values)):
            raise BundleError(f"{self.shown}: tensor {name} holds NaN or infinite values")
        return values.reshape(entry.shape)


def _check_entries(shown: str, entries: tuple[TensorEntry, ...], blob_size: int) -> None:
    seen: set[str] = set()
    for entry in entries:
        where = f"{shown}: tensor {entry.name}"
        if entry.name in seen:
            raise BundleError(f"{where} is listed twice")
        seen.add(entry.name)
        dtype = canonical_dtype(entry.dtype)
        if dtype is not None:
            need = math.prod(entry.shape) * _STORED[dtype].itemsize
            if entry.length != need:
                raise BundleError(
                    f"{where}: {entry.dtype} {list(entry.shape)} takes {need} bytes, "
                    f"but its length is {entry.length}"
                )
        if entry.offset + entry.length > blob_size:
            raise BundleError(
                f"{where} runs past the end of the weights ({entry.offset} + {entry.length} "
                f"bytes > {blob_size}); the file is truncated or damaged"
            )


def _shown(path: Path) -> str:
    text = str(path)
    return text if text.isprintable() else ascii(text)

"""Q5_0 weights served as Q8_0: the same numbers, in a layout x86 kernels multiply faster.

A Q5_0 block is 32 five-bit integers q in [-16, 15] and one F16 scale d; a Q8_0 block is 32
eight-bit integers and one F16 scale. Written as Q8_0 with the same d and the same integers, a
Q5_0 block keeps every weight's value exactly, and llama.cpp's x86 kernels (tinyBLAS's Q0 tiles
and the one-row `ggml_vec_dot_*_q8_0`) form the same integer dot products and the same float
sums from it, without unpacking the fifth bit in every tile: every logit the widened file gives
is the original's, bit for bit, and the batch-invariance the served kernels keep (ADR 0008)
holds as it does for the Q8_0 vocabulary head. Small models whose rows no K-quant block divides
hold much of their weights as Q5_0; ADR 0018 has what widening saves and costs.

`widened_copy` writes the widened GGUF once under a cache directory and returns its path; the
header's key-value section is copied byte for byte and only the Q5_0 tensors' type, size and
offsets change. A file with no Q5_0 tensor, or a tensor type this module does not know the size
of, is served as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO

import numpy as np

from superfluid.adapters.llamacpp.gguf_layout import (
    Q5_0,
    Q8_0,
    TYPE_SIZES,
    Layout,
    TensorInfo,
    UnreadableHeader,
    aligned,
    read_layout,
)

log = logging.getLogger("superfluid")

#: Bumped when what `widened_copy` writes changes, so older copies are written again.
WIDENING_VERSION = 1
#: Copies a cache keeps, the most recently served first: a copy whose source was moved or
#: deleted is never asked for again, and goes once this many others have been served since.
MAX_COPIES = 4

Q5_0_BLOCK_BYTES = TYPE_SIZES[Q5_0][1]


def widening_pays() -> bool:
    """Whether llama.cpp multiplies Q8_0 faster than Q5_0 here: on x86-64, where tinyBLAS's
    tiles unpack a Q5_0 block's fifth bit in every tile (measured with AVX-512; the AVX2 tiles
    unpack it the same way). Elsewhere files are served as they are."""
    return platform.machine().lower() in ("x86_64", "amd64")


class NotWidened(Exception):
    """Why a file is served as it is (a debug line, never an error)."""


def q5_0_as_q8_0(blocks: np.ndarray) -> np.ndarray:
    """Q5_0 blocks (n x 22 bytes: F16 d, u32 high bits, 16 bytes of low nibbles) as Q8_0 blocks
    (n x 34 bytes: the same d, then the 32 integers as int8)."""
    blocks = blocks.reshape(-1, Q5_0_BLOCK_BYTES)
    high = blocks[:, 2:6].copy().view("<u4")[:, 0]
    nibbles = blocks[:, 6:]
    bit = np.arange(16, dtype=np.uint32)
    # Value j (< 16) is nibble j's low half with high bit j; value 16 + j its high half with
    # high bit 16 + j; both stored offset by 16.
    first = (nibbles & 0x0F) | (((high[:, None] >> bit) & 1) << 4).astype(np.uint8)
    second = (nibbles >> 4) | (((high[:, None] >> (bit + 16)) & 1) << 4).astype(np.uint8)
    values = np.concatenate([first, second], axis=1).astype(np.int16) - 16
    return np.concatenate([blocks[:, :2], values.astype(np.int8).view(np.uint8)], axis=1)


def widened_layout(layout: Layout) -> Layout:
    """The layout with every Q5_0 tensor as Q8_0 and the data offsets laid out again."""
    tensors, offset = [], 0
    for t in layout.tensors:
        t = replace(t, type=Q8_0 if t.type == Q5_0 else t.type, offset=offset)
        tensors.append(t)
        offset = aligned(offset + t.nbytes, layout.alignment)
    out = replace(layout, tensors=tuple(tensors))
    return replace(out, data_start=aligned(out.header_length(), layout.alignment))


def _chunks(data: np.ndarray, source: TensorInfo) -> Iterator[bytes]:
    if source.type != Q5_0:
        yield data.tobytes()
        return
    step = 1 << 16  # blocks per chunk: a few MB at a time
    blocks = data.reshape(-1, Q5_0_BLOCK_BYTES)
    for i in range(0, len(blocks), step):
        yield q5_0_as_q8_0(blocks[i : i + step]).tobytes()


def source_layout(source: Path) -> Layout:
    """`source`'s layout, if it has Q5_0 tensors to widen (else NotWidened says why not)."""
    with source.open("rb") as f:
        try:
            layout = read_layout(f)
        except UnreadableHeader as why:
            raise NotWidened(str(why)) from why
    if not any(t.type == Q5_0 for t in layout.tensors):
        raise NotWidened("no Q5_0 tensors")
    unsized = [t.name.decode(errors="replace") for t in layout.tensors if not t.sized]
    if unsized:
        raise NotWidened(f"tensor {unsized[0]} has a type this copy cannot size")
    return layout


def widen(source: Path, layout: Layout, target: IO[bytes]) -> None:
    """Write `source` (whose layout is `layout`) with its Q5_0 tensors as Q8_0 to `target`."""
    out = widened_layout(layout)
    target.write(out.header())
    data = np.memmap(source, dtype=np.uint8, mode="r")
    for was, now in zip(layout.tensors, out.tensors, strict=True):
        target.write(b"\0" * (out.data_start + now.offset - target.tell()))
        begin = layout.data_start + was.offset
        for chunk in _chunks(data[begin : begin + was.nbytes], was):
            target.write(chunk)


def _copy_name(source: Path) -> tuple[str, str]:
    """(the prefix every copy of this source file shares, this version's full name)."""
    stat = source.stat()
    where = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    what = f"{stat.st_size}-{stat.st_mtime_ns}-v{WIDENING_VERSION}"
    stem = f"{source.stem}.{where}."
    return stem, f"{stem}{hashlib.sha256(what.encode()).hexdigest()[:12]}.q8_0.gguf"


def widened_copy(source: Path, cache: Path) -> Path | None:
    """The widened copy of `source` under `cache`, written now if it is not there yet; None when
    the file has nothing to widen or the copy cannot be written (it is then served as it is)."""
    try:
        stem, name = _copy_name(source)
        target = cache / name
        if target.is_file():
            _touch(target)
            log.info(
                "%s: Q5_0 weights served as Q8_0 (the same values) from %s", source.name, target
            )
            return target
        layout = source_layout(source)
    except (NotWidened, OSError) as why:
        log.debug("%s: served as it is (%s)", source.name, why)
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a copy in the cache is always whole, whoever wrote it.
        with tempfile.NamedTemporaryFile(dir=cache, prefix=".widening-", delete=False) as tmp:
            try:
                widen(source, layout, tmp)
            except BaseException:
                os.unlink(tmp.name)
                raise
        os.replace(tmp.name, target)
    except OSError as exc:
        log.warning("%s: served as it is; cannot write its widened copy (%s)", source.name, exc)
        return None
    _prune(cache, keep=target, stale=stem)
    log.info(
        "%s: Q5_0 weights served as Q8_0 (the same values): %d tensors widened once into %s",
        source.name,
        sum(t.type == Q5_0 for t in layout.tensors),
        target,
    )
    return target


def _touch(copy: Path) -> None:
    """Mark a copy as served now (`_prune` keeps the most recently served)."""
    with contextlib.suppress(OSError):
        os.utime(copy)


def _prune(cache: Path, *, keep: Path, stale: str) -> None:
    """Remove older copies of the same source, all but the `MAX_COPIES` newest copies, and
    partial copies an interrupted server left an hour or more ago."""
    for partial in cache.glob(".widening-*"):
        try:
            if time.time() - partial.stat().st_mtime > 3600:
                partial.unlink(missing_ok=True)
        except OSError:
            continue
    copies = []
    for copy in cache.glob("*.q8_0.gguf"):
        if copy == keep:
            continue
        if copy.name.startswith(stale):
            copy.unlink(missing_ok=True)
            continue
        try:
            copies.append((copy.stat().st_mtime_ns, copy))
        except OSError:
            continue
    for _, copy in sorted(copies, reverse=True)[MAX_COPIES - 1 :]:
        copy.unlink(missing_ok=True)

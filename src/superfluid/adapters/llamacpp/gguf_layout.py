"""A GGUF file's header, read without llama.cpp: enough to rewrite a file's tensors.

GGUF v2/v3: magic `GGUF`, u32 version, u64 tensor count, u64 key-value count, the key-values,
the tensor infos (name, dimensions, ggml type, offset), padding to `general.alignment` (32
unless set), then the tensor data, whose offsets are relative to its start. The key-value
section is kept as bytes, so a rewrite copies it exactly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import IO

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# ggml type ids.
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 0, 1, 2, 3, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16 = 10, 11, 12, 13, 14, 30

#: ggml type id -> (values per block, bytes per block), for the types whose size is known here.
TYPE_SIZES: dict[int, tuple[int, int]] = {
    F32: (1, 4),
    F16: (1, 2),
    BF16: (1, 2),
    Q4_0: (32, 18),
    Q4_1: (32, 20),
    Q5_0: (32, 22),
    Q5_1: (32, 24),
    Q8_0: (32, 34),
    Q2_K: (256, 84),
    Q3_K: (256, 110),
    Q4_K: (256, 144),
    Q5_K: (256, 176),
    Q6_K: (256, 210),
}

# Metadata value types: fixed sizes; 8 is a string, 9 an array.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class UnreadableHeader(ValueError):
    """A header this module cannot read (the message says what)."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: bytes
    dims: tuple[int, ...]
    type: int
    offset: int

    @property
    def sized(self) -> bool:
        return self.type in TYPE_SIZES

    @property
    def nbytes(self) -> int:
        values, size = TYPE_SIZES[self.type]
        count = 1
        for d in self.dims:
            count *= d
        return count // values * size

    def encoded(self) -> bytes:
        head = struct.pack("<Q", len(self.name)) + self.name + struct.pack("<I", len(self.dims))
        return head + struct.pack(f"<{len(self.dims)}QIQ", *self.dims, self.type, self.offset)


@dataclass(frozen=True, slots=True)
class Layout:
    version: int
    kv_count: int
    #: The key-value section, as it is in the file.
    metadata: bytes
    alignment: int
    tensors: tuple[TensorInfo, ...]
    #: Where the tensor data begins, in the file.
    data_start: int
    #: The metadata's keys (`tokenizer.chat_template`, ...).
    keys: frozenset[bytes] = frozenset()

    def header(self) -> bytes:
        """The header bytes this layout stands for, padded to where its data begins."""
        head = self._unpadded_header()
        return head + bytes(self.data_start - len(head))

    def header_length(self) -> int:
        """The unpadded length of `header()`."""
        return len(self._unpadded_header())

    def _unpadded_header(self) -> bytes:
        head = MAGIC + struct.pack("<IQQ", self.version, len(self.tensors), self.kv_count)
        return head + self.metadata + b"".join(t.encoded() for t in self.tensors)


def aligned(n: int, alignment: int) -> int:
    return n + (-n) % alignment


class _Reader:
    def __init__(self, f: IO[bytes]) -> None:
        self.f = f

    def take(self, n: int) -> bytes:
        got = self.f.read(n)
        if len(got) != n:
            raise UnreadableHeader("the file ends inside its header")
        return got

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip_value(self, kind: int) -> None:
        if kind == _STRING:
            self.string()
        elif kind == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _SCALAR_BYTES:
                self.take(_SCALAR_BYTES[item] * count)
            else:
                for _ in range(count):
                    self.skip_value(item)
        elif kind in _SCALAR_BYTES:
            self.take(_SCALAR_BYTES[kind])
        else:
            raise UnreadableHeader(f"unknown metadata value type {kind}")


def read_layout(f: IO[bytes]) -> Layout:
    """The header of the GGUF file open in `f` (read from its start)."""
    r = _Reader(f)
    f.seek(0)
    if r.take(4) != MAGIC:
        raise UnreadableHeader("not a GGUF file")
    version = r.u32()
    if version not in (2, 3):
        raise UnreadableHeader(f"GGUF version {version}")
    n_tensors, kv_count = r.u64(), r.u64()
    start = f.tell()
    alignment = DEFAULT_ALIGNMENT
    keys = []
    for _ in range(kv_count):
        key, kind = r.string(), r.u32()
        keys.append(key)
        if key == b"general.alignment" and kind == _UINT32:
            alignment = r.u32()
        else:
            r.skip_value(kind)
    end = f.tell()
    f.seek(start)
    metadata = r.take(end - start)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        dims = tuple(r.u64() for _ in range(r.u32()))
        kind, offset = r.u32(), r.u64()
        tensors.append(TensorInfo(name, dims, kind, offset))
    return Layout(
        version,
        kv_count,
        metadata,
        alignment,
        tuple(tensors),
        aligned(f.tell(), alignment),
        frozenset(keys),
    )

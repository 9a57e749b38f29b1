"""Add metadata keys to a GGUF file (for tests: a model whose file sets sampling defaults).

GGUF v2/v3: magic, version, tensor count, key-value count, the key-values, the tensor infos,
padding to `general.alignment` (32 unless set), then the tensor data, whose offsets are
relative to its start, so new keys only move where the data begins.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import BinaryIO

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _F32, _U32 = 8, 9, 6, 4


def _read(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    assert len(data) == size, "the GGUF file ends early"
    return data


def _string(handle: BinaryIO) -> bytes:
    (length,) = struct.unpack("<Q", _read(handle, 8))
    return _read(handle, length)


def _skip_value(handle: BinaryIO, kind: int) -> None:
    if kind == _STRING:
        _string(handle)
    elif kind == _ARRAY:
        inner, count = struct.unpack("<IQ", _read(handle, 12))
        for _ in range(count):
            _skip_value(handle, inner)
    else:
        _read(handle, _SCALAR[kind])


def _encoded(key: str, value: str | float | int) -> bytes:
    name = key.encode()
    head = struct.pack("<Q", len(name)) + name
    if isinstance(value, str):
        text = value.encode()
        return head + struct.pack("<IQ", _STRING, len(text)) + text
    if isinstance(value, int):
        return head + struct.pack("<II", _U32, value)
    return head + struct.pack("<If", _F32, value)


def with_metadata(source: Path, target: Path, extra: dict[str, str | float | int]) -> Path:
    """Copy `source` to `target` with `extra` key-values appended to its metadata."""
    with source.open("rb") as handle:
        magic, version, tensors, kvs = struct.unpack("<4sIQQ", _read(handle, 24))
        assert magic == b"GGUF" and version in (2, 3), "not a GGUF v2/v3 file"
        alignment = 32
        kv_start = handle.tell()
        for _ in range(kvs):
            key = _string(handle)
            (kind,) = struct.unpack("<I", _read(handle, 4))
            if key == b"general.alignment" and kind == _U32:
                (alignment,) = struct.unpack("<I", _read(handle, 4))
            else:
                _skip_value(handle, kind)
        kv_end = handle.tell()
        for _ in range(tensors):
            _string(handle)
            (dims,) = struct.unpack("<I", _read(handle, 4))
            _read(handle, 8 * dims + 4 + 8)
        infos_end = handle.tell()
        data_start = -(-infos_end // alignment) * alignment
        handle.seek(kv_start)
        old_kvs = _read(handle, kv_end - kv_start)
        infos = _read(handle, infos_end - kv_end)
        header = struct.pack("<4sIQQ", magic, version, tensors, kvs + len(extra))
        header += old_kvs + b"".join(_encoded(k, v) for k, v in extra.items()) + infos
        header += bytes(-len(header) % alignment)
        with target.open("wb") as out:
            out.write(header)
            handle.seek(data_start)
            shutil.copyfileobj(handle, out, 1 << 22)
    return target

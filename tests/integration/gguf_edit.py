"""Add metadata keys to a GGUF file (for tests: a model whose file sets sampling defaults).

New keys go at the end of the key-value section; tensor offsets are relative to where the data
begins, so only that moves (`gguf_layout` reads the header).
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path

from superfluid.adapters.llamacpp.gguf_layout import aligned, read_layout

_STRING, _F32, _U32 = 8, 6, 4


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
        layout = read_layout(handle)
        added = b"".join(_encoded(k, v) for k, v in extra.items())
        edited = dataclasses.replace(
            layout, kv_count=layout.kv_count + len(extra), metadata=layout.metadata + added
        )
        edited = dataclasses.replace(
            edited, data_start=aligned(edited.header_length(), edited.alignment)
        )
        with target.open("wb") as out:
            out.write(edited.header())
            handle.seek(layout.data_start)
            shutil.copyfileobj(handle, out, 1 << 22)
    return target

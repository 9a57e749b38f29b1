"""Widened weights: a GGUF's Q5_0 tensors rewritten as Q8_0, everything else byte for byte.

The files here are tiny GGUFs written by `write_gguf` (below, straight from the format), so the
module's reader is checked against an independent writer; the real model's logits are checked
in tests/integration/test_llamacpp_widened.py.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from superfluid.adapters.llamacpp.gguf_layout import Q5_0, Q8_0, read_layout
from superfluid.adapters.llamacpp.widened_weights import MAX_COPIES, widened_copy

F32, Q4_K = 0, 12


def q5_0_values(raw: bytes) -> np.ndarray:
    """Every weight of Q5_0 blocks, dequantized one by one as ggml's reference does."""
    out = []
    for b in range(0, len(raw), 22):
        (d,) = np.frombuffer(raw[b : b + 2], dtype="<f2")
        (qh,) = struct.unpack("<I", raw[b + 2 : b + 6])
        qs = raw[b + 6 : b + 22]
        low = [(qs[j] & 0x0F) | (((qh >> j) & 1) << 4) for j in range(16)]
        high = [(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) for j in range(16)]
        out += [np.float32(d) * (q - 16) for q in low + high]
    return np.array(out, dtype=np.float32)


def q8_0_values(raw: bytes) -> np.ndarray:
    out = []
    for b in range(0, len(raw), 34):
        (d,) = np.frombuffer(raw[b : b + 2], dtype="<f2")
        out += [np.float32(d) * q for q in np.frombuffer(raw[b + 2 : b + 34], dtype=np.int8)]
    return np.array(out, dtype=np.float32)


def _string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def write_gguf(
    path: Path, tensors: list[tuple[str, int, tuple[int, ...], bytes]], *, alignment=None
):
    """A GGUF v3 file with a few metadata keys (a string, an array of strings, the alignment)
    and `tensors` as (name, ggml type, dims, data), each at an aligned offset."""
    align = alignment or 32
    kvs = [
        _string("general.architecture") + struct.pack("<I", 8) + _string("gemma3"),
        _string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, 3)
        + b"".join(_string(t) for t in ("<pad>", "<eos>", "hello")),
    ]
    if alignment:
        kvs.append(_string("general.alignment") + struct.pack("<II", 4, alignment))
    infos, data, offset = b"", b"", 0
    for name, kind, dims, payload in tensors:
        infos += _string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)
        data += payload + bytes(-len(payload) % align)
        offset += len(payload) + (-len(payload) % align)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    path.write_bytes(head + bytes(-len(head) % align) + data)
    return path


def tensor_bytes(path: Path) -> dict[bytes, tuple[int, bytes]]:
    with path.open("rb") as f:
        layout = read_layout(f)
    raw = path.read_bytes()
    return {
        t.name: (
            t.type,
            raw[layout.data_start + t.offset : layout.data_start + t.offset + t.nbytes],
        )
        for t in layout.tensors
    }


def q5_0_blocks(rng: np.random.Generator, n: int) -> bytes:
    blocks = rng.integers(0, 256, size=(n, 22), dtype=np.uint8)
    blocks[:, :2] = np.frombuffer(rng.normal(size=n).astype("<f2").tobytes(), np.uint8).reshape(
        n, 2
    )
    return blocks.tobytes()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    return write_gguf(
        tmp_path / "model.gguf",
        [
            ("norm.weight", F32, (5,), rng.normal(size=5).astype("<f4").tobytes()),
            ("attn_q.weight", Q5_0, (64, 3), q5_0_blocks(rng, 6)),
            ("ffn_down.weight", Q4_K, (256, 2), rng.integers(0, 256, 288, np.uint8).tobytes()),
            ("attn_k.weight", Q5_0, (32, 1), q5_0_blocks(rng, 1)),
        ],
        alignment=64,
    )


def test_a_widened_copy_keeps_the_metadata_and_every_weight(model, tmp_path):
    copy = widened_copy(model, tmp_path / "cache")

    assert copy is not None and copy.parent == tmp_path / "cache"
    with model.open("rb") as f, copy.open("rb") as g:
        was, now = read_layout(f), read_layout(g)
    assert now.metadata == was.metadata and now.kv_count == was.kv_count
    assert [t.type for t in now.tensors] == [F32, Q8_0, Q4_K, Q8_0]
    assert [t.dims for t in now.tensors] == [t.dims for t in was.tensors]
    assert all(t.offset % 64 == 0 for t in now.tensors) and now.data_start % 64 == 0
    before, after = tensor_bytes(model), tensor_bytes(copy)
    for name, (kind, data) in before.items():
        if kind == Q5_0:
            assert after[name][0] == Q8_0
            assert np.array_equal(q8_0_values(after[name][1]), q5_0_values(data))
        else:
            assert after[name] == (kind, data)


def test_the_copy_is_written_once_and_again_when_the_source_changes(model, tmp_path):
    cache = tmp_path / "cache"
    first = widened_copy(model, cache)
    assert first is not None
    written, inode = first.stat().st_mtime_ns, first.stat().st_ino
    assert widened_copy(model, cache) == first
    assert first.stat().st_ino == inode, "served from the cache, not written again"

    os.utime(model, ns=(written + 10**9, written + 10**9))  # the file was replaced
    second = widened_copy(model, cache)
    assert second is not None and second != first
    assert not first.exists(), "the stale copy of the same source is removed"
    assert sorted(p.name for p in cache.iterdir()) == [second.name]


def test_a_cache_keeps_only_the_most_recently_served_copies(tmp_path):
    rng = np.random.default_rng(1)
    sources = [
        write_gguf(tmp_path / f"m{i}.gguf", [("w", Q5_0, (32, 1), q5_0_blocks(rng, 1))])
        for i in range(MAX_COPIES + 2)
    ]
    cache = tmp_path / "cache"
    copies = []
    for i, source in enumerate(sources):
        copy = widened_copy(source, cache)
        assert copy is not None
        os.utime(copy, ns=(i * 10**9, i * 10**9))
        copies.append(copy)
    kept = sorted(p.name for p in cache.glob("*.gguf"))
    assert kept == sorted(c.name for c in copies[-MAX_COPIES:])


def test_a_file_with_nothing_to_widen_is_served_as_it_is_and_nothing_is_written(tmp_path):
    plain = write_gguf(tmp_path / "plain.gguf", [("w", F32, (4,), bytes(16))])
    not_gguf = tmp_path / "junk.gguf"
    not_gguf.write_bytes(b"GGUF\x03\x00\x00\x00\x01")  # ends inside its header
    cache = tmp_path / "cache"

    assert widened_copy(plain, cache) is None
    assert widened_copy(not_gguf, cache) is None
    assert not cache.exists()


def test_an_unwritable_cache_serves_the_file_as_it_is_with_a_warning(model, tmp_path, caplog):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory should be")
    caplog.set_level(logging.WARNING)

    assert widened_copy(model, blocked) is None
    assert "cannot write its widened copy" in caplog.text
    assert blocked.read_text().startswith("a file")

"""Reading `.base` headers from real files: every refusal is one line naming the file."""

from __future__ import annotations

import errno
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from superfluid.adapters.bundle_files import read_header, write_bundle
from superfluid.domain.bundle_header import MAX_HEADER_LEN, PREFIX_SIZE, weights_offset
from superfluid.domain.errors import HeaderError

DRAFTER = {
    "arch": "dflash",
    "created": "2026-05-01T00:00:00Z",
    "config": {"hidden_size": 2560, "vocab_size": 151936, "num_target_layers": 36},
    "source": {"filename": "Qwen3-4B-DFlash"},
}


def raw_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def prefix(header_len: int, *, magic: bytes = b"BASE", version: int = 1) -> bytes:
    return magic + struct.pack("<IQ", version, header_len)


def refusal(path: Path) -> str:
    with pytest.raises(HeaderError) as caught:
        read_header(path)
    message = caught.value.message
    assert "\n" not in message
    assert str(path) in message
    return message


# --- what reads --------------------------------------------------------------------------------


def test_a_written_bundle_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "Qwen3-4B-DFlash-Q4.base"
    write_bundle(path, DRAFTER, weights=b"\x01\x02\x03")
    header = read_header(path)
    assert header.arch == "dflash"
    assert header.hidden_size == 2560
    assert header.num_target_layers == 36
    assert header.source_filename == "Qwen3-4B-DFlash"
    assert header.raw == DRAFTER


def test_the_writer_puts_the_weights_at_the_next_64_kib_boundary(tmp_path: Path) -> None:
    path = tmp_path / "m.base"
    write_bundle(path, {"arch": "qwen3"}, weights=b"weights!")
    data = path.read_bytes()
    magic, version, header_len = struct.unpack_from("<4sIQ", data)
    assert (magic, version) == (b"BASE", 1)
    assert json.loads(data[PREFIX_SIZE : PREFIX_SIZE + header_len]) == {"arch": "qwen3"}
    blob = weights_offset(header_len)
    assert blob == 64 * 1024
    assert data[PREFIX_SIZE + header_len : blob] == bytes(blob - PREFIX_SIZE - header_len)
    assert data[blob:] == b"weights!"


def test_the_writer_creates_missing_directories(tmp_path: Path) -> None:
    path = tmp_path / "org" / "repo" / "default-q4" / "model.base"
    write_bundle(path, {"arch": "eagle3"})
    assert read_header(path).arch == "eagle3"


def test_a_symlink_to_a_bundle_reads(tmp_path: Path) -> None:
    real = tmp_path / "real.base"
    write_bundle(real, DRAFTER)
    link = tmp_path / "link.base"
    link.symlink_to(real)
    assert read_header(link).arch == "dflash"


def test_only_the_header_is_read_never_the_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.base"
    write_bundle(path, DRAFTER, weights=bytes(4 << 20))
    header_len = struct.unpack_from("<Q", path.read_bytes(), 8)[0]
    read_sizes: list[int] = []
    real_fdopen = os.fdopen

    class Counting:
        def __init__(self, handle: Any) -> None:
            self._handle = handle

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self._handle.close()

        def fileno(self) -> int:
            return int(self._handle.fileno())

        def read(self, size: int = -1) -> bytes:
            read_sizes.append(size)
            return bytes(self._handle.read(size))

    def counting_fdopen(fd: int, *args: Any, **kwargs: Any) -> Counting:
        return Counting(real_fdopen(fd, *args, **kwargs))

    monkeypatch.setattr("superfluid.adapters.bundle_files.os.fdopen", counting_fdopen)
    read_header(path)
    assert read_sizes == [PREFIX_SIZE, header_len]


# --- the file's own problems -------------------------------------------------------------------


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    message = refusal(tmp_path / "nowhere.base")
    assert message == f"{tmp_path / 'nowhere.base'}: no such file"


def test_a_directory_is_not_a_bundle(tmp_path: Path) -> None:
    path = tmp_path / "dir.base"
    path.mkdir()
    assert refusal(path) == f"{path} is a directory, not a .base bundle"


def test_a_gguf_is_named_as_a_gguf(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "Qwen3-4B-Q4_K_M.base", b"GGUF\x03\x00\x00\x00" + bytes(64))
    assert refusal(path) == f"{path} is a GGUF model, not a .base bundle"


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0, reason="root reads files whatever their mode"
)
def test_an_unreadable_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "locked.base"
    write_bundle(path, DRAFTER)
    path.chmod(0)
    try:
        assert "cannot read it" in refusal(path)
    finally:
        path.chmod(0o600)


def test_a_permission_error_says_so_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "locked.base"
    write_bundle(path, DRAFTER)

    def denied(*args: Any, **kwargs: Any) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("superfluid.adapters.bundle_files.os.open", denied)
    assert refusal(path) == f"{path}: cannot read it (Permission denied)"


def test_a_path_through_a_file_says_so(tmp_path: Path) -> None:
    parent = raw_file(tmp_path / "not-a-dir", b"")
    assert refusal(parent / "x.base") == f"{parent / 'x.base'}: cannot read it (Not a directory)"


def test_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    loop = tmp_path / "loop.base"
    loop.symlink_to(loop)
    assert refusal(loop).startswith(f"{loop}: cannot read it (")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.timeout(10)
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "pipe.base"
    os.mkfifo(path)
    assert "not a regular file" in refusal(path)


# --- the bytes' problems (the domain's words, with the path) -----------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "too short for a .base bundle: 0 bytes"),
        (b"BASE\x01\x00", "too short for a .base bundle: 6 bytes"),
        (b"ZIPF" + bytes(12), "bad magic b'ZIPF'"),
        (prefix(2, version=2) + b"{}", ".base version 2 is not supported (only version 1)"),
        (prefix(0), "the .base header length is 0"),
        (prefix(MAX_HEADER_LEN + 1), "the .base header length 268435457 is over 256 MiB"),
        (prefix(1000) + b"{}", "runs past the end of the file (18 bytes)"),
        (prefix(5) + b"{oops", "the .base header is not valid JSON"),
        (prefix(3) + b'"\xff"', "the .base header is not UTF-8"),
        (prefix(2) + b"[]", "the .base header is JSON an array, not an object"),
        (prefix(12) + b'{"arch": 7 }', "the .base header's arch must be a string"),
    ],
    ids=[
        "empty",
        "truncated-prefix",
        "wrong-magic",
        "version-2",
        "length-0",
        "length-over-256-mib",
        "length-past-eof",
        "invalid-json",
        "not-utf8",
        "not-an-object",
        "wrong-key-type",
    ],
)
def test_a_header_that_does_not_read_is_one_line_naming_the_file(
    tmp_path: Path, data: bytes, expected: str
) -> None:
    path = raw_file(tmp_path / "broken.base", data)
    message = refusal(path)
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_a_header_length_past_the_end_is_refused_before_reading_it(tmp_path: Path) -> None:
    # 256 MiB announced in a 1 KiB file: refused from the file size, not by trying to read it.
    path = raw_file(tmp_path / "lying.base", prefix(MAX_HEADER_LEN) + bytes(1024))
    message = refusal(path)
    assert f"the .base header length {MAX_HEADER_LEN} runs past the end of the file" in message


def test_a_bundle_cut_off_inside_its_header_is_refused(tmp_path: Path) -> None:
    full = tmp_path / "full.base"
    write_bundle(full, DRAFTER)
    cut = raw_file(tmp_path / "cut.base", full.read_bytes()[: PREFIX_SIZE + 10])
    assert "runs past the end of the file" in refusal(cut)


def test_a_path_with_a_newline_still_gives_one_line(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "two\nlines.base", b"nope")
    with pytest.raises(HeaderError) as caught:
        read_header(path)
    assert "\n" not in caught.value.message
    assert "too short for a .base bundle" in caught.value.message

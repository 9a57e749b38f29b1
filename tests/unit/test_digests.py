"""Each file is hashed once: the digest cache on real files (§5)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from superfluid.adapters.digests import DigestCache, tty_progress


class Records(logging.Handler):
    """The `superfluid` logger's lines, whatever the CLI did to propagation in earlier tests."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    logger = logging.getLogger("superfluid")
    handler = Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_digest_is_the_files_sha256(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 17)  # crosses several 1 MiB reads
    path = write(tmp_path / "d.base", data)
    assert DigestCache(tmp_path / "home").sha256(path) == sha(data)


def test_an_unchanged_file_is_not_hashed_again(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"drafter bytes")
    first = DigestCache(tmp_path / "home")
    digest = first.sha256(path)
    assert (first.computed, first.hashed_bytes) == (1, 13)
    assert first.sha256(path) == digest
    # A fresh cache (the next start) reads the record from disk instead of hashing.
    second = DigestCache(tmp_path / "home")
    assert second.sha256(path) == digest
    assert (first.computed, second.computed, second.hashed_bytes) == (1, 0, 0)


def test_the_record_is_named_by_the_canonical_path_and_holds_the_stamp(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"abc")
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    name = hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()
    record = tmp_path / "home" / "cache" / "sha256" / name
    assert cache.record_path(path) == record
    content = json.loads(record.read_text())
    status = path.stat()
    assert content["sha256"] == sha(b"abc")
    assert content["stamp"] == [
        status.st_dev,
        status.st_ino,
        status.st_size,
        status.st_mtime_ns,
        status.st_ctime_ns,
    ]


def test_a_symlink_shares_its_targets_record(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"abc")
    link = tmp_path / "link.base"
    link.symlink_to(path)
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    assert cache.sha256(link) == sha(b"abc")
    assert cache.computed == 1


def test_a_changed_file_is_hashed_again(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"version one")
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    write(path, b"version two")
    assert cache.sha256(path) == sha(b"version two")
    assert cache.computed == 2


def test_touching_a_file_is_enough_to_hash_it_again(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"same bytes")
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
    assert cache.sha256(path) == sha(b"same bytes")
    assert cache.computed == 2
    # ... and the new stamp is remembered in turn.
    assert cache.sha256(path) == sha(b"same bytes")
    assert cache.computed == 2


def test_a_file_replaced_by_another_is_hashed_again(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"old")
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    fresh = write(tmp_path / "d.base.new", b"new")
    os.replace(fresh, path)
    assert cache.sha256(path) == sha(b"new")


def test_a_file_that_changes_while_it_is_hashed_is_not_remembered(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"x" * (3 << 20))
    # A threshold of 0 makes every file "large", so progress reports arrive mid-hash.
    cache = DigestCache(tmp_path / "home", large_file=0)
    reports: list[tuple[int, int]] = []

    def meddle(done: int, total: int) -> None:
        reports.append((done, total))
        if len(reports) == 2:
            with path.open("ab") as handle:
                handle.write(b"appended while hashing")

    cache.sha256(path, progress=meddle)
    assert len(reports) >= 2
    assert not cache.record_path(path).exists()
    # The next call hashes the file as it now is, and that digest is kept.
    assert cache.sha256(path) == sha(path.read_bytes())
    assert cache.record_path(path).exists()
    assert cache.computed == 2


def test_a_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    cache = DigestCache(tmp_path / "home")
    paths = [write(tmp_path / f"d{i}.base", bytes([i]) * 10) for i in range(5)]
    for path in paths:
        cache.sha256(path)
    path = paths[0]
    write(path, b"changed")
    cache.sha256(path)  # replaces an existing record
    names = sorted(p.name for p in cache.directory.iterdir())
    assert names == sorted(cache.record_path(p).name for p in paths)


@pytest.mark.parametrize(
    "damage",
    [
        "",
        "{not json",
        "[]",
        '{"version": 1, "stamp": "nope", "sha256": "00"}',
        "\xff garbage",
    ],
    ids=["empty", "invalid-json", "not-an-object", "wrong-fields", "not-utf8"],
)
def test_a_corrupt_record_is_ignored_and_replaced(tmp_path: Path, damage: str) -> None:
    path = write(tmp_path / "d.base", b"abc")
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    cache.record_path(path).write_bytes(damage.encode("latin-1"))
    assert cache.sha256(path) == sha(b"abc")
    assert cache.computed == 2
    assert json.loads(cache.record_path(path).read_text())["sha256"] == sha(b"abc")


def test_a_record_with_a_wrong_digest_shape_is_ignored(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"abc")
    cache = DigestCache(tmp_path / "home")
    cache.sha256(path)
    record = cache.record_path(path)
    content = json.loads(record.read_text())
    record.write_text(json.dumps({**content, "sha256": "not-a-digest"}))
    assert cache.sha256(path) == sha(b"abc")
    assert cache.computed == 2


def test_an_unreadable_record_is_ignored(tmp_path: Path) -> None:
    path = write(tmp_path / "d.base", b"abc")
    cache = DigestCache(tmp_path / "home")
    cache.record_path(path).mkdir(parents=True)  # a directory where the record should be
    assert cache.sha256(path) == sha(b"abc")


def test_an_unwritable_cache_is_not_fatal_and_says_so_once(
    tmp_path: Path, log_lines: list[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    write(home / "cache", b"a file where the cache directory should be")
    cache = DigestCache(home)
    first = write(tmp_path / "a.base", b"a")
    second = write(tmp_path / "b.base", b"b")
    assert cache.sha256(first) == sha(b"a")
    assert cache.sha256(second) == sha(b"b")
    warnings = [line for line in log_lines if "cannot keep file digests" in line]
    assert len(warnings) == 1
    assert "\n" not in warnings[0]


def test_a_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DigestCache(tmp_path / "home").sha256(tmp_path / "missing.base")


def test_a_small_file_is_hashed_quietly(tmp_path: Path, log_lines: list[str]) -> None:
    path = write(tmp_path / "d.base", b"small")
    reports: list[tuple[int, int]] = []
    DigestCache(tmp_path / "home").sha256(path, progress=lambda d, t: reports.append((d, t)))
    assert reports == []
    assert log_lines == []


def test_progress_counts_up_to_the_file_size(tmp_path: Path, log_lines: list[str]) -> None:
    size = (2 << 20) + 5
    path = write(tmp_path / "d.base", bytes(size))
    reports: list[tuple[int, int]] = []
    DigestCache(tmp_path / "home", large_file=size).sha256(
        path, progress=lambda d, t: reports.append((d, t))
    )
    assert reports == [(0, size), (1 << 20, size), (2 << 20, size), (size, size)]
    assert log_lines == [f"checking {path} against the hub catalog's sha256 (once per file)"]


@pytest.mark.slow
def test_a_1_gib_file_is_announced_hashed_once_and_then_answered_from_the_cache(
    tmp_path: Path, log_lines: list[str]
) -> None:
    path = tmp_path / "big.base"
    with path.open("wb") as handle:
        handle.truncate(1 << 30)  # sparse: no disk blocks, the same digest as 1 GiB of zeros
    cache = DigestCache(tmp_path / "home")
    reports: list[tuple[int, int]] = []

    started = time.perf_counter()
    first = cache.sha256(path, progress=lambda d, t: reports.append((d, t)))
    hashed = time.perf_counter() - started

    started = time.perf_counter()
    second = DigestCache(tmp_path / "home").sha256(path)
    cached = time.perf_counter() - started

    print(f"1 GiB sparse file: hashed in {hashed:.2f} s, answered from the cache in {cached:.4f} s")
    assert first == second == "49bc20df15e412a64472421e13fe86ff1c5165e18b2afccf160d4dc19fe68a14"
    assert log_lines == [f"checking {path} against the hub catalog's sha256 (once per file)"]
    assert reports[-1] == (1 << 30, 1 << 30)
    assert cache.hashed_bytes == 1 << 30
    assert cached < hashed


def test_progress_is_drawn_only_on_a_terminal() -> None:
    assert tty_progress(io.StringIO()) is None

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = tty_progress(screen)
    assert bar is not None
    bar(0, 100)
    bar(50, 100)
    bar(100, 100)
    assert "sha256" in screen.getvalue()


def test_a_closed_stream_gets_no_progress_bar() -> None:
    stream = io.StringIO()
    stream.close()
    assert tty_progress(stream) is None

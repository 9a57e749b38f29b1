"""Each file's sha256, computed once and remembered until the file changes (docs/contract.md §5).

Bundles are gigabytes and the catalog check runs at every start, so a digest is kept in
`<home>/cache/sha256/<sha256 of the file's canonical path>` together with a stamp of the file:
(device, inode, size, mtime ns, ctime ns). The stamp is what makes reuse safe: rewriting,
truncating, replacing or even `touch`ing the file changes it, and a changed stamp means hash again.

The cache only ever saves time. A record that does not read is ignored, a cache directory that
cannot be written costs a log line and a re-hash next time, and a file that changed while it was
being hashed is not remembered, because its digest belongs to no single version of the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TaskID, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

log = logging.getLogger("superfluid")

Progress = Callable[[int, int], None]

READ_SIZE = 1 << 20
# Below this a file hashes in well under a second: no log line, no progress bar.
LARGE_FILE = 1 << 30

_RECORD_VERSION = 1
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What identifies one version of a file's bytes without reading them."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> Stamp:
        return cls(
            status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns
        )


class DigestCache:
    """sha256 digests of files, kept under `<home>/cache/sha256/` and reused while unchanged.

    `computed` and `hashed_bytes` count real hashing work, so a caller (or a test) can see that
    a second call answered from the cache.
    """

    def __init__(self, home: Path, *, large_file: int = LARGE_FILE) -> None:
        self.directory = home / "cache" / "sha256"
        self.large_file = large_file
        self.computed = 0
        self.hashed_bytes = 0
        self._warned_unwritable = False

    def record_path(self, path: Path) -> Path:
        """Where the digest of `path` is kept: named by the sha256 of its canonical path."""
        canonical = os.fsencode(os.path.realpath(path))
        return self.directory / hashlib.sha256(canonical).hexdigest()

    def sha256(self, path: Path, *, progress: Progress | None = None) -> str:
        """The file's sha256 (lowercase hex); OSError when the file cannot be read."""
        record = self.record_path(path)
        remembered = _read_record(record, Stamp.of(os.stat(path)))
        if remembered is not None:
            return remembered
        with path.open("rb") as handle:
            before = Stamp.of(os.fstat(handle.fileno()))
            if before.size >= self.large_file:
                log.info("checking %s against the hub catalog's sha256 (once per file)", path)
            else:
                progress = None
            digest = self._hash(handle, before.size, progress)
        # Compared through the path, not the open handle, so a file replaced by a rename while
        # it was read (a new inode) also counts as changed.
        if Stamp.of(os.stat(path)) == before:
            self._remember(record, path, before, digest)
        return digest

    def _hash(self, handle: io.BufferedReader, total: int, progress: Progress | None) -> str:
        hasher = hashlib.sha256()
        done = 0
        buffer = bytearray(READ_SIZE)
        view = memoryview(buffer)
        if progress is not None:
            progress(0, total)
        while count := handle.readinto(buffer):
            hasher.update(view[:count])
            done += count
            if progress is not None:
                progress(done, total)
        self.computed += 1
        self.hashed_bytes += done
        return hasher.hexdigest()

    def _remember(self, record: Path, path: Path, stamp: Stamp, digest: str) -> None:
        content = {
            "version": _RECORD_VERSION,
            "path": os.path.realpath(path),
            "stamp": list(astuple(stamp)),
            "sha256": digest,
        }
        try:
            _write_atomically(record, json.dumps(content) + "\n")
        except OSError as err:
            if not self._warned_unwritable:
                self._warned_unwritable = True
                log.warning(
                    "cannot keep file digests in %s (%s); large drafters will be hashed again "
                    "at the next start",
                    self.directory,
                    err.strerror or type(err).__name__,
                )


def _read_record(record: Path, stamp: Stamp) -> str | None:
    """The remembered digest when the record reads and its stamp is `stamp`; else None."""
    try:
        content = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(content, dict) or content.get("version") != _RECORD_VERSION:
        return None
    digest = content.get("sha256")
    if content.get("stamp") != list(astuple(stamp)) or not isinstance(digest, str):
        return None
    return digest if _HEX_DIGEST.fullmatch(digest) else None


def _write_atomically(target: Path, text: str) -> None:
    """Replace `target` with `text` so a reader sees the old record or the new, never half.

    The temporary file lives in the same directory because a rename is atomic only within one
    filesystem. No fsync: a record lost to a crash only costs one re-hash.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def tty_progress(stream: TextIO) -> Progress | None:
    """A progress bar drawn on `stream` when it is a terminal; None otherwise (logs, pipes)."""
    try:
        interactive = stream.isatty()
    except (AttributeError, ValueError):
        return None
    return _RichBar(stream) if interactive else None


class _RichBar:
    """A rich progress bar that appears on the first report and goes away on the last."""

    def __init__(self, stream: TextIO) -> None:
        self._progress = RichProgress(
            TextColumn("sha256"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TimeRemainingColumn(),
            console=Console(file=stream),
            transient=True,
        )
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._task is None:
            self._progress.start()
            self._task = self._progress.add_task("sha256", total=total)
        self._progress.update(self._task, completed=done, total=total)
        if done >= total:
            self._progress.stop()
            self._task = None

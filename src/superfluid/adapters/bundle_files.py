"""`.base` bundles on disk: read a header without touching the weights, and write small bundles.

Reading takes the 16-byte prefix, then exactly the header length it announces, never more: a
bundle is gigabytes of weights behind a header of kilobytes, and a drafter search reads many
headers. What the bytes mean is the domain's rule (`domain.bundle_header`); this module only adds
the file's own problems (missing, unreadable, a directory, a GGUF) and names the file in every
message, so each refusal is one line that says which file and what is wrong.

`write_bundle` is the inverse, for fixtures and tests: the layout of docs/contract.md §10 with the
weights blob at the next 64 KiB boundary.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from superfluid.domain.bundle_header import (
    MAGIC,
    PREFIX_SIZE,
    SUPPORTED_VERSION,
    BundleHeader,
    parse_header,
    parse_prefix,
    weights_offset,
)
from superfluid.domain.errors import HeaderError, NotABundle

_GGUF_MAGIC = b"GGUF"
_PREFIX = struct.Struct("<4sIQ")
# Opening a FIFO for reading blocks until a writer appears; non-blocking opens it at once so the
# type check below can refuse it. Regular files ignore the flag.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def read_header(path: Path) -> BundleHeader:
    """The header of the `.base` bundle at `path`, or a HeaderError naming the file and why not."""
    shown = _shown(path)
    data, size = _header_bytes(path, shown)
    try:
        return parse_header(data, file_size=size)
    except HeaderError as err:
        raise HeaderError(f"{shown}: {err.message}") from None


def _header_bytes(path: Path, shown: str) -> tuple[bytes, int]:
    """The prefix and the header bytes it announces (no more), with the file's size."""
    with _open_regular(path, shown) as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(PREFIX_SIZE)
            if prefix.startswith(_GGUF_MAGIC):
                raise NotABundle(f"{shown} is a GGUF model, not a .base bundle")
            try:
                header_len = parse_prefix(prefix)
            except HeaderError as err:
                raise type(err)(f"{shown}: {err.message}") from None
            # Never read past the end the file has: a damaged length of 200 MiB in a 1 KiB file
            # must cost 1 KiB, and the domain then says that the length runs past the end.
            body = handle.read(max(0, min(header_len, size - PREFIX_SIZE)))
        except OSError as err:
            raise HeaderError(f"{shown}: cannot read it ({_reason(err)})") from None
    return prefix + body, size


def _open_regular(path: Path, shown: str) -> BinaryIO:
    """`path` opened for binary reading, refusing what is not a regular file in one line."""
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise HeaderError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise HeaderError(f"{shown} is a directory, not a .base bundle") from None
    except PermissionError as err:
        # Windows reports a directory as a permission problem; say what it really is.
        if path.is_dir():
            raise HeaderError(f"{shown} is a directory, not a .base bundle") from None
        raise HeaderError(f"{shown}: cannot read it ({_reason(err)})") from None
    except OSError as err:
        # A parent that is a file, a symlink loop, a name too long: the system's words say it.
        raise HeaderError(f"{shown}: cannot read it ({_reason(err)})") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise HeaderError(f"{shown} is a directory, not a .base bundle")
        if not stat.S_ISREG(mode):
            raise HeaderError(f"{shown} is not a regular file, so not a .base bundle")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def _shown(path: Path) -> str:
    """The path as a user wrote it, escaped when it holds characters that would break the line."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


def write_bundle(path: Path, header: Mapping[str, Any], *, weights: bytes = b"") -> None:
    """Write a version-1 `.base` bundle: prefix, JSON header, zero padding to 64 KiB, weights.

    Test and fixture helper: the file is written in place (not atomically) and the parent
    directory is created when missing.
    """
    document = json.dumps(header, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    encoded = document.encode("utf-8")
    prefix = _PREFIX.pack(MAGIC, SUPPORTED_VERSION, len(encoded))
    padding = weights_offset(len(encoded)) - PREFIX_SIZE - len(encoded)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.write(prefix)
        handle.write(encoded)
        handle.write(bytes(padding))
        handle.write(weights)

"""Which runtime a model file belongs to: the file decides (docs/contract.md §1).

The runtimes' records are asked in order (adapters/runtime_record.py); the first that
recognises the file serves it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from superfluid.adapters.bundle_files import read_header
from superfluid.adapters.runtime_record import RuntimeRecord
from superfluid.application.ports import ModelFile
from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.errors import ModelFileError as ModelFileError


def runtime_for(path: Path, runtimes: Sequence[RuntimeRecord]) -> RuntimeRecord:
    """The record of the runtime that serves `path`; ModelFileError when none does."""
    if path.is_dir():
        magic = None
    elif not path.exists():
        raise ModelFileError(f"{path}: no such model file")
    elif not path.is_file():
        # A FIFO or a device: opening it to read the magic could block forever.
        raise ModelFileError(f"{path}: not a regular file, so not a model file")
    else:
        try:
            with path.open("rb") as handle:
                magic = handle.read(4)
        except OSError as error:
            raise ModelFileError(
                f"{path}: cannot read the model file ({error.strerror})"
            ) from error
    for record in runtimes:
        if record.recognises(path, magic):
            return record
    served = ", ".join(record.serves for record in runtimes)
    if magic is None:
        raise ModelFileError(
            f"{path}: a directory that is not a model superfluid can serve ({served})"
        )
    raise ModelFileError(f"{path}: not a model superfluid can serve (expected {served})")


class LocalModelFiles:
    """The `ModelFiles` port on the local filesystem: the file decides its runtime, and a
    `.base` bundle's header is read here, once, for everything startup asks of it."""

    def __init__(self, runtimes: Sequence[RuntimeRecord]) -> None:
        self._runtimes = tuple(runtimes)

    def open(self, path: Path) -> ModelFile:
        record = runtime_for(path, self._runtimes)
        header = read_header(path) if record.reads_bundle_header else None
        return ModelFile(path, record.name, header)

    def read_header(self, path: Path) -> BundleHeader:
        return read_header(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

"""Which runtime a model file belongs to: the file decides (docs/contract.md §1)."""

from __future__ import annotations

import os
from pathlib import Path

from superfluid.adapters.bundle_files import read_header
from superfluid.application.ports import ModelFile
from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.errors import ModelFileError as ModelFileError

GGUF_MAGIC = b"GGUF"
BASE_MAGIC = b"BASE"


def runtime_for(path: Path) -> str:
    """`llamacpp` for a GGUF file, `mlx` for an MLX model directory, `basert` for a `.base`."""
    if path.is_dir():
        has_config = (path / "config.json").is_file()
        if has_config and any(path.glob("*.safetensors")):
            return "mlx"
        raise ModelFileError(
            f"{path}: a directory that is not an MLX model (needs config.json and *.safetensors)"
        )
    if not path.exists():
        raise ModelFileError(f"{path}: no such model file")
    if not path.is_file():
        # A FIFO or a device: opening it to read the magic could block forever.
        raise ModelFileError(f"{path}: not a regular file, so not a model file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelFileError(f"{path}: cannot read the model file ({error.strerror})") from error
    if magic == GGUF_MAGIC:
        return "llamacpp"
    if magic == BASE_MAGIC:
        return "basert"
    raise ModelFileError(
        f"{path}: not a model superfluid can serve (expected a .gguf file, a .base bundle"
        " or an MLX model directory)"
    )


class LocalModelFiles:
    """The `ModelFiles` port on the local filesystem: the file decides its runtime, and a
    `.base` bundle's header is read here, once, for everything startup asks of it."""

    def open(self, path: Path) -> ModelFile:
        runtime = runtime_for(path)
        header = read_header(path) if runtime == "basert" else None
        return ModelFile(path, runtime, header)

    def read_header(self, path: Path) -> BundleHeader:
        return read_header(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

